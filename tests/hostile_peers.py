"""The tool against peers that lie, stall or flood: one bounded child per peer.

Shared by tests/test_hostile_peers.py (the regression cases of issue 34 and the
standing property). Each run forks the test process into a child that runs the
command (``main``, as tests/entry_points.py does: warm imports, an address-space
limit, its own process group, the encodings of a console script), while this
process serves the hostile peer on its own event loop until the child exits: no
thread, no new interpreter, and the peer's view of the conversation (when the
tool connected, when it hung up, what it answered) is here to assert on.

What every run must show, whatever the peer did (``problems``): exit 0, 1 or 2
(130 for ``serve``, stopped by Ctrl-C once it serves); no traceback; the command
over within its deadline plus a margin, and the peer's connection closed by then;
a peak RSS within ``RSS_BOUND`` of the parent's; nothing of its process group left;
no private key and no raw control character in what it printed or wrote; and
never a silent green: an exit 0 (or 1) only when the peer really gave what was read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
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

import hostile_admin
import hostile_ads
from entry_points import ESCAPED, _child

import verifier.cli

DEADLINE_S: Final = 0.3  # the tool's --timeout in these runs
MAX_BYTES: Final = 1 << 20  # the tool's --max-input-bytes in these runs
# The command is over this long after its deadline: exiting takes a fork's teardown,
# and `check` then checks; on a loaded 2-core host a little more.
MARGIN_S: Final = 4.0
# The peer's connection is closed this long after the tool's deadline.
CLOSE_MARGIN_S: Final = 1.5
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
        if hostile_ads.leaked_key(text):
            found.append(f"a private key on {what}")
    if hostile_ads.raw_control(ended.err):
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


# --- the peers, served here ---------------------------------------------------------------------


def listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    return sock


@dataclass
class Workspace:
    """The valid inputs: the minimal world, its xDS (config_dump, messages, packed)."""

    root: Path
    world: str
    xds: str
    dump: dict[str, Any]
    served: hostile_ads.Served

    @property
    def out(self) -> Path:
        """Where a pull writes: one file per process (surfaces run in parallel workers)."""
        return self.root / f"pulled-{os.getpid()}.json"


def workspace(root: Path) -> Workspace:
    from conftest import MINIMAL_YAML

    from verifier.cli import main
    from verifier.xds.snapshot import load_path

    (root / "world.yaml").write_text(MINIMAL_YAML, encoding="utf-8")
    assert main(["translate", str(root / "world.yaml"), "-o", str(root / "xds.json")]) == 0
    snap, _ = load_path(root / "xds.json")
    dump = json.loads((root / "xds.json").read_text(encoding="utf-8"))
    return Workspace(
        root, str(root / "world.yaml"), str(root / "xds.json"), dump, hostile_ads.Served(snap)
    )


def with_peer(
    ws: Workspace,
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
        ended = run_child(loop, argv(where), ws.out, **kw)
        server.close()
        _settle(loop)
    finally:
        loop.close()
        sock.close()
    return ended


def with_ads_peer(
    ws: Workspace, plan: hostile_ads.AdsPlan, argv: Callable[[str], list[str]], **kw: Any
) -> tuple[Ended, hostile_ads.Record]:
    """Run ``argv(HOST:PORT)`` against a hostile ADS server following ``plan``."""
    record = hostile_ads.Record()
    ended = with_peer(ws, lambda: hostile_ads.HostileAds(plan, ws.served, record), "", argv, **kw)
    return ended, record


def with_admin_peer(
    ws: Workspace, plan: hostile_admin.AdminPlan, argv: Callable[[str], list[str]], **kw: Any
) -> tuple[Ended, hostile_admin.Record]:
    """Run ``argv(URL)`` against a hostile admin endpoint following ``plan``."""
    record = hostile_admin.Record()
    admin = hostile_admin.HostileAdmin
    ended = with_peer(ws, lambda: admin(plan, ws.dump, record), "http://", argv, **kw)
    return ended, record


def _settle(loop: asyncio.AbstractEventLoop) -> None:
    """Let the server's connections see their end, and cancel what is left."""
    loop.run_until_complete(asyncio.sleep(0))
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.wait(tasks, timeout=1.0))


