"""Talking to another program without trusting it: one deadline, one byte budget.

A file cannot stall, and its size is known before it is read; a peer (a control
plane over ADS, an Envoy's admin endpoint) can answer slowly forever, announce five
gigabytes, trickle one byte a second under every per-read timeout, or flood
versions that never settle. So every conversation with a peer runs under a
``Budget``: an overall deadline from the first connect to the last byte (a flood
counts against it like silence does) and a byte budget for everything the peer
sends (``--max-input-bytes``, the same bound as one input file). Past either, the
read ends with a ``PeerLimit`` that names the peer and the bound, and the command
exits 2: a pull that gave up checked nothing.

``run`` drives one conversation on an event loop of its own and leaves nothing
running when it returns (no task, no resolver thread waited on past the deadline).
``printable`` is for a peer's words (a NACK message, ``error_state``, an HTTP
body, a gRPC status message): they reach a terminal, so control characters are
shown escaped, never interpreted (an ANSI sequence, or a newline that forges a
line of the tool's own output).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import unicodedata
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from verifier.errors import MESSAGE_LIMIT, clip
from verifier.secrets import redact_text

T = TypeVar("T")

DEFAULT_TIMEOUT: Final = 30.0
# After the deadline, how long the loop may take to unwind what it cancelled.
UNWIND_S: Final = 1.0
TIMEOUT_FLAG: Final = "--timeout"
BYTES_FLAG: Final = "--max-input-bytes"


class PeerLimit(Exception):
    """A peer went past a bound; the message names the peer, the bound and its flag.
    ``code`` is the input error's: ``timed-out`` (the deadline) or ``too-large`` (the
    byte budget, the code a file past ``--max-input-bytes`` has)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def check_timeout(value: float) -> float:
    """``value`` if it can be a deadline: a finite number of seconds above 0.

    One meaning for every peer: ``0`` is not "no deadline" (a read-only tool pointed
    at production must end), nor is ``inf``; both are refused, as a negative is."""
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"expected a finite number of seconds above 0, got {value:g}")
    return value


@dataclass
class Budget:
    """The bounds of one conversation with ``peer`` (e.g. ``ADS at HOST:PORT``)."""

    peer: str
    timeout: float
    max_bytes: int
    started: float = field(default_factory=time.monotonic)
    received: int = 0

    def left(self) -> float:
        """Seconds until the deadline (0 once it has passed)."""
        return max(0.0, self.timeout - (time.monotonic() - self.started))

    def expired(self, doing: str = "") -> PeerLimit:
        what = f" ({doing})" if doing else ""
        return PeerLimit(
            f"{self.peer}: no complete answer within {self.timeout:g}s{what} "
            f"(raise it with {TIMEOUT_FLAG})",
            "timed-out",
        )

    def check_time(self, doing: str = "") -> None:
        """Raise ``expired`` once the deadline has passed: called between messages,
        so a flood that never lets the loop idle still ends on time."""
        if self.left() <= 0:
            raise self.expired(doing)

    def take(self, count: int) -> None:
        """Count ``count`` more bytes from the peer; past the budget, ``PeerLimit``."""
        self.received += count
        if self.received > self.max_bytes:
            raise self.too_much(f"more than {self.max_bytes:,} bytes")

    def announce(self, count: int, what: str = "an answer", already: int = 0) -> None:
        """Refuse at once ``what`` whose announced size (a Content-Length, a gRPC length
        prefix) would pass the budget, before the rest of it is read (``already``: how
        many of its bytes have arrived, and are counted, with the announcement)."""
        before = self.received - already
        if before + count > self.max_bytes:
            after = f" after {before:,}" if before > 0 else ""
            raise self.too_much(f"{what} of {count:,} bytes{after}")

    def too_much(self, what: str) -> PeerLimit:
        return PeerLimit(
            f"{self.peer}: sent {what}, over the limit of {self.max_bytes:,} bytes "
            f"(raise it with {BYTES_FLAG})",
            "too-large",
        )


def run(coro: Coroutine[Any, Any, T], budget: Budget) -> T:
    """``coro`` on an event loop of its own, ended at ``budget``'s deadline whatever it
    is doing (``PeerLimit``). Unlike ``asyncio.run``, the end waits for no resolver
    thread (a DNS lookup that hangs is left to finish on its own) and for at most
    ``UNWIND_S`` for the cancelled tasks."""
    loop = asyncio.new_event_loop()
    executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="peer-resolver")
    loop.set_default_executor(executor)
    try:
        return loop.run_until_complete(_within(coro, budget))
    finally:
        try:
            _cancel_all(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            executor.shutdown(wait=False, cancel_futures=True)
            join_briefly(executor)
            loop.close()


async def _within(coro: Coroutine[Any, Any, T], budget: Budget) -> T:
    """A backstop: ``coro`` keeps its own deadline (and says what was missing at
    it); this one, a moment later, ends whatever did not."""
    try:
        async with asyncio.timeout(budget.left() + UNWIND_S):
            return await coro
    except TimeoutError:
        raise budget.expired() from None


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.wait(tasks, timeout=UNWIND_S))
    for task in tasks:  # retrieved, so that none is reported "never retrieved"
        if task.done() and not task.cancelled():
            task.exception()


def join_briefly(executor: ThreadPoolExecutor) -> None:
    """After ``shutdown``: idle threads end at once, and are waited for (the process
    may fork afterwards only when none is left: ``verifier.forked.can_fork``); one
    stuck in a lookup or a parse is not waited for past ``UNWIND_S``."""
    threads: set[threading.Thread] = getattr(executor, "_threads", set())
    end = time.monotonic() + UNWIND_S
    for thread in list(threads):
        thread.join(max(0.0, end - time.monotonic()))


# --- a peer's words ---------------------------------------------------------------------

# Shown as escapes: every control (C0, DEL, C1), format characters (the bidirectional
# overrides that reorder what a terminal shows), and line and paragraph separators.
_UNSAFE_CATEGORIES: Final = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def _escape(char: str) -> str:
    code = ord(char)
    if char == "\n":
        return "\\n"
    if char == "\t":
        return "\\t"
    if char == "\r":
        return "\\r"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: object, limit: int = MESSAGE_LIMIT) -> str:
    """A peer's text fit for a terminal and a log line: no private key in it (a
    rejected update's details may quote one: ``verifier.secrets``), one line, every
    control or format character escaped (``\\x1b``, ``\\n``, ``\\u202e``), and
    clipped to ``limit`` characters (its start and end kept)."""
    value = redact_text(str(text))
    if value.isprintable():  # the usual case: nothing to escape (spaces are printable)
        return clip(value, limit)
    out = "".join(
        _escape(c) if not c.isprintable() and unicodedata.category(c) in _UNSAFE_CATEGORIES else c
        for c in value
    )
    return clip(out, limit)
