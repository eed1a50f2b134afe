"""A clean run leaves nothing in the user's directory, nor in the temporary one.

Every command that reads a scenario (``check``, ``translate``, ``status``, ``explain``,
``mutate``, ``live``, ``run``) and a ``fuzz`` that finds nothing run, one after the
other, in a fresh interpreter whose working directory is empty, as a user's shell
starts them (Hypothesis, for one, decides where ``.hypothesis/`` goes from the
working directory as it is imported: that stray folder was a clean fuzz run's). Fuzz
keeps its example database under ``.edge-verify/`` only once a failure is worth
keeping (docs/fuzz.md), and the live pass's private directories go with it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES

from verifier.live.envoy_process import envoy_available

SCENARIO = FIXTURES / "httproute-status-no-matching-parent"  # two cases: a cheap live pass
PATHS = [str(FIXTURES / "base"), str(SCENARIO)]
COMMANDS = {
    "check": ["check", *PATHS],
    "translate": ["translate", *PATHS],
    "status": ["status", *PATHS],
    "explain": ["explain", *PATHS, "--cases", str(SCENARIO / "cases.yaml")],
    "mutate": ["mutate", *PATHS],
    "fuzz": ["fuzz", "--budget", "5s", "--max-examples", "2", "--seed", "1"],
    "live": ["live", *PATHS],
    "run": ["run", *PATHS],
}
# Each command through main(), its exit code kept; the codes go to a file elsewhere.
SCRIPT = """
import json, sys
from verifier.cli import main
commands = json.loads(sys.argv[1])
codes = {name: main(argv) for name, argv in commands.items()}
with open(sys.argv[2], "w") as f:
    json.dump(codes, f)
"""


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="live and run need the envoy binary")
def test_a_clean_run_of_every_command_leaves_nothing_behind(tmp_path: Path) -> None:
    cwd, tmp, codes = tmp_path / "cwd", tmp_path / "tmp", tmp_path / "codes.json"
    cwd.mkdir()
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_STORAGE_DIRECTORY"}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(COMMANDS), str(codes)],
        cwd=cwd,
        env={**env, "TMPDIR": str(tmp)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(codes.read_text()) == dict.fromkeys(COMMANDS, 0), proc.stderr
    assert sorted(p.name for p in cwd.iterdir()) == []
    assert sorted(p.name for p in tmp.iterdir()) == []
