"""Sample outputs in docs/ come from real runs, not from memory.

docs/check.md shows what ``check`` prints for a real translator mistake (the first
``drop-segment-boundary`` mutant of the path-prefix scenario: a ``PathPrefix`` whose
segment boundary was lost), in text and in JSON; docs/mutate.md shows a real ``mutate``
summary. Each test runs the command and compares the doc's GENERATED block with what it
printed; ``pytest tests/test_docs_generated.py --update-goldens`` rewrites the blocks.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import BASE, FIXTURES, REPO_ROOT, rel, translate_scenario
from docblocks import check_block

from verifier.cli import main
from verifier.mutate.catalog import mutants
from verifier.xds.snapshot import dumps

CHECK_MD = REPO_ROOT / "docs" / "check.md"
MUTATE_MD = REPO_ROOT / "docs" / "mutate.md"
REGENERATE = "pytest tests/test_docs_generated.py --update-goldens"
SCENARIO = "httproute-path-prefix-matching"
OPERATOR = "drop-segment-boundary"


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(list(args))
    return rc, capsys.readouterr().out


def _fail(problem: str | None) -> None:
    if problem:
        pytest.fail(problem, pytrace=False)


def _broken_xds(tmp_path: Path) -> Path:
    snap = translate_scenario(FIXTURES / SCENARIO)
    mutant = next(m for m in mutants(snap) if m.operator == OPERATOR)
    path = tmp_path / "broken.json"
    path.write_text(dumps(mutant.snapshot), encoding="utf-8")
    return path


def _fenced(lang: str, command: str, out: str) -> str:
    return f"```{lang}\n{command}\n{out.rstrip()}\n```" if command else f"```{lang}\n{out}```"


def test_check_md_samples_come_from_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], repo_cwd: Path, update_goldens: bool
) -> None:
    xds = _broken_xds(tmp_path)
    args = ["check", rel(BASE), rel(FIXTURES / SCENARIO), "--xds", str(xds)]
    rc, text = _run(capsys, *args)
    assert rc == 1 and "EV201" in text, text  # the sample must show a real finding
    rc, js = _run(capsys, *args, "--format", "json")
    assert rc == 1
    _fail(
        check_block(CHECK_MD, "check-text", _fenced("text", "", text), update_goldens, REGENERATE)
    )
    _fail(check_block(CHECK_MD, "check-json", _fenced("json", "", js), update_goldens, REGENERATE))


def test_mutate_md_sample_comes_from_a_run(
    capsys: pytest.CaptureFixture[str], repo_cwd: Path, update_goldens: bool
) -> None:
    args = ["mutate", rel(BASE), rel(FIXTURES / SCENARIO)]
    rc, out = _run(capsys, *args)
    assert rc == 0, out
    sample = _fenced("text", "$ edge-verify " + " ".join(args), out)
    _fail(check_block(MUTATE_MD, "mutate-summary", sample, update_goldens, REGENERATE))
