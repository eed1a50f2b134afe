"""Work in forked child processes, to use the other cores: one call that
overlaps with the parent's work (``ForkedCall``: loading YAML while the xDS
loads, asking Envoy while the rules run), or a map over independent items
(``map_forked``: the scenarios of a suite).

A child inherits everything from fork and sends back only its return value
(pickled). It never decides anything the parent could not: when a
``ForkedCall`` child fails, the caller computes the value itself and so sees
the error as it would have without a child. ``close`` ends a child whose
answer is no longer wanted: SIGTERM raises SystemExit in it, so ``finally``
blocks (killing an Envoy, removing a temporary directory) still run.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

CHILD_GRACE_S = 10.0  # for a terminated child to run its finally blocks


def can_fork() -> bool:
    """Forking is only safe with no other thread alive (one could hold a lock the
    child needs), and a daemonic process (a pool worker) may not have children."""
    return (
        "fork" in multiprocessing.get_all_start_methods()
        and threading.active_count() == 1
        and not multiprocessing.current_process().daemon
    )


class ForkedCall(Generic[T]):
    """``fn()`` running in a forked child from construction on."""

    def __init__(self, fn: Callable[[], T]) -> None:
        fork = multiprocessing.get_context("fork")
        self._answer, send = fork.Pipe(duplex=False)
        self._process = fork.Process(target=_in_child, args=(fn, send), daemon=True)
        self._process.start()
        send.close()
        self._done = False

    def result(self) -> tuple[bool, T | None]:
        """(True, value), or (False, None) when the child could not give one."""
        try:
            answered, value = self._answer.recv()
        except (EOFError, OSError):
            answered, value = False, None
        self.close(answered=True)
        return answered, value

    def close(self, answered: bool = False) -> None:
        """End the child (at once unless it has ``answered``) and reap it."""
        if self._done:
            return
        self._done = True
        if not answered and self._process.is_alive():
            self._process.terminate()
        self._process.join(CHILD_GRACE_S)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._process.close()
        self._answer.close()


def _stop(_signum: int, _frame: object) -> None:
    # Once: a second signal (Ctrl-C reaches the whole process group, then the
    # parent's SIGTERM follows) must not cut the clean-up this one starts.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise SystemExit(1)


def pool_worker_signals() -> None:
    """Pool ``initializer``: Ctrl-C is the parent's to handle (it ends the pool),
    and the pool's SIGTERM unwinds the worker, so ``finally`` blocks still kill
    an Envoy and remove its temporary directory."""
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _in_child(fn: Callable[[], object], send: Connection) -> None:
    signal.signal(signal.SIGTERM, _stop)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _stop)  # Ctrl-C: end quietly, the parent has it too
    try:
        value = fn()
        send.send((True, value))
    except Exception:
        send.send((False, None))  # the parent computes it again and sees the error itself
    except SystemExit:
        pass  # terminated: cleaned up on the way out; the parent is not listening
    finally:
        send.close()


# The function map_forked's workers run: set just before the pool forks, so the
# workers inherit it (a closure or a bound method would not pickle).
_TASK: Callable[[Any], Any] | None = None


def _run_task(item: Any) -> Any:
    assert _TASK is not None, "set by map_forked before the workers fork"
    return _TASK(item)


def map_forked(
    fn: Callable[[T], R], items: Sequence[T], min_items: int = 4, max_workers: int = 4
) -> Iterator[R]:
    """``map(fn, items)``, in order, spread over a pool of forked workers when
    there are enough independent items and cores (and ``can_fork``); items and
    results cross the process boundary pickled. In a worker it maps serially."""
    workers = min(os.cpu_count() or 1, len(items), max_workers)
    if len(items) < min_items or workers < 2 or not can_fork():
        yield from map(fn, items)
        return
    global _TASK
    _TASK = fn
    try:
        fork = multiprocessing.get_context("fork")
        with fork.Pool(workers, initializer=pool_worker_signals) as pool:
            yield from pool.imap(_run_task, items)
    finally:
        _TASK = None
