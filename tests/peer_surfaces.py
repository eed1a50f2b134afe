"""The network surfaces, the hostile peers each meets, and what must hold of each run.

For tests/test_hostile_peers.py: a surface is a command line that reads from a peer
(``pull --ads``, ``check --xds http://``, ``serve`` with clients...), run with a
small deadline and byte budget against a hostile server (tests/hostile_ads.py,
hostile_admin.py) or with hostile clients (hostile_clients.py) in a bounded child
(tests/hostile_peers.py). ``against`` and ``against_clients`` return how it ended
and every problem: the common ones, and no silent green (an exit that says the read
succeeded only when the peer really gave what was read).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import hostile_admin
import hostile_ads
import hostile_ads_server
from hostile_peers import Ended, common_problems, listening, run_child, settle, with_peer

DEADLINE_S: Final = 0.3  # the tool's --timeout in these runs
MAX_BYTES: Final = 1 << 20  # the tool's --max-input-bytes in these runs


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


def with_ads_peer(
    ws: Workspace, plan: hostile_ads.AdsPlan, argv: Callable[[str], list[str]], **kw: Any
) -> tuple[Ended, hostile_ads.Record]:
    """Run ``argv(HOST:PORT)`` against a hostile ADS server following ``plan``."""
    record = hostile_ads.Record()
    server = hostile_ads_server.HostileAds
    ended = with_peer(ws.out, lambda: server(plan, ws.served, record), "", argv, **kw)
    return ended, record


def with_admin_peer(
    ws: Workspace, plan: hostile_admin.AdminPlan, argv: Callable[[str], list[str]], **kw: Any
) -> tuple[Ended, hostile_admin.Record]:
    """Run ``argv(URL)`` against a hostile admin endpoint following ``plan``."""
    record = hostile_admin.Record()
    admin = hostile_admin.HostileAdmin
    ended = with_peer(ws.out, lambda: admin(plan, ws.dump, record), "http://", argv, **kw)
    return ended, record


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

    got: list[Any] = []
    held: list[Any] = []

    async def clients(pid: int, printed: str) -> None:
        try:  # serve chose its port (--port 0) and says which in its banner
            port = int(re.findall(r" on 127\.0\.0\.1:(\d+);", printed)[0])
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
        argv = ["serve", "--xds", ws.xds, "--port", "0", *_flags()]
        ended = run_child(loop, argv, on_serving=clients)
        settle(loop)
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


def problem_report(surface: str, plan: Any, ended: Ended, found: list[str]) -> str:
    return (
        f"{surface}: {'; '.join(found)}\nplan: {plan!r}"[:3000]
        + f"\nexit {ended.code} after {ended.seconds:.2f}s; stderr (tail):\n{ended.err[-2000:]}"
    )


# --- warming, so that each child inherits the imports and caches ------------------------------


def warm(ws: Workspace) -> None:
    """Run every surface once here, against honest peers on a thread of their own
    (ended before any fork), so the children forked later start warm."""

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
