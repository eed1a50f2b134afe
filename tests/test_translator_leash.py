"""External translators on a leash: ``check --translator`` and ``fuzz --translator``.

Each case is one issue 34 found: an unbalanced quote was a traceback, a translator
that never returned or whose background child kept stdout open held fuzz for ever,
one printing whitespace without end took 8 GB, and a daemon it detached outlived
the tool. Now: exit 2 for the command line, a failure of the translator (exit 1 in
fuzz, 2 in check) within --translator-timeout, output within --max-input-bytes, and
nothing it started left running. The tool runs in a bounded forked child
(tests/hostile.py); tests/test_hostile_cluster.py draws many more such translators.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from conftest import MINIMAL_YAML
from hostile import Ran, rss_kib, run_tool, warm

FUZZ = ["--property", "models-agree", "--max-examples", "1", "--seed", "1"]
FUZZ += ["--budget", "30", "--shrink-budget", "0.5", "--database", "", "-o", os.devnull]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The minimal world; fuzz and check run once here first, so the children are warm."""
    root = tmp_path_factory.mktemp("world")
    (root / "world.yaml").write_text(MINIMAL_YAML)
    warm(["fuzz", *FUZZ, "--out", str(root / "found")])
    warm(["check", str(root / "world.yaml"), "-o", os.devnull])
    return root / "world.yaml"


def translator(tmp_path: Path, body: str) -> str:
    """A translator command: the shell script ``body``, given the paths as ``$@``."""
    script = tmp_path / "translator.sh"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def fuzz(tmp_path: Path, command: str, *extra: str) -> Ran:
    out = ["--out", str(tmp_path / "found")]
    return run_tool(["fuzz", "--translator", command, *FUZZ, *out, *extra], 40.0)


def ok(ran: Ran, bound_s: float) -> None:
    problem = ran.problem(bound_s, lie=True)
    assert problem is None, f"{problem}\nexit {ran.code}; stderr:\n{ran.err[-2000:]}"


def failures(tmp_path: Path) -> str:
    """What fuzz wrote of the failures it found (their fixtures' notes)."""
    return "".join(p.read_text() for p in (tmp_path / "found").rglob("README.md"))


@pytest.mark.parametrize("command", ["ghost 'unbalanced", ""])
@pytest.mark.parametrize("verb", ["fuzz", "check"])
def test_a_command_line_that_cannot_be_split_is_exit_2(
    verb: str, command: str, world: Path, tmp_path: Path
) -> None:
    argv = ["--translator", command]
    if verb == "fuzz":
        ran = fuzz(tmp_path, command)
    else:
        ran = run_tool(["check", str(world), *argv, "-o", os.devnull], 20.0)
    ok(ran, 10.0)
    assert "--translator" in ran.err and "[bad-command]" in ran.err


def test_fuzz_refuses_a_translator_it_cannot_find_before_searching(
    world: Path, tmp_path: Path
) -> None:
    ran = fuzz(tmp_path, str(tmp_path / "no-such-translator"))
    ok(ran, 10.0)
    assert "[not-found]" in ran.err and not (tmp_path / "found").exists()


def test_a_translator_that_never_returns_is_stopped_each_world(world: Path, tmp_path: Path) -> None:
    ran = fuzz(tmp_path, translator(tmp_path, "sleep 300"), "--translator-timeout", "0.5")
    # A translator failing on a valid world is what fuzz finds: exit 1, within the bound.
    assert ran.code == 1 and ran.problem(20.0, lie=False) is None, ran.err
    assert "did not finish within 0.5s" in failures(tmp_path)


def test_a_background_child_holding_stdout_does_not_hold_fuzz(world: Path, tmp_path: Path) -> None:
    body = "sleep 300 &\necho '{}'"
    ran = fuzz(tmp_path, translator(tmp_path, body))
    assert ran.code == 1 and ran.problem(15.0, lie=False) is None, ran.err
    assert "did not finish" not in failures(tmp_path)


def test_a_detached_daemon_does_not_outlive_fuzz(world: Path, tmp_path: Path) -> None:
    body = "setsid sleep 300 </dev/null >/dev/null 2>&1 &\necho '{}'"
    ran = fuzz(tmp_path, translator(tmp_path, body))
    assert ran.code == 1 and ran.problem(20.0, lie=False) is None, ran.err


def test_a_translator_printing_without_end_is_cut_at_the_byte_limit(
    world: Path, tmp_path: Path
) -> None:
    """It took 8 GB before it was killed."""
    before = rss_kib()
    command = translator(tmp_path, "yes ' '")
    argv = ["check", str(world), "--translator", command, "--max-input-bytes", "10000000"]
    ran = run_tool([*argv, "-o", os.devnull], 20.0)
    ok(ran, 10.0)
    assert "[too-large]" in ran.err and "--max-input-bytes" in ran.err
    assert ran.run.max_rss_kib - before < 200 * 1024  # KiB: 10 MB read, never gigabytes


def test_check_stops_a_translator_at_its_timeout(world: Path, tmp_path: Path) -> None:
    command = translator(tmp_path, "echo started >&2\nsleep 300")
    argv = ["check", str(world), "--translator", command, "--translator-timeout", "0.5"]
    ran = run_tool([*argv, "-o", os.devnull], 20.0)
    ok(ran, 6.0)
    assert "[timeout]" in ran.err and "--translator-timeout" in ran.err
    assert "its last words: started" in ran.err


def test_an_honest_translator_is_checked_and_its_helpers_do_not_outlive_it(
    world: Path, tmp_path: Path
) -> None:
    """The control: a translator that answers (the reference translation), leaving a
    background child and a daemon behind; the answer is checked, and both are killed."""
    xds = tmp_path / "xds.json"
    from verifier.cli import main

    assert main(["translate", str(world), "-o", str(xds)]) == 0
    json.loads(xds.read_text())
    body = f"sleep 300 &\nsetsid sleep 301 </dev/null >/dev/null 2>&1 &\ncat {xds}"
    ran = run_tool(["check", str(world), "--translator", translator(tmp_path, body)], 20.0)
    assert ran.code == 0 and ran.problem(10.0, lie=False) is None, ran.err