def pulled_problems(ended: Ended, record: hostile_ads.Record, read_ok: bool) -> list[str]:
    """No silent green against an ADS server: an exit that says the read succeeded
    (``read_ok``) needs an accepted response of each wildcard type, and no response
    invalid beyond doubt accepted."""
    found = []
    if read_ok:
        if not (
            record.accepted(hostile_ads.CLUSTER_TYPE) and record.accepted(hostile_ads.LISTENER_TYPE)
        ):
            found.append("a silent green: exit 0 with no accepted clusters and listeners")
        if record.accepted_invalid():
            found.append(f"a silent green: ACKed invalid responses {record.accepted_invalid()}")
    return found


# --- the surfaces -----------------------------------------------------------------------------


def _flags() -> list[str]:
    return ["--max-input-bytes", str(MAX_BYTES)]


def ads_source(where: str, plan: hostile_ads.AdsPlan, deadline: float) -> str:
    delta = "&delta=1" if plan.delta else ""
    return f"ads://{where}?node=edge&timeout={deadline}&settle=0.05{delta}"


def pull_ads(ws: Workspace, where: str, plan: hostile_ads.AdsPlan, deadline: float) -> list[str]:
    argv = ["pull", "--ads", where, "--node-id", "edge", "--timeout", str(deadline)]
    argv += ["--settle", "0.05", *_flags(), "-o", str(ws.out)]
    return argv + (["--delta"] if plan.delta else [])


def check_ads(ws: Workspace, where: str, plan: hostile_ads.AdsPlan, deadline: float) -> list[str]:
    source = ads_source(where, plan, deadline)
    return ["check", ws.world, "--xds", source, *_flags(), "-o", os.devnull]


def serve_ads(ws: Workspace, where: str, plan: hostile_ads.AdsPlan, deadline: float) -> list[str]:
    return ["serve", "--xds", ads_source(where, plan, deadline), "--port", "0", *_flags()]


def pull_admin(
    ws: Workspace, url: str, plan: hostile_admin.AdminPlan, deadline: float
) -> list[str]:
    return ["pull", "--admin", url, "--timeout", str(deadline), *_flags(), "-o", str(ws.out)]


def check_admin(
    ws: Workspace, url: str, plan: hostile_admin.AdminPlan, deadline: float
) -> list[str]:
    source = f"{url}?timeout={deadline}"
    return ["check", ws.world, "--xds", source, *_flags(), "-o", os.devnull]


def serve_admin(
    ws: Workspace, url: str, plan: hostile_admin.AdminPlan, deadline: float
) -> list[str]:
    return ["serve", "--xds", f"{url}?timeout={deadline}", "--port", "0", *_flags()]


async def interrupt(pid: int, _printed: str) -> None:
    """``serve`` is serving what it read: stop it as a person would, with Ctrl-C."""
    os.kill(pid, signal.SIGINT)


@dataclass(frozen=True)
class Surface:
    name: str
    peer: str  # "ads", "admin" or "clients"
    examples: int
    argv: Callable[[Workspace, str, Any, float], list[str]] | None = None
    serve: bool = False


def _n(count: int) -> int:
    """``count`` drawn peers for a surface, or ``EDGE_VERIFY_HOSTILE_PEERS`` for every
    surface (a longer campaign, run by hand)."""
    return int(os.environ.get("EDGE_VERIFY_HOSTILE_PEERS", count))


SURFACES: dict[str, Surface] = {
    s.name: s
    for s in [
        Surface("pull --ads", "ads", _n(160), pull_ads),
        Surface("check --xds ads://", "ads", _n(40), check_ads),
        Surface("serve --xds ads://", "ads", _n(20), serve_ads, serve=True),
        Surface("pull --admin", "admin", _n(280), pull_admin),
        Surface("check --xds http://", "admin", _n(75), check_admin),
        Surface("serve --xds http://", "admin", _n(20), serve_admin, serve=True),
        Surface("serve (hostile clients)", "clients", _n(25)),
    ]
}


def against(
    surface: Surface, ws: Workspace, plan: Any, deadline: float = DEADLINE_S
) -> tuple[Ended, list[str]]:
    """One hostile server (an ADS plan, or an admin one) against ``surface``: how the
    command ended, and what was wrong."""
    assert surface.argv is not None
    argv = surface.argv
    peer = with_ads_peer if surface.peer == "ads" else with_admin_peer
    ended, record = peer(
        ws,
        plan,
        lambda where: argv(ws, where, plan, deadline),
        on_serving=interrupt if surface.serve else None,
    )
    codes = (2, 130) if surface.serve else (0, 1, 2)
    found = common_problems(ended, deadline, codes)
    read_ok = ended.code in ((130,) if surface.serve else (0, 1))
    if isinstance(record, hostile_ads.Record):
        found += pulled_problems(ended, record, read_ok)
    else:
        found += admin_problems(record, read_ok)
    if surface.name.startswith("pull ") and read_ok:
        found += _loads(ended.written)
    return ended, found


