"""What the hostile-peer tests share: the hostile API server, kubeconfigs for it, and the
tool run in a bounded forked child whose programs can be found afterwards.

A run is ``entry_points.run_forked`` (a fork of the test process: the imports are
warm, and the child is bounded in time and address space) with two additions made
in the child: a reaper of its own (``verifier.orphans``), so that a child killed by
the harness has its programs killed as a SIGKILLed tool's are, and a mark in its
environment (``HOSTILE_MARK``) that every program it starts inherits, so the test
can ask afterwards whether anything it started is still running.
"""

from __future__ import annotations

import io
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from entry_points import Run, run_forked
from hostile_k8s import url
from k8s_standin import TOKEN

from verifier.children import marked
from verifier.orphans import die_with_parent

HERE = Path(__file__).resolve().parent
MARK = "HOSTILE_MARK"
TRACEBACK = "Traceback (most recent call last)"


@contextmanager
def hostile_server(dirs: list[Path]) -> Iterator[str]:
    """tests/hostile_k8s.py serving ``dirs``, in a process of its own; its base URL."""
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "hostile_k8s.py"), *map(str, dirs)],
        stdout=subprocess.PIPE,
        cwd=HERE,
        env={**os.environ, "PYTHONPATH": str(HERE)},
        preexec_fn=die_with_parent(),
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


def kubeconfig(
    path: Path,
    server: str,
    user: dict[str, Any] | None = None,
    behaviour: dict[str, Any] | None = None,
) -> Path:
    """A kubeconfig for ``server`` (with ``behaviour``, a hostile_k8s URL) and ``user``
    (default: the stand-in's token)."""
    where = url(server, behaviour or {"how": "honest"})
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": where}}],
                "users": [{"name": "u", "user": user if user is not None else {"token": TOKEN}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


@dataclass(frozen=True)
class Ran:
    """A bounded run of the tool: how it ended, its wall time, what it left running."""

    run: Run
    seconds: float
    left: list[int]

    @property
    def code(self) -> int | None:
        return self.run.code

    @property
    def err(self) -> str:
        return self.run.err

    def problem(self, bound_s: float, lie: bool) -> str | None:
        """What is wrong with how it ended, or None: exit 0, 1 or 2, no traceback,
        within ``bound_s``, nothing left running, and never 0 or 1 on a ``lie``."""
        if self.run.killed:
            return self.run.killed
        if TRACEBACK in self.run.err:
            return "a traceback"
        if self.run.code not in (0, 1, 2):
            return f"exit code {self.run.code}"
        if self.seconds > bound_s:
            return f"took {self.seconds:.1f}s, over its bound of {bound_s:.1f}s"
        if self.left:
            return f"left {len(self.left)} process(es) running: {self.left}"
        if lie and self.run.code != 2:
            return f"exit {self.run.code} on a peer that lied: a silent green"
        return None


def running(mark: str) -> list[int]:
    """Processes (not zombies) whose environment holds ``HOSTILE_MARK=mark``."""
    return marked(f"{MARK}={mark}")


def _fresh(mark: str) -> None:
    """In the child: a reaper of its own, and the mark its programs inherit."""
    from verifier import orphans

    orphans._reaper = None
    os.environ[MARK] = mark


def run_tool(argv: list[str], timeout_s: float, memory: int = 2 << 30) -> Ran:
    """``edge-verify ARGV`` in a bounded forked child; then whatever it started, given
    a moment to be reaped (the reaper acts once the child's pipe to it closes)."""
    mark = secrets.token_hex(6)
    started = time.monotonic()
    run = run_forked(argv, timeout_s=timeout_s, memory=memory, prepare=lambda: _fresh(mark))
    seconds = time.monotonic() - started
    left = running(mark)
    until = time.monotonic() + 5.0
    while left and time.monotonic() < until:
        time.sleep(0.05)
        left = running(mark)
    return Ran(run, seconds, left)


def warm(argv: list[str]) -> None:
    """Run the tool once here, on an honest peer, so that the children forked later
    inherit its imports and caches instead of each paying for them."""
    from verifier.cli import main

    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()) as err:
        code = main(argv)
    assert code == 0, err.getvalue()


def rss_kib() -> int:
    """This process's resident memory now: what a forked child shares from the start."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0
