"""The Envoy model on a sidecar's xDS, held to Envoy 1.40.

A sidecar's xDS uses what the edge's does not: a capture listener that restores the
original destination (``original_dst``), filter chains chosen by destination address
and port (and application protocol, from the HTTP inspector), ``tcp_proxy`` to an
ORIGINAL_DST cluster for everything else, mTLS clusters that accept one SPIFFE
identity, and an inbound listener that admits mesh clients by certificate. The xDS
is written by hand (``sidecar_world``); the model must say, for each probe, which
filter chain, route and cluster take it, which identity the upstream handshake
accepted (or that it failed), which client identity the inbound listener admitted,
and the status, and real Envoy must do exactly that: one Envoy in a network
namespace of its own, with an nftables REDIRECT capturing the client pod's traffic
to Service addresses, mTLS echo backends presenting per-ServiceAccount SPIFFE
certificates, and an access log naming what Envoy chose.

The client pod's echo also serves Istio's echo control service: a ``ForwardEcho`` of
``count: 3``, made with messages compiled in the test from Istio's echo proto
(``istio_echo``), sends three requests from the client pod's own address, which the
capture hands to the sidecar; the three answers must read, by the upstream suite's
parsing, as the echo pod's (not the ClusterIP's stand-in), and the access log must
show the sidecar's route for each.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import ssl
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from grpclib.client import Channel, UnaryUnaryMethod
from istio_echo import compiled, parse_response
from sidecar_world import (
    APP_PORT,
    CAPTURE_PORT,
    CLIENT_POD,
    ECHO_IP,
    ECHO_POD,
    HANDOFF_IP,
    HANDOFF_PORT,
    HANDOFF_RANGE,
    MESH_PORT,
    NOBODY_IP,
    OTHER_IP,
    PROBE_HEADER,
    RESOURCES,
    SERVICE_RANGE,
    WEB_IP,
    WEB_POD,
    Pems,
    Probe,
    probes,
    sidecar,
    spiffe,
)

from verifier.gatewayapi.resources import load_resources
from verifier.live import netns
from verifier.live.echo import EchoBackend, EchoPort
from verifier.live.envoy_process import EnvoyProcess, envoy_available
from verifier.live.pki import Pki
from verifier.live.served import FLUSH_ARGS, ads_bootstrap
from verifier.pipeline import file_snapshot
from verifier.semantics.directory import backend_directory_from
from verifier.semantics.envoy.model import EnvoyModel
from verifier.semantics.pem import fingerprints
from verifier.xds import read
from verifier.xds.ads import TYPES, AdsServer
from verifier.xds.snapshot import Snapshot, dumps

if TYPE_CHECKING:
    from envoy_data_plane.envoy.config.route.v3 import RouteConfiguration

# The deprecated SAN matcher field is used on purpose (``mesh-deprecated-san``).
pytestmark = pytest.mark.filterwarnings("ignore:.*match_subject_alt_names is deprecated")


@dataclass(frozen=True)
class World:
    model: EnvoyModel
    snapshot: Snapshot
    probes: list[Probe]
    pki: Pki
    certs: dict[str, tuple[str, str]]  # probe certificate name -> (cert, key) files
    echo_cert: tuple[str, str]
    log: Path


async def _pki(base: Path) -> tuple[Pki, Pki, dict[str, tuple[str, str]]]:
    mesh, other = Pki(base / "mesh"), Pki(base / "other")
    await asyncio.gather(mesh.create(), other.create())
    wanted = {
        "sidecar": (mesh, spiffe("mesh-apps", "client")),
        "echo": (mesh, spiffe("mesh-apps", "echo")),
        "web": (mesh, spiffe("legacy", "web")),
        "foreign": (mesh, "spiffe://elsewhere.example/ns/x/sa/y"),
        "untrusted": (other, spiffe("legacy", "web")),
    }
    issued = {}
    for name, (pki, identity) in wanted.items():  # one Pki issues serially
        cert, key = await pki.issue(name, identity)
        issued[name] = (str(cert), str(key))
    return mesh, other, issued


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    base = tmp_path_factory.mktemp("sidecar")
    (base / "world.yaml").write_text(RESOURCES, encoding="utf-8")
    res = load_resources([str(base / "world.yaml")])
    mesh, other, certs = asyncio.run(_pki(base))
    ca = mesh.ca_cert.read_text()
    cert, key = (Path(p).read_text() for p in certs["sidecar"])
    log = base / "access.log"
    snap = sidecar(Pems(ca, cert, key), str(log))
    model = EnvoyModel(snap, backend_directory_from(res))
    found = probes(fingerprints(ca)[0], fingerprints(other.ca_cert.read_text())[0])
    return World(model, snap, found, mesh, certs, certs["echo"], log)


# --- what the model decides --------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """What happened to one probe, as the access log and the client can show it."""

    admitted: bool  # past the downstream handshake (an access log line exists)
    chain: str | None = None
    local: str | None = None  # the connection's local address, as restored
    route: str | None = None
    cluster: str | None = None
    upstream_identity: str | None = None  # accepted in the upstream mTLS handshake
    client_identity: str | None = None  # admitted by the inbound listener
    status: int = 0
    backend: tuple[str, str] | None = None  # (namespace, Service) that answered


def _route_cluster(configs: list[RouteConfiguration], route_name: str) -> str | None:
    for rc in configs:
        for vh in rc.virtual_hosts:
            for route in vh.routes:
                if route.name == route_name and read.one_of(route, "action")[0] == "route":
                    return route.route.cluster if route.route is not None else None
    return None


def predicted(world: World, probe: Probe) -> Decision:
    model, request = world.model, probe.request
    outcome = model.evaluate(request, redirect=probe.redirect).outcome
    selected = model.connection_of(request, probe.redirect)
    if selected is None:  # refused, or no filter chain: Envoy logs nothing
        return Decision(False)
    chain, conn = selected.chain, selected.downstream
    if chain.tls and chain.client.refusal(request.client_cert) is not None:
        return Decision(False)
    route = outcome.route.xds_name if outcome.route is not None else None
    cluster = chain.tcp.clusters[0][0] if chain.tcp is not None else None
    if route is not None and chain.hcm is not None:
        inline = [chain.hcm.route_config] if chain.hcm.route_config is not None else []
        cluster = _route_cluster([*world.snapshot.routes, *inline], route)
    target = model.resolver.target_for(cluster, conn) if cluster else None
    cert = request.client_cert
    return Decision(
        True,
        chain.name,
        f"{conn.address}:{conn.port}",
        route,
        cluster,
        target.identity if target is not None and not target.unavailable else None,
        cert.uri_sans[0] if chain.tls and cert is not None and cert.uri_sans else None,
        outcome.status,
        (outcome.backends[0].namespace, outcome.backends[0].name) if outcome.backends else None,
    )


ECHO, WEB, OTHER, CLIENT = ("mesh-apps", "echo"), ("legacy", "web"), ("legacy", "other"), None
CAPTURED = f"{ECHO_IP}:80"
ECHO_ID = spiffe("mesh-apps", "echo")


def _echo(route: str, cluster: str, status: int, identity: str | None = None) -> Decision:
    backend = ECHO if status == 200 else None
    chain = "mesh-apps/echo/80"
    return Decision(True, chain, CAPTURED, route, cluster, identity, None, status, backend)


# What Envoy 1.40 does with each probe (the live test below holds Envoy to it too).
EXPECTED = {
    "wrong-san": _echo("wrong-san", "mesh-wrong-san", 503),
    "prefix-san": _echo("prefix-san", "mesh-prefix-san", 200, ECHO_ID),
    "regex-san": _echo("regex-san", "mesh-regex-san", 200, ECHO_ID),
    "deprecated-san": _echo("deprecated-san", "mesh-deprecated-san", 200, ECHO_ID),
    "no-client-cert": _echo("no-client-cert", "mesh-no-client-cert", 503),
    "cleartext-to-tunnel": _echo("cleartext-to-tunnel", "cleartext-to-tunnel", 503),
    "tls-to-app": _echo("tls-to-app", "tls-to-app", 503),
    "through": _echo("through", "passthrough", 200),
    "mesh": _echo("mesh", "mesh/mesh-apps/echo/80", 200, ECHO_ID),
    "web": Decision(
        True, "legacy/web/80", f"{WEB_IP}:80", "web", "k8s/legacy/web/80", None, None, 200, WEB
    ),
    "h2c-only-chain": Decision(
        True, "passthrough", f"{OTHER_IP}:80", None, "passthrough", None, None, 200, OTHER
    ),
    "catch-all": Decision(True, "any/80", f"{NOBODY_IP}:80", "teapot", None, None, None, 418),
    "closed-port": Decision(True, "passthrough", f"{ECHO_IP}:81", None, "passthrough"),
    "handed-off": Decision(True, "8088", f"{HANDOFF_IP}:8088", "accepted", None, status=202),
    "not-handed-off": Decision(
        True, "virtual-default", f"{HANDOFF_IP}:9099", "misdirected", None, status=421
    ),
    "not-bound": Decision(False),
    "peer-in-domain": Decision(
        True,
        "inbound-mtls",
        f"{CLIENT_POD}:{MESH_PORT}",
        "inbound",
        "inbound/app",
        None,
        spiffe("legacy", "web"),
        200,
        ("mesh-apps", "client"),
    ),
    "peer-other-domain": Decision(False),
    "peer-untrusted-ca": Decision(False),
    "peer-without-cert": Decision(False),
}


def test_the_model_reads_the_sidecar_as_envoy_does(world: World) -> None:
    got = {p.name: predicted(world, p) for p in world.probes}
    assert got == EXPECTED


def test_explain_names_the_listener_chain_cluster_and_identities(world: World) -> None:
    by_name = {p.name: p for p in world.probes}

    def trace(name: str) -> str:
        probe = by_name[name]
        return "\n".join(world.model.evaluate(probe.request, redirect=probe.redirect).trace)

    mesh = trace("mesh")
    for said in (
        "redirected to 127.0.0.1:15001",
        "listener outbound",
        f"restored to {ECHO_IP}:80",
        "filter chain mesh-apps/echo/80",
        "cluster 'mesh/mesh-apps/echo/80'",
        f"presents {ECHO_ID}, accepted by SAN matcher URI exact",
    ):
        assert said in mesh
    assert f"does not accept (it accepts URI exact '{spiffe('mesh-apps', 'web')}')" in trace(
        "wrong-san"
    )
    assert "default filter chain passthrough" in trace("h2c-only-chain")
    assert "tcp_proxy: cluster 'passthrough' -> legacy/other:80" in trace("h2c-only-chain")
    inbound = trace("peer-in-domain")
    assert "listener inbound" in inbound and "filter chain inbound-mtls" in inbound
    assert f"client identity {spiffe('legacy', 'web')} admitted" in inbound
    assert "match no SAN matcher" in trace("peer-other-domain")


def test_a_config_dump_of_the_sidecar_reads_the_same(world: World, tmp_path: Path) -> None:
    """check --xds reads a sidecar's config_dump (as records where it can): every probe
    gets the same decision as from the messages."""
    path = tmp_path / "sidecar.json"
    path.write_text(dumps(world.snapshot), encoding="utf-8")
    snap, notes = file_snapshot(str(path), records=True)
    assert notes == []
    model = EnvoyModel(snap, world.model.resolver.directory)
    read_back = replace(world, model=model, snapshot=snap)
    assert [predicted(read_back, p) for p in world.probes] == [
        predicted(world, p) for p in world.probes
    ]


def test_without_capture_the_connection_goes_where_it_was_dialled(world: World) -> None:
    """Capture is an input: the same request not redirected reaches no listener here
    (nothing listens on the Service address in the sidecar's xDS)."""
    probe = next(p for p in world.probes if p.name == "mesh")
    assert world.model.evaluate(probe.request).outcome.status == 0


# --- what real Envoy does ----------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    status: int
    echo: dict[str, object] | None
    error: str


async def _send(probe: Probe, certs: dict[str, tuple[str, str]]) -> Answer:
    """One HTTP/1.1 request from ``probe.source``, over TLS with the probe's client
    certificate when the request is https."""
    req = probe.request
    ctx = None
    if req.scheme == "https":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        if probe.cert is not None:
            ctx.load_cert_chain(*certs[probe.cert])
    lines = [f"{req.method} {req.path} HTTP/1.1", f"Host: {req.host}"]
    lines += [f"{k}: {v}" for k, vs in req.headers for v in vs] + ["Connection: close", "", ""]
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                req.address,
                req.port,
                ssl=ctx,
                server_hostname=req.hostname if ctx else None,
                local_addr=(probe.source, 0),
            ),
            5,
        )
        writer.write("\r\n".join(lines).encode())
        data = await asyncio.wait_for(reader.read(), 5)
        writer.close()
    except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
        return Answer(0, None, repr(exc))
    if not data:
        return Answer(0, None, "closed without a response")
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    try:
        echo = json.loads(body)
    except ValueError:
        echo = None
    return Answer(status, echo if isinstance(echo, dict) else None, "")


