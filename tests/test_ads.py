"""The ADS server against a real Envoy 1.40, state-of-the-world and delta.

Envoy connects with nothing but the bootstrap ``ads.bootstrap`` writes, gets a
translated fixture's snapshot, ACKs every type, and its admin ``/config_dump``
must hold the resources served, by name and type. Listeners are moved to
127.0.0.1:0 in the snapshot served (the xDS binds Gateway addresses such as
192.0.2.x that this machine does not have); the server itself is not told.
Waits are bounded by hard timeouts only; no assertion is about time.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from conftest import FIXTURES, mesh_proxies, translate_proxy, translate_scenario
from envoy_data_plane.envoy.config.core.v3 import (
    Address,
    DataSource,
    HeaderValue,
    HeaderValueOption,
    SocketAddress,
)
from envoy_data_plane.envoy.config.listener.v3 import Listener
from envoy_data_plane.envoy.config.route.v3 import RouteConfiguration, RouteMatch
from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import (
    CertificateValidationContext,
    Secret,
    TlsCertificate,
)
from envoy_data_plane.envoy.type.matcher.v3 import RegexMatcher

from verifier.live.dns import DnsServer
from verifier.live.envoy_process import EnvoyProcess, envoy_available
from verifier.live.pki import Pki
from verifier.xds.ads import TYPES, AdsServer, Answer, bootstrap
from verifier.xds.codec import to_json_dict
from verifier.xds.snapshot import (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    LISTENER_TYPE,
    ROUTE_TYPE,
    SECRET_TYPE,
    Snapshot,
    dumps,
    resource_name,
)

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not envoy_available(), reason="no envoy binary"),
]

MODES = [pytest.param(False, id="sotw"), pytest.param(True, id="delta")]
WAIT = 20.0  # hard bound on any one wait for Envoy
CARES = "type.googleapis.com/envoy.extensions.network.dns_resolver.cares.v3.CaresDnsResolverConfig"
# Where each type's active resources sit in Envoy's config_dump, and their name key.
DUMP: dict[str, tuple[str, str, str]] = {
    CLUSTER_TYPE: ("ClustersConfigDump", "dynamic_active_clusters", "cluster"),
    ENDPOINT_TYPE: ("EndpointsConfigDump", "dynamic_endpoint_configs", "endpoint_config"),
    LISTENER_TYPE: ("ListenersConfigDump", "dynamic_listeners", "active_state"),
    ROUTE_TYPE: ("RoutesConfigDump", "dynamic_route_configs", "route_config"),
    SECRET_TYPE: ("SecretsConfigDump", "dynamic_active_secrets", "secret"),
}
KINDS = dict(zip(TYPES, ("clusters", "endpoints", "listeners", "routes", "secrets"), strict=True))


def local(snap: Snapshot) -> Snapshot:
    """``snap`` with every listener on 127.0.0.1:0, where this machine can bind it."""
    listeners = []
    for li in snap.listeners:
        moved = Listener.parse(bytes(li))
        moved.address = Address(socket_address=SocketAddress(address="127.0.0.1", port_value=0))
        listeners.append(moved)
    return Snapshot(snap.clusters, snap.endpoints, listeners, snap.routes, snap.secrets)


def scenario(name: str) -> Snapshot:
    return local(translate_scenario(FIXTURES / name))


@asynccontextmanager
async def envoy_with(boot: dict[str, Any], workdir: Path) -> AsyncIterator[EnvoyProcess]:
    """A real Envoy on ``boot`` plus an admin port, and a DNS server of ours so that
    STRICT_DNS names fail fast instead of leaking to the host's resolver."""
    dns = DnsServer()
    await dns.start()
    boot = {
        **boot,
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}},
        "typed_dns_resolver_config": {
            "name": "envoy.network.dns_resolver.cares",
            "typed_config": {
                "@type": CARES,
                "resolvers": [{"socket_address": {"address": dns.host, "port_value": dns.port}}],
            },
        },
    }
    envoy = EnvoyProcess(boot, workdir)
    try:
        await envoy.start()
        yield envoy
    finally:
        await envoy.stop()
        await dns.stop()


@asynccontextmanager
async def envoy_on(server: AdsServer, workdir: Path, *, delta: bool) -> AsyncIterator[EnvoyProcess]:
    """A real Envoy whose only configuration is ``server``'s bootstrap."""
    host, port = await server.start()
    try:
        async with envoy_with(to_json_dict(bootstrap(host, port, delta=delta)), workdir) as envoy:
            yield envoy
    finally:
        await server.stop()


