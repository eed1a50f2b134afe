"""Expensive, independent results computed on the core the test session leaves idle.

pytest runs one test at a time, and most tests keep one core busy: on a 2-core
machine the other is idle for much of a run. A test module whose fixture computes
something large that depends on nothing the session does first (the mutation score
of every fixture) names it in a module-level ``BACKGROUND`` dict; once the session
has collected its tests, tests/conftest.py forks one child (``start``) that computes
them one after another, in the order the session will need them, and each fixture
takes its answer when its tests come (``result``). The value is the one the fixture
would compute: the same function, on a fork of the same process.

The child is a plain fork, not a ``multiprocessing`` process, so the tests that
require ``multiprocessing.active_children() == []`` do not see it. It runs at a
lower priority, maps serially (``verifier.forked.can_fork`` is False in it), so it
takes one core and no more, writes nothing to the terminal, and is killed with the
session (``PR_SET_PDEATHSIG``) or when its answers are no longer wanted. An answer
the child does not give (it failed, or died) is computed by the fixture itself,
where its error shows as it always did.
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

NICE = 5  # below the tests in the foreground, live traffic among them
POLL_S = 0.1


class Background:
    """``fns``, each in turn, in a forked child from construction on; each answer is
    pickled to a file of its own, renamed into place once whole."""

    def __init__(self, fns: Sequence[tuple[str, Callable[[], Any]]]) -> None:
        self._folder = Path(tempfile.mkdtemp(prefix="edge-verifier-background-"))
        self._names = [name for name, _ in fns]
        self._pid: int | None = os.fork()
        if self._pid == 0:
            _child(fns, self._folder)
        self._code: int | None = None

    def knows(self, name: str) -> bool:
        return name in self._names

    def answer(self, name: str) -> tuple[bool, Any]:
        """(True, ``name``'s value) once the child has it; (False, None) if it ended
        without it."""
        path = self._folder / f"{self._names.index(name)}.pickle"
        while not path.exists() and self._running():
            time.sleep(POLL_S)
        try:
            with path.open("rb") as f:
                return True, pickle.load(f)
        except (OSError, EOFError, pickle.UnpicklingError):
            return False, None

    def cancel(self) -> None:
        """End the child if it still runs, and remove its answers."""
        if self._running() and self._pid is not None:
            with suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)
            os.waitpid(self._pid, 0)
            self._pid = None
        shutil.rmtree(self._folder, ignore_errors=True)

    def _running(self) -> bool:
        """Whether the child still runs (reaped once it has ended)."""
        if self._pid is None:
            return False
        pid, _ = os.waitpid(self._pid, os.WNOHANG)
        if pid == 0:
            return True
        self._pid = None
        return False


def _child(fns: Sequence[tuple[str, Callable[[], Any]]], folder: Path) -> None:
    """In the forked child: one core, no output, each value pickled as it comes."""
    code = 1
    try:
        from verifier import forked
        from verifier.orphans import follow_parent

        follow_parent(signal.SIGKILL)
        os.nice(NICE)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        forked.can_fork = lambda: False  # type: ignore[assignment]  # map serially: one core
        for i, (_name, fn) in enumerate(fns):
            try:
                value = fn()
            except Exception:  # no answer: the fixture computes it and shows the error
                continue
            part = folder / f"{i}.part"
            with part.open("wb") as f:
                pickle.dump(value, f)
            part.rename(folder / f"{i}.pickle")
        code = 0
    finally:
        os._exit(code)


_STARTED: list[Background] = []


def start(fns: Sequence[tuple[str, Callable[[], Any]]]) -> None:
    """Begin ``fns`` in the background, in this order (once per session), where
    forking is safe (no other thread alive); else each fixture computes its own."""
    from verifier.forked import can_fork

    if fns and not _STARTED and can_fork():
        _STARTED.append(Background(fns))


def result(name: str, fn: Callable[[], T]) -> T:
    """``name``'s background value, or ``fn()`` here when there is none."""
    for started in _STARTED:
        if started.knows(name):
            answered, value = started.answer(name)
            if answered:
                typed: T = value
                return typed
    return fn()


def cancel_all() -> None:
    """End the child, whatever it still computes (the session ends)."""
    while _STARTED:
        _STARTED.pop().cancel()