CAPTURE_RULES = f"""
table ip sidecar_capture {{
  chain output {{
    type nat hook output priority -100; policy accept;
    ip saddr {CLIENT_POD} ip daddr {SERVICE_RANGE} meta l4proto tcp redirect to :{CAPTURE_PORT}
    ip saddr {CLIENT_POD} ip daddr {HANDOFF_RANGE} meta l4proto tcp redirect to :{HANDOFF_PORT}
  }}
}}
"""


FORWARD_PROBE = "forward-echo"


@dataclass(frozen=True)
class Forwarded:
    """What a ForwardEcho from the client pod's echo answered, and who could have."""

    output: list[str]
    echo_pod: str  # the echo pod's name: behind the sidecar's route, over mTLS
    stand_in_pod: str  # the ClusterIP's own echo: what an uncaptured request reaches
    logged: list[dict[str, str]]  # the sidecar's access log lines for FORWARD_PROBE


@dataclass(frozen=True)
class Live:
    answers: list[tuple[Answer, dict[str, str] | None]]
    forwarded: Forwarded


async def _forward_echo(control_port: int) -> list[str]:
    """``ForwardEcho`` of count 3 to the echo Service, with the messages compiled from
    Istio's proto (Google's protobuf through grpclib's protobuf codec)."""
    pb2, _ = compiled()
    channel = Channel(CLIENT_POD, control_port)
    try:
        call = UnaryUnaryMethod(
            channel,
            "/proto.EchoTestService/ForwardEcho",
            pb2.ForwardEchoRequest,
            pb2.ForwardEchoResponse,
        )
        headers = [("Host", "echo.mesh-apps.svc.cluster.local"), (PROBE_HEADER, FORWARD_PROBE)]
        request = pb2.ForwardEchoRequest(
            count=3,
            url=f"http://{ECHO_IP}/",
            headers=[pb2.Header(key=k, value=v) for k, v in headers],
        )
        reply = await call(request, timeout=20)
    finally:
        channel.close()
    return list(reply.output)