async def answers(server: AdsServer, types: Mapping[str, str]) -> dict[str, Answer]:
    """Envoy's answer to each (type, version), each wait bounded."""
    found = {}
    for url, version in types.items():
        found[url] = await asyncio.wait_for(server.wait_answer(url, version), WAIT)
    return found


def served_types(server: AdsServer, snap: Snapshot) -> dict[str, str]:
    """The types the snapshot has resources of, with the version served."""
    return {url: server.versions[url] for url in TYPES if getattr(snap, KINDS[url])}


async def config_dump(envoy: EnvoyProcess) -> dict[str, dict[str, dict[str, Any]]]:
    """Type -> name -> the config_dump entry Envoy holds as active."""
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT)) as http,
        http.get(f"http://{envoy.admin}/config_dump?include_eds") as resp,
    ):
        doc = await resp.json(content_type=None)
    by_kind = {c["@type"].rsplit(".", 1)[-1]: c for c in doc["configs"]}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for url, (kind, section, key) in DUMP.items():
        entries = by_kind.get(kind, {}).get(section, [])
        if url == LISTENER_TYPE:
            entries = [e[key] for e in entries if key in e]
            key = "listener"
        out[url] = {(e[key].get("cluster_name") or e[key]["name"]): e for e in entries if key in e}
    return out


def names(snap: Snapshot, url: str) -> set[str]:
    return {resource_name(m) for m in getattr(snap, KINDS[url])}


@pytest.mark.parametrize("delta", MODES)
@pytest.mark.parametrize("fixture", ["httproute-header-matching", "gateway-https-listener"])
def test_envoy_acks_every_type_and_holds_what_was_served(
    tmp_path: Path, fixture: str, delta: bool
) -> None:
    snap = scenario(fixture)
    server = AdsServer(snap)

    async def run() -> None:
        async with envoy_on(server, tmp_path, delta=delta) as envoy:
            got = await answers(server, served_types(server, snap))
            assert all(a.accepted for a in got.values()), server.nacks
            dump = await config_dump(envoy)
        for url in TYPES:
            held = set(dump[url])
            if url == ENDPOINT_TYPE:  # include_eds lists the STRICT_DNS clusters' hosts too
                held &= {n for n in held if n not in names(snap, CLUSTER_TYPE)}
            assert held == names(snap, url), url
        if fixture == "gateway-https-listener":
            assert dump[SECRET_TYPE], "the listener certificates came over SDS"

    asyncio.run(run())


def _with_route_header(rc: RouteConfiguration, value: str) -> RouteConfiguration:
    changed = RouteConfiguration.parse(bytes(rc))
    changed.response_headers_to_add = [
        HeaderValueOption(header=HeaderValue(key="x-ads-test", value=value))
    ]
    return changed


def _with_bad_regex(rc: RouteConfiguration) -> RouteConfiguration:
    """A route RE2 cannot compile: only Envoy says so (the message is its own)."""
    broken = RouteConfiguration.parse(bytes(rc))
    route = broken.virtual_hosts[0].routes[0]
    route.match = RouteMatch(safe_regex=RegexMatcher(regex="/(unclosed"))
    return broken


def _replace_route(snap: Snapshot, rc: RouteConfiguration) -> Snapshot:
    routes = [rc if r.name == rc.name else r for r in snap.routes]
    return Snapshot(snap.clusters, snap.endpoints, snap.listeners, routes, snap.secrets)


def _route_version(dump: Mapping[str, Mapping[str, dict[str, Any]]], name: str) -> str:
    return str(dump[ROUTE_TYPE][name]["version_info"])


@pytest.mark.parametrize("delta", MODES)
def test_an_update_is_applied_without_restart(tmp_path: Path, delta: bool) -> None:
    snap = scenario("httproute-header-matching")
    server = AdsServer(snap)
    rc = _with_route_header(snap.routes[0], "two")

    async def run() -> None:
        async with envoy_on(server, tmp_path, delta=delta) as envoy:
            await answers(server, served_types(server, snap))
            pid = envoy.pid
            versions = server.update(_replace_route(snap, rc))
            (answer,) = (await answers(server, {ROUTE_TYPE: versions[ROUTE_TYPE]})).values()
            assert answer.accepted, answer
            dump = await config_dump(envoy)
            assert envoy.pid == pid and envoy.proc is not None and envoy.proc.returncode is None
        expected = server.resource_version(ROUTE_TYPE, rc.name) if delta else answer.version
        assert _route_version(dump, rc.name) == expected
        held = dump[ROUTE_TYPE][rc.name]["route_config"]
        assert held["response_headers_to_add"][0]["header"]["value"] == "two"

    asyncio.run(run())


