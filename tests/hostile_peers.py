"""The tool against peers that lie, stall or flood: one bounded child per peer.

Shared by tests/test_hostile_peers.py (through tests/peer_surfaces.py). Each run
forks the test process into a child that runs the command (``main``, as
tests/entry_points.py does: warm imports, an address-space limit, its own process
group, the encodings of a console script), while this process serves the hostile
peer on its own event loop until the child exits: no thread, no new interpreter,
and the peer's view of the conversation (what the tool asked, what it answered)
is here to assert on.

What every run must show, whatever the peer did (``common_problems``): exit 0, 1
or 2 (130 for ``serve``, stopped by Ctrl-C once it serves); no traceback; the
command over within its deadline plus ``MARGIN_S`` (measured in the child); a peak
RSS within ``RSS_BOUND`` of the child's at its start; nothing of its process group
left; no private key and no raw control character in what it printed or wrote.
The counts, times and problems of the session are kept here (``summary``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import peer_words
from entry_points import ESCAPED, _child

import verifier.cli

# The command is over this long after its deadline: exiting takes a fork's teardown,
# and `check` then checks; on a loaded 2-core host a little more.
MARGIN_S: Final = 4.0
HARD_LIMIT_S: Final = 30.0  # a child alive this long is killed and reported as a hang
RSS_BOUND: Final = 400 << 20  # peak RSS over the child's at its start, with 1 MiB of input
TRACEBACKS: Final = ("Traceback (most recent call last)", "Task exception was never retrieved",
                     "Exception ignored in", "Fatal error")  # fmt: skip

# How many peers each surface met this session (drawn by the property; the cases
# apart), the seconds the commands took, and the slowest run and largest RSS.
COUNTS: Counter[str] = Counter()
CASES: Counter[str] = Counter()
SECONDS: defaultdict[str, float] = defaultdict(float)
WORST: dict[str, tuple[float, int]] = {}  # surface -> (slowest run s, largest RSS over start)


@dataclass
class Ended:
    """How one child ended, and what the measurements say."""

    code: int | None
    out: str
    err: str
    killed: str
    seconds: float
    rss_over: int  # bytes of peak RSS over the parent's at the fork
    left_behind: bool
    written: str = ""  # the -o file, if any


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _address_space() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


OnServing = Callable[[int, str], Awaitable[None]]


async def _until_exit(pid: int, pidfd: int, err: Any, on_serving: OnServing | None) -> bool:
    """Wait for the child to exit (True) or ``HARD_LIMIT_S`` (False); ``on_serving`` is
    called once with its pid and what it printed when ``serve`` says it is serving."""
    loop = asyncio.get_running_loop()
    exited = loop.create_future()
    loop.add_reader(pidfd, lambda: exited.done() or exited.set_result(True))
    try:
        end = time.monotonic() + HARD_LIMIT_S
        called = on_serving is None
        while time.monotonic() < end:
            try:
                await asyncio.wait_for(asyncio.shield(exited), 0.02)
                return True
            except TimeoutError:
                pass
            if not called:
                err.seek(0)
                text = err.read().decode("utf-8", "replace")
                if "waiting for Envoys to connect" in text:
                    called = True
                    assert on_serving is not None
                    await on_serving(pid, text)
        return False
    finally:
        loop.remove_reader(pidfd)


def _timed_child(argv: list[str], files: tuple[int, int, int], memory: int, clock: int) -> None:
    """tests/entry_points.py's bounded child, which also writes on ``clock`` its RSS
    as it starts and the moment ``main`` returned: how much memory and time the
    command took, measured where it ran (the parent's loop, busy serving a flood, may
    see the exit later, and a fork's RSS is not its parent's)."""
    # Ctrl-C as a console gives it (a forked worker ends on it instead: verifier.forked).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    import entry_points

    start_rss = _rss()

    def main(args: list[str]) -> int:
        try:
            return verifier.cli.main(args)
        finally:
            os.write(clock, f"{start_rss} {time.monotonic()}".encode())

    entry_points.main = main  # what _child calls
    _child(argv, files, memory)


def run_child(
    loop: asyncio.AbstractEventLoop,
    argv: list[str],
    out_file: Path | None = None,
    on_serving: OnServing | None = None,
) -> Ended:
    """``main(argv)`` in a bounded child, while ``loop`` (and the peer on it) runs here."""
    with (
        tempfile.TemporaryFile() as inp,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.TemporaryFile() as clock,
    ):
        memory = _address_space() + (1 << 30)
        base = _rss()
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _timed_child(argv, (inp.fileno(), out.fileno(), err.fileno()), memory, clock.fileno())
        with contextlib.suppress(OSError):  # the child may already have done it (or be gone)
            os.setpgid(pid, pid)
        pidfd = os.pidfd_open(pid)
        try:
            exited = loop.run_until_complete(_until_exit(pid, pidfd, err, on_serving))
        finally:
            os.close(pidfd)
        if not exited:
            os.killpg(pid, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
        clock.seek(0)
        start_rss, _, ended_at = clock.read().decode().partition(" ")
        seconds = float(ended_at or time.monotonic()) - started
        left = False
        try:
            os.killpg(pid, 0)
            left = True
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    written = ""
    if out_file is not None and out_file.exists():
        written = out_file.read_text(encoding="utf-8", errors="replace")
        out_file.unlink()
    rss_over = usage.ru_maxrss * 1024 - int(start_rss or base)
    if not exited:
        why = f"no exit after {HARD_LIMIT_S:.0f} s"
        return Ended(None, stdout, stderr, why, seconds, rss_over, left, written)
    if os.WIFSIGNALED(status):
        why = f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
        return Ended(None, stdout, stderr, why, seconds, rss_over, left, written)
    return Ended(os.WEXITSTATUS(status), stdout, stderr, "", seconds, rss_over, left, written)


def common_problems(ended: Ended, deadline: float, codes: tuple[int, ...] = (0, 1, 2)) -> list[str]:
    """What is wrong with any run, whatever the peer did."""
    found = []
    if ended.killed:
        found.append(ended.killed)
    if any(t in ended.err for t in TRACEBACKS) or ended.code == ESCAPED:
        found.append("a traceback")
    if ended.code is not None and ended.code not in codes:
        found.append(f"exit code {ended.code}")
    if ended.seconds > deadline + MARGIN_S:
        found.append(f"{ended.seconds:.1f}s, past the deadline of {deadline:g}s + {MARGIN_S:g}s")
    if ended.rss_over > RSS_BOUND:
        found.append(f"peak RSS {ended.rss_over >> 20} MiB over the parent's")
    if ended.left_behind:
        found.append("a process of its group left behind")
    for what, text in (("stdout", ended.out), ("stderr", ended.err), ("-o", ended.written)):
        if peer_words.leaked_key(text):
            found.append(f"a private key on {what}")
    if peer_words.raw_control(ended.err):
        found.append("a raw control character or a forged line on stderr")
    return found


PROBLEMS: Counter[str] = Counter()  # runs with a problem, by kind


def _kind(problem: str) -> str:
    if "traceback" in problem:
        return "tracebacks"
    if "past the deadline" in problem or "no exit" in problem:
        return "hangs"
    return "silent greens" if "silent green" in problem else "other problems"


def measured(surface: str, ended: Ended, found: list[str], drawn: bool = True) -> None:
    """Count one run (and its problems, which its test then reports)."""
    PROBLEMS.update({_kind(p) for p in found})
    (COUNTS if drawn else CASES)[surface] += 1
    SECONDS[surface] += ended.seconds
    slow, big = WORST.get(surface, (0.0, 0))
    WORST[surface] = (max(slow, ended.seconds), max(big, ended.rss_over))


Tallies = tuple[Counter[str], Counter[str], dict[str, float], dict[str, tuple[float, int]]]


def tallies() -> Tallies:
    """What this process counted, to send back from a worker (``add`` it there)."""
    return Counter(COUNTS), Counter(PROBLEMS), dict(SECONDS), dict(WORST)


def since(before: Tallies) -> Tallies:
    """What was counted after ``before``."""
    counts, problems, seconds, worst = tallies()
    spent = {k: v - before[2].get(k, 0.0) for k, v in seconds.items()}
    return counts - before[0], problems - before[1], spent, worst


def add(more: Tallies) -> None:
    counts, problems, seconds, worst = more
    COUNTS.update(counts)
    PROBLEMS.update(problems)
    for name, spent in seconds.items():
        SECONDS[name] += spent
    for name, (slow, big) in worst.items():
        mine = WORST.get(name, (0.0, 0))
        WORST[name] = (max(mine[0], slow), max(mine[1], big))


def summary() -> list[str]:
    names = sorted(set(COUNTS) | set(CASES))
    lines = [
        f"{name}: {COUNTS[name]:,} drawn peers and {CASES[name]} cases in {SECONDS[name]:.1f} s "
        f"(slowest {WORST[name][0]:.2f} s, peak RSS +{WORST[name][1] >> 20} MiB)"
        for name in names
    ]
    slowest = max((w[0] for w in WORST.values()), default=0.0)
    biggest = max((w[1] for w in WORST.values()), default=0) >> 20
    kinds = ("tracebacks", "hangs", "silent greens", "other problems")
    lines.append(
        f"total: {sum(COUNTS.values()):,} drawn peers and {sum(CASES.values())} cases in "
        f"{sum(SECONDS.values()):.1f} s; slowest {slowest:.2f} s, peak RSS +{biggest} MiB; "
        + ", ".join(f"{k} {PROBLEMS[k]}" for k in kinds)
    )
    return lines


# --- a peer, served here ------------------------------------------------------------------


def listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    return sock


def with_peer(
    out: Path | None,
    peer: Callable[[], asyncio.Protocol],
    scheme: str,
    argv: Callable[[str], list[str]],
    **kw: Any,
) -> Ended:
    """Run ``argv(ADDRESS)`` (``HOST:PORT``, or ``scheme://HOST:PORT``) against the
    server whose connections ``peer`` makes, served here while the child runs."""
    loop = asyncio.new_event_loop()
    sock = listening()
    try:
        server = loop.run_until_complete(loop.create_server(peer, sock=sock))
        where = f"{scheme}127.0.0.1:{sock.getsockname()[1]}"
        ended = run_child(loop, argv(where), out, **kw)
        server.close()
        settle(loop)
    finally:
        loop.close()
        sock.close()
    return ended


def settle(loop: asyncio.AbstractEventLoop) -> None:
    """Let the server's connections see their end, and cancel what is left."""
    loop.run_until_complete(asyncio.sleep(0))
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.wait(tasks, timeout=1.0))
