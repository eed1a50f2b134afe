"""The live run in a network namespace of its own: apart from every other run, gone when done.

Every fixture's cases already pass this way (tests/test_live_fixtures.py); these
tests are about the namespace itself. Two runs of one snapshot whose listeners
both bind the wildcard address on the same ports are held alive at the same
time, and both must answer every case; killing Envoy mid-run must be a clear
error that leaves no process, namespace, listener or directory behind; and
where no namespace can be had, the rewriting harness answers and says so.
Waits are bounded by hard timeouts only; nothing asserts on time.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import time
from pathlib import Path

import pytest
from conftest import FIXTURES
from envoy_data_plane.envoy.config.core.v3 import Address, SocketAddress
from envoy_data_plane.envoy.config.listener.v3 import Listener
from leftovers import namespaces_in_use, running

from verifier.live import netns
from verifier.live.envoy_process import EnvoyError, envoy_available, listening_sockets
from verifier.live.isolated import Hook, LiveRun, NamespaceHarness, run_cases_isolated_async
from verifier.live.replay import live_unmet, load_cases, load_scenario
from verifier.xds.snapshot import Snapshot, bound_addresses

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not envoy_available(), reason="no envoy binary"),
]
needs_namespace = pytest.mark.skipif(os.geteuid() != 0, reason=netns.NEEDS)
SCENARIO = FIXTURES / "httproute-exact-path-matching"
WAIT = 30.0  # hard bound on one wait for the other run


def _wildcard(snap: Snapshot) -> Snapshot:
    """Every listener on 0.0.0.0 at its own port: what two runs on one host would fight over."""
    listeners = []
    for li in snap.listeners:
        moved = Listener.parse(bytes(li))
        port = (
            li.address.socket_address.port_value if li.address and li.address.socket_address else 0
        )
        moved.address = Address(socket_address=SocketAddress(address="0.0.0.0", port_value=port))
        listeners.append(moved)
    return Snapshot(snap.clusters, snap.endpoints, tuple(listeners), snap.routes, snap.secrets)


@needs_namespace
def test_two_runs_at_once_bind_the_same_wildcard_ports_apart(tmp_path: Path) -> None:
    res, snap = load_scenario(SCENARIO)
    snap = _wildcard(snap)
    assert {a for a, _ in bound_addresses(snap)} == {"0.0.0.0"}
    cases = load_cases(SCENARIO, res)

    def barrier(me: str, other: str) -> Hook:
        async def hold(harness: NamespaceHarness) -> None:
            """Both Envoys up, bound and ACKed before either sends a request."""
            (tmp_path / me).write_text(str(netns.namespace_id()))
            deadline = time.monotonic() + WAIT
            while not (tmp_path / other).exists() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)

        return hold

    async def both() -> list[LiveRun]:
        return list(
            await asyncio.gather(
                run_cases_isolated_async(res, snap, cases, on_ready=barrier("a", "b")),
                run_cases_isolated_async(res, snap, cases, on_ready=barrier("b", "a")),
            )
        )

    a, b = asyncio.run(both())
    assert (tmp_path / "a").read_text() != (tmp_path / "b").read_text()  # both alive at once
    assert not a.rewritten and not b.rewritten
    assert a.namespace != b.namespace
    for run in (a, b):
        assert {r.case.case.name: live_unmet(r) for r in run.runs} == {
            c.case.name: [] for c in cases
        }
    # Each answer is attributed to the xDS route Envoy logged for it.
    answered = [r.responses[0] for r in a.runs]
    assert all(resp.access is not None for resp in answered)
    routed = [resp for resp in answered if resp.status == 200]
    assert routed and all(resp.access and resp.access.route for resp in routed)
    assert all(resp.access and resp.access.flags == "NR" for resp in answered if resp.status == 404)
    assert a.additions and all("access log" in line for line in a.additions)


@needs_namespace
def test_killing_envoy_mid_run_is_a_clear_error_and_leaves_nothing(tmp_path: Path) -> None:
    res, snap = load_scenario(SCENARIO)
    cases = load_cases(SCENARIO, res)
    seen = tmp_path / "seen.json"

    async def kill_after_one(harness: NamespaceHarness) -> None:
        assert harness.envoy is not None and harness.envoy.pid is not None
        first = await harness.send(
            harness.for_gateway(cases[0].case.gateway.key, cases[0].case.request)
        )
        record = {
            "envoy": harness.envoy.pid,
            "child": os.getpid(),
            "workdir": str(harness.workdir),
            "namespace": netns.namespace_id(),
            "first": first.status,
        }
        seen.write_text(json.dumps(record))
        os.kill(harness.envoy.pid, signal.SIGKILL)

    with pytest.raises(EnvoyError, match=r"Envoy ended during the live run \(exit status -9\)"):
        asyncio.run(run_cases_isolated_async(res, snap, cases, on_ready=kill_after_one))
    record = json.loads(seen.read_text())
    assert record["first"] == 200  # it was serving until it was killed
    assert not running(record["envoy"]) and not running(record["child"])
    assert not Path(record["workdir"]).exists()
    assert record["namespace"] != netns.namespace_id()
    assert record["namespace"] not in namespaces_in_use()
    # Nothing ever listened on the host for the xDS's addresses.
    assert all(not listening_sockets(a, p) for a, p in bound_addresses(snap))


def test_without_a_namespace_the_rewriting_harness_answers_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse() -> None:
        raise netns.NamespaceUnavailable(
            errno.EPERM, f"unshare(CLONE_NEWNET): Operation not permitted; {netns.NEEDS}"
        )

    monkeypatch.setattr(netns, "unshare_network", refuse)  # the forked child inherits it
    res, snap = load_scenario(SCENARIO)
    cases = load_cases(SCENARIO, res)
    run = asyncio.run(run_cases_isolated_async(res, snap, cases))
    assert run.rewritten and run.timings is None
    assert "root or CAP_SYS_ADMIN" in run.notes[0] and run.notes[0].startswith("rewritten: ")
    assert all(live_unmet(r) == [] for r in run.runs)
    with pytest.raises(netns.NamespaceUnavailable, match="CAP_SYS_ADMIN"):
        asyncio.run(run_cases_isolated_async(res, snap, cases, fallback=False))