@pytest.mark.parametrize("delta", MODES)
def test_a_rejected_version_is_recorded_and_never_sent_again(tmp_path: Path, delta: bool) -> None:
    snap = scenario("httproute-header-matching")
    server = AdsServer(snap)
    routed = next(r for r in snap.routes if r.virtual_hosts and r.virtual_hosts[0].routes)
    bad = _with_bad_regex(routed)
    good = _with_route_header(routed, "after")

    async def run() -> None:
        async with envoy_on(server, tmp_path, delta=delta) as envoy:
            first = await answers(server, served_types(server, snap))
            before = server.resource_version(ROUTE_TYPE, bad.name)
            bad_version = server.update(_replace_route(snap, bad))[ROUTE_TYPE]
            (nack,) = (await answers(server, {ROUTE_TYPE: bad_version})).values()
            dump = await config_dump(envoy)
            # The same bad snapshot again, then a good one: only the good one goes out.
            server.update(_replace_route(snap, bad))
            good_version = server.update(_replace_route(snap, good))[ROUTE_TYPE]
            (ack,) = (await answers(server, {ROUTE_TYPE: good_version})).values()
        assert not nack.accepted and nack.type_url == ROUTE_TYPE
        assert nack.message == "missing ): /(unclosed"  # RE2's words, as Envoy passed them on
        assert server.nacks == [nack]
        assert server.sent[(ROUTE_TYPE, bad_version)] == 1
        assert ack.accepted
        # Envoy kept what it had, as the version it last accepted says.
        held = _route_version(dump, bad.name)
        assert held == (before if delta else first[ROUTE_TYPE].version)
        assert "(unclosed" not in str(dump[ROUTE_TYPE][bad.name]["route_config"])

    asyncio.run(run())


async def _mesh_secrets(workdir: Path) -> list[Secret]:
    """The edge identity and trust bundle mesh clusters name (``default``, ``ROOTCA``),
    as the mesh agent would give them: the caller's to supply."""
    pki = await Pki(workdir / "pki").create()
    cert, key = await pki.issue("edge", "spiffe://cluster.local/ns/edge-system/sa/aether-edge")
    return [
        Secret(
            name="default",
            tls_certificate=TlsCertificate(
                certificate_chain=DataSource(inline_string=cert.read_text()),
                private_key=DataSource(inline_string=key.read_text()),
            ),
        ),
        Secret(
            name="ROOTCA",
            validation_context=CertificateValidationContext(
                trusted_ca=DataSource(inline_string=pki.ca_cert.read_text())
            ),
        ),
    ]


@pytest.mark.parametrize("delta", MODES)
def test_endpoints_and_mesh_secrets_are_answered_before_listeners_are_sent(
    tmp_path: Path, delta: bool
) -> None:
    snap = scenario("httproute-mesh-backend")
    assert snap.endpoints, "the fixture no longer has EDS; pick another"

    async def run() -> None:
        server = AdsServer(snap, extra_secrets=await _mesh_secrets(tmp_path))
        async with envoy_on(server, tmp_path, delta=delta) as envoy:
            wanted = {**served_types(server, snap), SECRET_TYPE: server.versions[SECRET_TYPE]}
            got = await answers(server, wanted)
            dump = await config_dump(envoy)
        assert all(a.accepted for a in got.values()), server.nacks
        order = [a.type_url for a in server.answers]
        assert order.index(CLUSTER_TYPE) < order.index(ENDPOINT_TYPE) < order.index(LISTENER_TYPE)
        assert set(dump[ENDPOINT_TYPE]) == names(snap, ENDPOINT_TYPE)
        assert {"default", "ROOTCA"} <= set(dump[SECRET_TYPE])

    asyncio.run(run())


ADS_SCENARIOS = ("mesh-sidecar-translation",)


