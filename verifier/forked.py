"""Work in forked child processes, to use the other cores: one call that
overlaps with the parent's work (``ForkedCall``: loading YAML while the xDS
loads, asking Envoy while the rules run), or a map over independent items
(``map_forked``: the scenarios of a suite).

A child inherits everything from fork and sends back only its return value
(pickled). It never decides anything the parent could not: when a
``ForkedCall`` child fails, the caller computes the value itself and so sees
the error as it would have without a child. ``close`` ends a child whose
answer is no longer wanted: SIGTERM makes it run what it registered with
``on_stop`` (killing an Envoy, removing a temporary directory) and exit.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from multiprocessing.connection import Connection
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

CHILD_GRACE_S = 10.0  # for a terminated child to run its finally blocks


def can_fork() -> bool:
    """Forking is only safe with no other thread alive (one could hold a lock the
    child needs), and a daemonic process (a map_forked child) may not have children."""
    return (
        "fork" in multiprocessing.get_all_start_methods()
        and threading.active_count() == 1
        and not multiprocessing.current_process().daemon
    )


class _Child:
    """A forked child that sends its answers back through a pipe.

    Ended by letting it finish, or by ``close``: SIGTERM, then SIGKILL after
    ``CHILD_GRACE_S``. Each child has its own pipe and no lock is shared with
    another process, so a kill never leaves anyone waiting. (multiprocessing's
    Pool ends idle workers with SIGTERM while they wait on a lock shared by all;
    a signal landing just before CPython's semaphore wait blocks is never seen,
    and the pool's join waits forever: about 1 pool in 300 here, and once a
    15-minute CI hang.)"""

    def __init__(self, target: Callable[..., None], *args: Any) -> None:
        fork = multiprocessing.get_context("fork")
        self._answers, send = fork.Pipe(duplex=False)
        self._process = fork.Process(target=target, args=(*args, send), daemon=True)
        self._process.start()
        send.close()
        self._done = False

    def receive(self) -> tuple[bool, Any]:
        """The next (True, value), or (False, None) when the child gave no more."""
        try:
            answered, value = self._answers.recv()
        except (EOFError, OSError):
            return False, None
        return bool(answered), value

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
        self._answers.close()


class ForkedCall(Generic[T]):
    """``fn()`` running in a forked child from construction on."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self._child = _Child(_call_in_child, fn)

    def result(self) -> tuple[bool, T | None]:
        """(True, value), or (False, None) when the child could not give one."""
        answered, value = self._child.receive()
        self._child.close(answered=True)
        return answered, value

    def close(self, answered: bool = False) -> None:
        """End the child (at once unless it has ``answered``) and reap it."""
        self._child.close(answered)


# What a forked child must undo if it is stopped now (see ``on_stop``).
_CLEANUPS: list[Callable[[], object]] = []


@contextmanager
def on_stop(cleanup: Callable[[], object]) -> Iterator[None]:
    """Within the block, a forked child that is stopped (``close``'s SIGTERM, or
    Ctrl-C) runs ``cleanup`` before it ends: kill an Envoy, remove a temporary
    directory. In the main process it does nothing: an interrupt there unwinds
    through the caller's own ``with`` and ``finally`` blocks."""
    _CLEANUPS.append(cleanup)
    try:
        yield
    finally:
        _CLEANUPS.remove(cleanup)


def _stop(_signum: int, _frame: object) -> None:
    """A stopped child undoes what it registered and ends at once.

    Not by raising SystemExit: a handler runs wherever Python is, and inside
    C code that calls back into Python (pydantic-core's validators) the
    exception is swallowed ("Exception ignored in: ...") and the child runs on.
    Nor by ignoring later signals with SIG_IGN: one caught but not yet handled
    then raises "Signal 15 ignored due to race condition". Both were seen on
    Ctrl-C during a suite check."""
    for cleanup in reversed(_CLEANUPS):
        with suppress(Exception):
            cleanup()
    os._exit(1)


def _child_signals() -> None:
    """SIGTERM (``close``) and Ctrl-C (the terminal sends it to the whole process
    group; the parent has it too) end the child through ``_stop``. A SIGINT the
    parent ignores stays ignored."""
    signal.signal(signal.SIGTERM, _stop)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _stop)


def _call_in_child(fn: Callable[[], object], send: Connection) -> None:
    _child_signals()
    try:
        value = fn()
        send.send((True, value))
    except Exception:
        send.send((False, None))  # the parent computes it again and sees the error itself
    finally:
        send.close()


def _map_in_child(
    fn: Callable[[Any], object], items: Sequence[Any], start: int, step: int, send: Connection
) -> None:
    _child_signals()
    try:
        for i in range(start, len(items), step):
            send.send((True, fn(items[i])))
    except Exception:
        pass
    finally:
        send.close()


def map_forked(
    fn: Callable[[T], R], items: Sequence[T], min_items: int = 4, max_workers: int = 4
) -> Iterator[R]:
    """``map(fn, items)``, in order, spread over forked children when there are
    enough independent items and cores (and ``can_fork``). Child ``k`` takes
    items ``k, k+n, ...`` (interleaved, so the shares cost about the same) and
    sends each result, pickled, as soon as it has it. An item a child could not
    answer is mapped here, so its error is raised here, as in a serial map.
    In a child it maps serially."""
    n = min(os.cpu_count() or 1, len(items), max_workers)
    if len(items) < min_items or n < 2 or not can_fork():
        yield from map(fn, items)
        return
    shares = [_Child(_map_in_child, fn, items, k, n) for k in range(n)]
    given_up: set[int] = set()
    finished = False
    value: Any
    try:
        for i, item in enumerate(items):
            k = i % n
            answered, value = (False, None) if k in given_up else shares[k].receive()
            if not answered:
                given_up.add(k)
                value = fn(item)
            yield value
        finished = True
    finally:
        for share in shares:
            share.close(answered=finished)  # every answer read: the children are ending