async def _live(world: World, workdir: Path) -> Live:
    """In the namespace: echo pods, the ADS server, Envoy, then the capture, then probes
    and the client pod's ForwardEcho."""
    echo_tls = world.pki.server_context(*(Path(p) for p in world.echo_cert))
    backends = [
        EchoBackend(
            "mesh-apps", "echo", ECHO_POD, [EchoPort(APP_PORT), EchoPort(MESH_PORT, tls=echo_tls)]
        ),
        EchoBackend("mesh-apps", "echo", ECHO_IP, [EchoPort(80)]),
        EchoBackend("legacy", "web", WEB_POD, [EchoPort(APP_PORT)]),
        EchoBackend("legacy", "other", OTHER_IP, [EchoPort(80)]),
        EchoBackend("mesh-apps", "client", CLIENT_POD, [EchoPort(APP_PORT)], control=0),
    ]
    await asyncio.gather(*(b.start() for b in backends))
    ads = AdsServer(world.snapshot)
    at = await ads.start("127.0.0.1", 0)
    envoy = EnvoyProcess(
        ads_bootstrap(at, ("127.0.0.1", 53)),
        workdir,
        listeners=["outbound", "inbound", "virtual"],
        extra_args=FLUSH_ARGS,
    )
    try:
        await envoy.start()
        for url in TYPES:
            answer = await asyncio.wait_for(ads.wait_answer(url, ads.versions[url]), 30)
            assert answer.accepted, answer.message
        done = subprocess.run(
            ["nft", "-f", "-"], input=CAPTURE_RULES, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
        answers = await asyncio.gather(*(_send(p, world.certs) for p in world.probes))
        assert backends[-1].control_port is not None
        output = await _forward_echo(backends[-1].control_port)
        # Wait for the lines the model expects (flushed every 50 ms, a tcp_proxy's when
        # its connection closes); a line that never comes shows as a difference below.
        expected = [p for p in world.probes if predicted(world, p).admitted]
        for _ in range(100):
            logged = _read_log(world.log)
            forwarded = [e for e in logged if e.get("probe") == FORWARD_PROBE]
            if all(_entry(logged, p) is not None for p in expected) and len(forwarded) >= 3:
                break
            await asyncio.sleep(0.05)
        return Live(
            [(a, _entry(logged, p)) for a, p in zip(answers, world.probes, strict=True)],
            Forwarded(output, backends[0].pod, backends[1].pod, forwarded),
        )
    finally:
        await envoy.stop()
        await ads.stop()
        await asyncio.gather(*(b.stop() for b in backends))


def _read_log(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _entry(logged: list[dict[str, str]], probe: Probe) -> dict[str, str] | None:
    """The probe's line: by its header (HTTP), else by its original destination
    (tcp_proxy, which sees no header)."""
    for entry in logged:
        if entry.get("probe") == probe.name:
            return entry
    local = f"{probe.request.address}:{probe.request.port}"
    return next((e for e in logged if e.get("probe") in (None, "-") and e["local"] == local), None)


def _field(entry: dict[str, str], key: str) -> str | None:
    value = entry.get(key)
    return None if value in (None, "-", "") else value


def observed(answer: Answer, entry: dict[str, str] | None) -> Decision:
    if entry is None:
        return Decision(False, status=answer.status)
    echo = answer.echo
    backend = (
        (str(echo["namespace"]), str(echo["service"])) if echo and answer.status == 200 else None
    )
    return Decision(
        True,
        _field(entry, "chain"),
        _field(entry, "local"),
        _field(entry, "route"),
        _field(entry, "cluster"),
        _field(entry, "upstream_san"),
        _field(entry, "downstream_san"),
        answer.status,
        backend,
    )


@pytest.fixture(scope="module")
def live(world: World, tmp_path_factory: pytest.TempPathFactory) -> Live:
    """One run of the sidecar world in its own network namespace, for the tests below."""
    # Never skipped for want of nft: the README's install step installs it.
    assert shutil.which("nft"), "capture needs nft: apt-get install nftables (README, Install)"
    compiled()  # protoc runs here, before the fork: the child imports nothing new
    addresses = [CLIENT_POD, ECHO_POD, WEB_POD, ECHO_IP, WEB_IP, OTHER_IP, NOBODY_IP, HANDOFF_IP]
    workdir = tmp_path_factory.mktemp("sidecar")
    return asyncio.run(netns.run_in_namespace(lambda: _live(world, workdir), addresses)).value


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
@pytest.mark.skipif(os.geteuid() != 0, reason=netns.NEEDS)
def test_real_envoy_does_what_the_model_predicts(world: World, live: Live) -> None:
    wrong = []
    for probe, (answer, entry) in zip(world.probes, live.answers, strict=True):
        live, model = observed(answer, entry), predicted(world, probe)
        if live != model:
            wrong.append(f"{probe.name}: live {live} ({answer.error or entry}), model {model}")
    assert wrong == []


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
@pytest.mark.skipif(os.geteuid() != 0, reason=netns.NEEDS)
def test_forward_echo_from_the_client_pod_goes_through_the_sidecar(live: Live) -> None:
    """Istio's in-mesh client, ours: three answers the upstream parser reads, each from
    the echo pod behind the sidecar's ``mesh`` route, none from the ClusterIP's stand-in."""
    forwarded = live.forwarded
    assert len(forwarded.output) == 3
    for index, output in enumerate(forwarded.output):
        got = parse_response(output)
        assert output.startswith(f"[{index}] Url=http://{ECHO_IP}/\n")
        assert got.code == "200"
        assert got.hostname == forwarded.echo_pod != forwarded.stand_in_pod
        assert got.host == "echo.mesh-apps.svc.cluster.local"
        assert (got.url, got.method) == ("/", "GET")
        assert got.request_headers["X-Probe"] == [FORWARD_PROBE]
    assert [(e["route"], e["cluster"]) for e in forwarded.logged] == [
        ("mesh", "mesh/mesh-apps/echo/80")
    ] * 3
