"""Loading the YAML in a child while the xDS loads changes nothing but the time taken.

The child only starts for big inputs (PARALLEL_LOAD_MIN_BYTES); here the
threshold is lowered so fixture-sized scenarios take that path too.
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from verifier import pipeline
from verifier.cli import main
from verifier.forked import ForkedCall

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SCENARIO = ["fixtures/base", "fixtures/httproute-header-matching"]


def _check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["check", *args, "--format", "json"])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def xds(tmp_path: Path, repo_cwd: Path) -> Path:
    path = tmp_path / "xds.json"
    assert main(["translate", *SCENARIO, "-o", str(path)]) == 0
    return path


def _fork_always(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Lower the threshold and count the children started."""
    started: list[int] = []
    real = ForkedCall.__init__

    def counting(self: ForkedCall[object], fn: object) -> None:
        started.append(1)
        real(self, fn)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline, "PARALLEL_LOAD_MIN_BYTES", 0)
    monkeypatch.setattr(ForkedCall, "__init__", counting)
    return started


@pytest.fixture
def forked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    return _fork_always(monkeypatch)


def test_same_findings_with_the_yaml_read_in_a_child(
    xds: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = json.loads(xds.read_text())
    broken = xds.parent / "broken.json"
    # Rename the first header matcher list away: findings, and a skip note.
    text = json.dumps(doc).replace('"headers": [', '"headers_x": [', 1)
    broken.write_text(text)
    serial = _check(capsys, *SCENARIO, "--xds", str(broken))
    assert serial[0] == 1 and json.loads(serial[1])["findings"]
    started = _fork_always(monkeypatch)
    parallel = _check(capsys, *SCENARIO, "--xds", str(broken))
    assert started, "the YAML was not loaded in a child"
    assert parallel == serial
    assert multiprocessing.active_children() == []


def test_yaml_errors_win_over_xds_errors_as_without_a_child(
    tmp_path: Path, forked: list[int], capsys: pytest.CaptureFixture[str], repo_cwd: Path
) -> None:
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("kind: HTTPRoute\nspec: [\n")
    bad_xds = tmp_path / "bad.json"
    bad_xds.write_text("{not json")
    code = main(["check", str(bad_yaml), "--xds", str(bad_xds)])
    err = capsys.readouterr().err
    assert forked
    assert code == 2
    assert f"{bad_yaml}:" in err and "bad.json" not in err


def test_xds_errors_are_reported_when_the_yaml_loads(
    tmp_path: Path, forked: list[int], capsys: pytest.CaptureFixture[str], repo_cwd: Path
) -> None:
    bad_xds = tmp_path / "bad.json"
    bad_xds.write_text('{"configs": [\n  {"@type": 7}\n]}')
    code = main(["check", *SCENARIO, "--xds", str(bad_xds)])
    err = capsys.readouterr().err
    assert forked
    assert code == 2
    assert f"{bad_xds}:" in err


def test_a_failing_child_falls_back_to_loading_here(
    xds: Path,
    forked: list[int],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ForkedCall, "result", lambda self: (self.close(), (False, None))[1])
    code, out, _ = _check(capsys, *SCENARIO, "--xds", str(xds))
    assert forked
    assert code == 0
    assert json.loads(out)["findings"] == []
