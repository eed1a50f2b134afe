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
from multiprocessing.connection import Connection, wait
from typing import Any, Generic, TypeVar, cast

from verifier.orphans import follow_parent

T = TypeVar("T")
R = TypeVar("R")

CHILD_GRACE_S = 10.0  # for a stopped child to run its on_stop clean-ups


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

    def __init__(self, target: Callable[..., None], *args: Any, duplex: bool = False) -> None:
        fork = multiprocessing.get_context("fork")
        self.conn, theirs = fork.Pipe(duplex=duplex)
        self._process = fork.Process(target=target, args=(*args, theirs), daemon=True)
        self._process.start()
        theirs.close()
        self._done = False

    def receive(self) -> tuple[bool, Any]:
        """(True, the next value), or (False, None) when the child gave no more:
        a child that fails sends nothing and closes its end."""
        try:
            return True, self.conn.recv()
        except (EOFError, OSError):
            return False, None

    def send(self, value: object) -> bool:
        """Whether ``value`` reached the child (a duplex one); False once it is gone."""
        try:
            self.conn.send(value)
        except OSError:  # BrokenPipeError: the child ended
            return False
        return True

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
        self.conn.close()


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


_STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


@contextmanager
def started(start: Callable[[], T], cleanup: Callable[[T], object]) -> Iterator[T]:
    """``start()``, with ``cleanup`` of what it returned registered as ``on_stop``
    is, as one step: a stop that arrives while ``start`` runs waits until the
    cleanup is registered (SIGTERM and SIGINT are held meanwhile). Without that, a
    child stopped between starting an Envoy and registering its kill left the Envoy
    to die by its parent-death signal, later and unreaped. Something ``start``
    execs must not keep the signals held: see ``unheld``."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        value = start()
        _CLEANUPS.append(undo := lambda: cleanup(value))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    try:
        yield value
    finally:
        _CLEANUPS.remove(undo)


def unheld(preexec: Callable[[], None] | None) -> Callable[[], None]:
    """A ``preexec_fn`` that releases the signals ``started`` holds (a signal mask
    survives exec) before ``preexec``: the program it starts can be stopped."""

    def release() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        if preexec is not None:
            preexec()

    return release


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
    follow_parent(signal.SIGTERM)  # a SIGKILLed tool stops its workers too


def child_signals() -> None:
    """What every forked worker does first (``_child_signals``); public for workers
    forked elsewhere (``verifier.live.netns``)."""
    _child_signals()


def _call_in_child(fn: Callable[[], object], send: Connection) -> None:
    _child_signals()
    try:
        send.send(fn())
    except Exception:  # the parent computes it again and sees the error itself
        pass
    finally:
        send.close()


def _serve_in_child(fn: Callable[[Any], object], items: Sequence[Any], conn: Connection) -> None:
    """Map the items the parent names, one at a time, until it sends None."""
    _child_signals()
    try:
        while (i := conn.recv()) is not None:
            conn.send(fn(items[i]))
    except Exception:  # fn failed (the parent maps that item itself), or the parent left
        pass
    finally:
        conn.close()


def map_forked(
    fn: Callable[[T], R], items: Sequence[T], min_items: int = 4, max_workers: int = 4
) -> Iterator[R]:
    """``map(fn, items)``, in order, spread over forked children when there are
    enough independent items and cores (and ``can_fork``).

    Each child has its own pipe: the parent names an item, the child sends its
    result back pickled and gets the next one, so a child that drew quick
    items takes more. An item a child could not answer (``fn`` raised, or the
    child is gone) is mapped here when its turn comes, so its error is raised
    here, as in a serial map. In a child it maps serially.
    """
    n = min(os.cpu_count() or 1, len(items), max_workers)
    if len(items) < min_items or n < 2 or not can_fork():
        yield from map(fn, items)
        return
    children = [_Child(_serve_in_child, fn, items, duplex=True) for _ in range(n)]
    by_conn = {c.conn: c for c in children}
    todo = iter(range(len(items)))
    busy: dict[Connection, int] = {}  # a child's pipe -> the item it maps
    answers: dict[int, Any] = {}
    here: set[int] = set()  # items to map in this process

    def hand_out(child: _Child) -> None:
        i = next(todo, None)
        if child.send(i) and i is not None:
            busy[child.conn] = i
        elif i is not None:
            here.add(i)  # the child is gone

    finished = False
    try:
        for child in children:
            hand_out(child)
        for i, item in enumerate(items):
            while i not in answers and i not in here and busy:
                for conn in cast(list[Connection], wait(list(busy))):
                    child = by_conn[conn]
                    j = busy.pop(conn)
                    answered, value = child.receive()
                    if answered:
                        answers[j] = value
                        hand_out(child)
                    else:
                        here.add(j)  # it failed on j, or died: not used again
            if i in answers:
                yield answers.pop(i)
            else:  # failed in a child, or no child is left to take it
                here.discard(i)
                yield fn(item)
        finished = True
    finally:
        for child in children:
            child.close(answered=finished)  # all answered: each was told to stop