async def _not_held(envoy: EnvoyProcess, snap: Snapshot) -> list[str]:
    """The types whose active resources in Envoy are not exactly ``snap``'s."""
    dump = await config_dump(envoy)
    wrong = []
    for url in TYPES:
        if url == SECRET_TYPE:
            continue  # the agent's, not the translator's
        held = set(dump[url])
        if url == ENDPOINT_TYPE:  # include_eds lists STRICT_DNS hosts too
            held -= names(snap, CLUSTER_TYPE) - names(snap, ENDPOINT_TYPE)
        if url == ROUTE_TYPE:  # a draining listener keeps its route tables a while
            held &= names(snap, url)
        if held != names(snap, url):
            wrong.append(f"{url}: {sorted(held ^ names(snap, url))}")
    return wrong


def test_one_envoy_takes_every_sidecar_config_in_turn(tmp_path: Path, repo_cwd: Path) -> None:
    """Every mesh scenario's sidecars (``translate --proxy``), served one after another
    to one real Envoy with the mesh secrets the agent would add: each is ACKed whole,
    and Envoy then holds exactly its listeners, routes, clusters and endpoints."""
    # Every sidecar of the scenarios written to exercise the translator's choices
    # (envoy --mode validate takes every other one: test_envoy_accepts_fixtures.py);
    # a config served twice is served once.
    proxies = [p for p in mesh_proxies() if p[0].name in ADS_SCENARIOS]
    if not proxies:
        pytest.skip("no mesh scenario in fixtures/")
    distinct: dict[str, tuple[str, Snapshot]] = {}
    for s, ns, n in proxies:
        snap = local(translate_proxy(s, ns, n))
        distinct.setdefault(dumps(snap), (f"{s.name}:{ns}/{n}", snap))
    snaps = list(distinct.values())

    async def run() -> None:
        server = AdsServer(snaps[0][1], extra_secrets=await _mesh_secrets(tmp_path))
        async with envoy_on(server, tmp_path, delta=False) as envoy:
            for proxy, snap in snaps:
                versions = server.update(snap)
                wanted = {url: versions[url] for url in served_types(server, snap)}
                got = await answers(server, {**wanted, SECRET_TYPE: versions[SECRET_TYPE]})
                assert all(a.accepted for a in got.values()), (proxy, server.nacks)
                # An ACK comes before a new listener leaves warming (it waits for its
                # SDS secrets) and before a removed one is gone: wait for both.
                deadline = asyncio.get_running_loop().time() + WAIT
                while (wrong := await _not_held(envoy, snap)) and (
                    asyncio.get_running_loop().time() < deadline
                ):
                    await asyncio.sleep(0.05)
                assert not wrong, (proxy, wrong)

    asyncio.run(run())


def test_serve_feeds_the_envoy_its_bootstrap_points_at(tmp_path: Path) -> None:
    """``edge-verify serve`` as a user runs it: the printed bootstrap is all Envoy
    needs, every ACK is reported, and Ctrl-C ends it with 130 and one line."""
    xds = tmp_path / "xds.json"
    xds.write_text(dumps(scenario("httproute-header-matching")), encoding="utf-8")
    serve = subprocess.Popen(
        [sys.executable, "-m", "verifier.cli", "serve", "--xds", str(xds), "--port", "0"],
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # its own process group, as a terminal gives a command
    )
    try:
        assert serve.stderr is not None
        lines = [serve.stderr.readline() for _ in range(2)]
        assert "over ADS" in lines[0] and "bootstrap" in lines[1], lines
        boot_lines = []
        while not (line := serve.stderr.readline()).startswith("edge-verify: waiting"):
            assert line, "serve ended before it was ready"
            boot_lines.append(line)
        boot = yaml.safe_load("".join(boot_lines))

        async def run() -> list[str]:
            async with envoy_with(boot, tmp_path):
                assert serve.stderr is not None
                acks = [serve.stderr.readline() for _ in range(3)]  # clusters, listeners, routes
            return acks

        acks = asyncio.run(asyncio.wait_for(run(), WAIT))
        assert sorted(a.split()[2] for a in acks) == ["clusters", "listeners", "routes"], acks
        assert all(a.startswith("edge-verify: ACK ") for a in acks), acks
        os.killpg(serve.pid, signal.SIGINT)
        _, rest = serve.communicate(timeout=WAIT)
        assert serve.returncode == 130
        assert rest.strip().splitlines()[-1] == "edge-verify: interrupted"
    finally:
        serve.kill()
        serve.wait()