def admin_problems(record: hostile_admin.Record, read_ok: bool) -> list[str]:
    """No silent green against an admin endpoint, and no redirect followed."""
    found = []
    if read_ok and not record.proper:
        found.append("a silent green: the read was taken as a config_dump, though it was not one")
    if len(record.requests) > 1:
        found.append(f"{len(record.requests)} requests: a redirect was followed")
    return found


def _loads(written: str) -> list[str]:
    """What a pull that exited 0 (or 1) wrote is a config_dump check reads."""
    from verifier.xds.snapshot import from_config_dump

    try:
        from_config_dump(json.loads(written), "pulled", records=True)
    except Exception as exc:
        return [f"pull exited 0 and wrote what does not load: {exc!r}"[:300]]
    return []


def against_clients(ws: Workspace, plans: tuple[Any, ...]) -> tuple[Ended, list[str]]:
    """``serve`` with hostile clients, then an honest one, which must get everything."""
    import hostile_clients

    port = _free_port()
    got: list[Any] = []
    held: list[Any] = []

    async def clients(pid: int, _printed: str) -> None:
        try:
            for plan in plans:
                await hostile_clients.hostile(port, plan, held)
            got.append(await hostile_clients.honest(port))
        except Exception as exc:
            got.append(exc)
        finally:
            for wire in held:
                wire.close()
            os.kill(pid, signal.SIGINT)

    loop = asyncio.new_event_loop()
    try:
        argv = ["serve", "--xds", ws.xds, "--port", str(port), *_flags()]
        ended = run_child(loop, argv, on_serving=clients)
        _settle(loop)
    finally:
        loop.close()
    found = common_problems(ended, 5.0, (130,))
    if not got or isinstance(got[0], BaseException):
        found.append(f"the honest client after them got nothing: {got[0] if got else 'no run'!r}")
    else:
        found += _same(got[0].snapshot, ws.served.snap)
    return ended, found


def _same(pulled: Any, served: Any) -> list[str]:
    mine, theirs = hostile_ads.snapshot_json(pulled), hostile_ads.snapshot_json(served)
    return [f"the honest client got other {k}" for k in mine if mine[k] != theirs[k]]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def problem_report(surface: str, plan: Any, ended: Ended, found: list[str]) -> str:
    return (
        f"{surface}: {'; '.join(found)}\nplan: {plan!r}"[:3000]
        + f"\nexit {ended.code} after {ended.seconds:.2f}s; stderr (tail):\n{ended.err[-2000:]}"
    )


# --- warming, so that each child inherits the imports and caches ------------------------------


def warm(ws: Workspace) -> None:
    """Run every surface once here, against honest peers on a thread of their own
    (ended before any fork), so the children forked later start warm."""
    import contextlib
    import io
    import threading

    from verifier.cli import main
    from verifier.xds.ads import AdsServer

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    admin_sock = listening()
    try:
        admin = loop.run_until_complete(
            loop.create_server(
                lambda: hostile_admin.HostileAdmin(
                    hostile_admin.AdminPlan(), ws.dump, hostile_admin.Record()
                ),
                sock=admin_sock,
            )
        )
        ads = AdsServer(ws.served.snap)
        host, port = loop.run_until_complete(ads.start())
        thread.start()
        url, where = f"http://127.0.0.1:{admin_sock.getsockname()[1]}", f"{host}:{port}"
        plan, honest = hostile_ads.AdsPlan(), hostile_admin.AdminPlan()
        for argv in (
            pull_ads(ws, where, plan, 10), check_ads(ws, where, plan, 10),
            pull_admin(ws, url, honest, 10), check_admin(ws, url, honest, 10),
        ):  # fmt: skip
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()) as err,
            ):
                code = main(argv)
            assert code == 0, f"{argv[:2]} fails against an honest peer: {err.getvalue()}"
    finally:
        if thread.is_alive():
            asyncio.run_coroutine_threadsafe(ads.stop(), loop).result(10)
            admin.close()
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
        loop.close()
        admin_sock.close()
    if ws.out.exists():
        ws.out.unlink()
    hostile_admin.bomb()  # made once, here, not while a child waits for it
