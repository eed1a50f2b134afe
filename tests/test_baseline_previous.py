"""``check --baseline DIR|REF``: the previous configuration given as a directory or a
git ref, its agreements worked out once and cached. A baseline run must report
exactly what a full run reports; the cache must be read back (not worked out again)
and must hold what ``--save-baseline`` writes for the same inputs."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from test_baseline import _changed_line, _line_edits
from test_check_cli import CLI, cli  # noqa: F401
from test_parallel_check import FIXTURES

from verifier import previous

SCENARIO = "httproute-hostname-intersection"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    found = tmp_path / "cache"
    monkeypatch.setenv(previous.CACHE_ENV, str(found))
    return found


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: CLI) -> Path:  # noqa: F811
    """A git repository holding a scenario and its translation, committed as main; the
    current directory is inside it (one level down, to show paths are taken from the
    top of the repository)."""
    top = tmp_path / "repo"
    shutil.copytree(FIXTURES / "base", top / "config" / "base")
    shutil.copytree(FIXTURES / SCENARIO, top / "config" / "s")
    monkeypatch.chdir(top / "config")
    assert cli("translate", "base", "s", "-o", "xds.json").rc == 0
    _git(top, "init", "-q", "-b", "main")
    _git(top, "add", ".")
    _git(top, "commit", "-q", "-m", "main")
    return top


def _edit_a_route(route: Path) -> None:
    """One HTTPRoute line edited (not a backend's name: that changes every request)."""
    text = route.read_text()
    edits = [e for e in _line_edits(text) if "name:" not in _changed_line(text, e)]
    route.write_text(edits[-1])


# A new HTTPRoute on a host of its own: only its own requests are new.
ADDED_ROUTE = """\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: added-since
  namespace: edge-infra
spec:
  parentRefs:
  - name: hostname-intersection
  hostnames:
  - added.example.com
  rules:
  - backendRefs:
    - name: infra-backend-v1
      port: 8080
"""


def _json(run: CLI, *args: str) -> tuple[int, dict[str, object], str]:
    got = run("check", *args, "--format", "json")
    assert got.rc in (0, 1), got.err
    return got.rc, got.json(), got.err


def test_a_ref_baseline_reports_what_a_full_run_reports(
    cli: CLI,  # noqa: F811
    repo: Path,
    cache: Path,
) -> None:
    _edit_a_route(repo / "config" / "s" / "resources.yaml")
    for xds in ((), ("--xds", "xds.json")):  # translated here; the committed (stale) xDS
        full_code, full, _ = _json(cli, "base", "s", *xds)
        code, rerun, err = _json(cli, "base", "s", *xds, "--baseline", "main")
        assert (code, rerun["findings"]) == (full_code, full["findings"])
        asked = rerun["summary"]["baseline"]  # type: ignore[index]
        assert 0 < asked["asked"] < asked["requests"]
        assert "cached as" in err
    assert len(list(cache.iterdir())) == 2  # one per mode: translated, --xds


def test_the_cache_is_read_back_and_holds_what_save_baseline_writes(
    cli: CLI,  # noqa: F811
    repo: Path,
    cache: Path,
) -> None:
    saved = repo / "saved.json"
    assert cli("check", "base", "s", "--xds", "xds.json", "--save-baseline", str(saved)).rc == 0
    _edit_a_route(repo / "config" / "s" / "resources.yaml")
    code, first, err = _json(cli, "base", "s", "--xds", "xds.json", "--baseline", "main")
    [cached] = cache.iterdir()
    assert json.loads(cached.read_text()) == json.loads(saved.read_text())
    # Read back: with the cached digests emptied, every request is asked, or proven
    # by the decision lists (which need no digest).
    doc = json.loads(cached.read_text())
    cached.write_text(json.dumps({**doc, "agreed": []}))
    again_code, again, err = _json(cli, "base", "s", "--xds", "xds.json", "--baseline", "main")
    assert "cached as" not in err
    assert (again_code, again["findings"]) == (code, first["findings"])
    asked = again["summary"]["baseline"]  # type: ignore[index]
    assert asked["asked"] + asked["proven"] == asked["requests"]
    # A damaged cache file is worked out again and replaced, not bad input.
    cached.write_text("{not json")
    _, third, err = _json(cli, "base", "s", "--xds", "xds.json", "--baseline", "main")
    assert "cached as" in err and third["findings"] == first["findings"]
    assert json.loads(cached.read_text()) == json.loads(saved.read_text())


def test_a_directory_baseline_reads_each_input_at_the_same_place(
    cli: CLI,  # noqa: F811
    repo: Path,
    cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = tmp_path / "before"
    shutil.copytree(repo / "config", before)
    _edit_a_route(repo / "config" / "s" / "resources.yaml")
    full_code, full, _ = _json(cli, "base", "s", "--xds", "xds.json")
    code, rerun, _ = _json(cli, "base", "s", "--xds", "xds.json", "--baseline", str(before))
    assert (code, rerun["findings"]) == (full_code, full["findings"])
    asked = rerun["summary"]["baseline"]  # type: ignore[index]
    assert 0 < asked["asked"] < asked["requests"]
    # From another directory the same inputs are elsewhere in DIR: none is there.
    monkeypatch.chdir(repo)
    got = cli("check", "config/base", "config/s", "--baseline", str(before))
    assert got.rc == 1 and "has none of the inputs: a full check" in got.err


def test_inputs_added_since_the_ref_are_left_out_of_its_check(
    cli: CLI,  # noqa: F811
    repo: Path,
    cache: Path,
) -> None:
    (repo / "config" / "added.yaml").write_text(ADDED_ROUTE)
    full_code, full, _ = _json(cli, "base", "s", "added.yaml")
    code, rerun, err = _json(cli, "base", "s", "added.yaml", "--baseline", "main")
    assert "has no added.yaml: the previous configuration is checked without it" in err
    assert (code, rerun["findings"]) == (full_code, full["findings"])
    asked = rerun["summary"]["baseline"]  # type: ignore[index]
    assert 0 < asked["asked"] < asked["requests"]
    # Without the xDS at the ref there is nothing to compare with: a full check.
    shutil.copy(repo / "config" / "xds.json", repo / "config" / "new-xds.json")
    code, rerun, err = _json(cli, "base", "s", "--xds", "new-xds.json", "--baseline", "main")
    assert "has no new-xds.json: every request is asked (a full check)" in err
    assert "baseline" not in rerun["summary"]


@pytest.mark.parametrize(
    ("given", "paths", "expected"),
    [
        ("no-such-ref", ("base", "s"), "not a git ref here [not-found]"),
        ("main", ("base", str(FIXTURES / SCENARIO)), "the inputs must lie inside it"),
        ("main", ("-",), "give a baseline file (--save-baseline)"),
    ],
)
def test_a_baseline_that_cannot_be_a_previous_configuration_is_bad_input(
    cli: CLI,  # noqa: F811
    repo: Path,
    cache: Path,
    given: str,
    paths: tuple[str, ...],
    expected: str,
) -> None:
    got = cli("check", *paths, "--baseline", given)
    assert got.rc == 2 and expected in got.err and "Traceback" not in got.err
    assert got.out == "" and not cache.exists()
