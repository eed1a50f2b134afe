"""The embedded live data plane, piece by piece.

Each piece is an oracle for the next: DNS must answer what STRICT_DNS clusters
dial, echo backends must report what echo-basic reports (the cases were written
against it), and Envoy must really serve a translated fixture, with the mesh
path's SPIFFE check really enforced. These run without pytest-asyncio: each
test drives its own event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import struct
from pathlib import Path

import pytest
from conftest import FIXTURES
from dnslib import QTYPE, RCODE, DNSRecord

from verifier.live.client import LiveResponse, send
from verifier.live.dns import DnsServer, service_fqdn
from verifier.live.echo import EchoBackend, EchoPort, parse_go_duration
from verifier.live.envoy_process import (
    EnvoyError,
    EnvoyProcess,
    envoy_available,
    listening_sockets,
)
from verifier.live.harness import GATEWAY_ADDRESS, EmbeddedHarness
from verifier.live.replay import live_unmet, load_cases, load_scenario, run_with
from verifier.semantics.request import Backend, RedirectTarget, Request, headers_from_mapping

pytestmark = pytest.mark.live
needs_envoy = pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
FREE_IP = "127.77.0.1"  # ad-hoc echo address for the direct echo tests


def _query(port: int, name: str, qtype: str, tcp: bool) -> DNSRecord:
    packet = DNSRecord.question(name, qtype).pack()
    if tcp:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(struct.pack("!H", len(packet)) + packet)
            size = struct.unpack("!H", s.recv(2))[0]
            return DNSRecord.parse(s.recv(size))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        s.sendto(packet, ("127.0.0.1", port))
        return DNSRecord.parse(s.recv(4096))


def test_dns_answers_services_and_nxdomain_otherwise() -> None:
    name = service_fqdn("edge-infra", "infra-backend-v1")

    async def run() -> list[DNSRecord]:
        async with DnsServer({name: "127.9.9.9"}) as dns:
            loop = asyncio.get_running_loop()
            queries = [
                (name, "A", False),
                (name.upper(), "A", True),
                (name, "AAAA", False),
                ("nope.edge-infra.svc.cluster.local", "A", False),
            ]
            return [
                await loop.run_in_executor(None, _query, dns.port, n, t, tcp)
                for n, t, tcp in queries
            ]

    a_udp, a_tcp, aaaa, missing = asyncio.run(run())
    assert [str(r.rdata) for r in a_udp.rr] == ["127.9.9.9"]
    assert [str(r.rdata) for r in a_tcp.rr] == ["127.9.9.9"]
    assert aaaa.header.rcode == RCODE.NOERROR and not aaaa.rr  # NODATA, as kube-dns
    assert missing.header.rcode == RCODE.NXDOMAIN
    assert a_udp.rr[0].rtype == QTYPE.A


def test_go_durations() -> None:
    assert parse_go_duration("2s") == 2.0
    assert parse_go_duration("100ms") == pytest.approx(0.1)
    assert parse_go_duration("1m30s") == 90.0
    assert parse_go_duration("2") is None  # Go requires a unit


def _request(path: str, headers: dict[str, str] | None = None, port: int = 8080) -> Request:
    return Request(
        host="echo.example.com", port=port, path=path, headers=headers_from_mapping(headers)
    )


def test_echo_reports_like_echo_basic() -> None:
    async def run() -> tuple[EchoBackend, list[LiveResponse]]:
        async with EchoBackend("edge-infra", "infra-backend-v1", FREE_IP, [EchoPort(0)]) as echo:
            target = (FREE_IP, echo.bound[0])
            hdrs = {"x-custom": "a", "X-Echo-Set-Header": "X-One:1,X-Two:2"}
            plain = await send(_request("/a/b?x=1&y=%20", hdrs), target)
            ws_no_origin = await send(
                _request("/ws", {"Connection": "Upgrade", "Upgrade": "websocket",
                                 "Sec-WebSocket-Version": "13",
                                 "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}),
                target,
            )  # fmt: skip
            return echo, [plain, ws_no_origin]

    echo, (plain, ws_no_origin) = asyncio.run(run())
    body = plain.echo
    assert plain.status == 200 and body is not None
    assert body["path"] == "/a/b?x=1&y=%20"
    assert (body["host"], body["method"], body["proto"]) == ("echo.example.com", "GET", "HTTP/1.1")
    assert body["headers"]["X-Custom"] == ["a"]  # Go-canonical names, Host not among them
    assert "Host" not in body["headers"] and "User-Agent" not in body["headers"]
    assert body["namespace"] == "edge-infra" and body["pod"].startswith("infra-backend-v1-")
    assert plain.header("X-One") == ("1",) and plain.header("X-Two") == ("2",)
    assert [r.path for r in echo.records] == ["/a/b?x=1&y=%20", "/ws"]
    assert ws_no_origin.status == 403  # golang.org/x/net/websocket without Origin


def test_echo_h2c_port_answers_only_http2() -> None:
    async def run() -> tuple[LiveResponse, LiveResponse]:
        async with EchoBackend(
            "edge-infra", "infra-backend-v1-h2c", FREE_IP, [EchoPort(0, h2c=True)]
        ) as echo:
            target = (FREE_IP, echo.bound[0])
            h2 = await send(_request("/h2?delay=10ms"), target, protocol="h2c")
            h1 = await send(_request("/h1"), target)
            return h2, h1

    h2, h1 = asyncio.run(run())
    assert h2.status == 200 and h2.echo is not None
    assert (h2.echo["proto"], h2.echo["path"]) == ("HTTP/2.0", "/h2?delay=10ms")
    assert h2.echo["host"] == "echo.example.com"
    assert h1.status == 400 and h1.body == b"Expected h2c request"


@needs_envoy
def test_envoy_serves_a_translated_fixture() -> None:
    res, snap = load_scenario(FIXTURES / "httproute-exact-path-matching")

    async def run() -> tuple[
        EmbeddedHarness, list[int | None], LiveResponse, LiveResponse, LiveResponse
    ]:
        async with EmbeddedHarness(res, snap) as harness:
            sockets = [listening_sockets(*a) for a in harness.gateway_ports.values()]
            hit = await harness.send(
                Request(
                    host="exact-path.example.com",
                    port=80,
                    path="/one?x=1",
                    headers=headers_from_mapping({"X-Mine": "v"}),
                )
            )
            miss = await harness.send(Request(host="exact-path.example.com", port=80, path="/x"))
            no_port = await harness.send(Request(host="exact-path.example.com", port=9))
            return harness, sockets, hit, miss, no_port

    harness, sockets, hit, miss, no_port = asyncio.run(run())
    # Each Gateway's listener is bound (in the xDS) to that Gateway's own address;
    # Envoy really listens on loopback, and nothing is sent to the Gateway address.
    assert set(harness.gateway_ports) == {
        (harness.gateway_addresses[("edge-infra", "same-namespace")], 80),
        (harness.gateway_addresses[("edge-infra", "all-namespaces")], 8080),
    }
    # Each Gateway on a loopback address of its own (192.0.2.x -> 127.0.2.x).
    real = {xds: ip for (xds, _), (ip, _) in harness.gateway_ports.items()}
    assert real == {xds: "127." + xds.split(".", 1)[1] for xds in real}, real
    assert len(set(real.values())) == 2
    assert all(port not in (80, 8080) for _, port in harness.gateway_ports.values())
    # Kernel-chosen ports with exactly one LISTEN socket each: Envoy's single worker, nobody
    # else (two Envoys on one port would silently share it through SO_REUSEPORT).
    assert all(n in (1, None) for n in sockets)
    outcome = harness.to_outcome(hit)
    assert outcome.status == 200
    assert outcome.backends == (Backend("edge-infra", "infra-backend-v1", 8080),)
    assert outcome.request is not None
    assert outcome.request.path == "/one?x=1" and outcome.request.host == "exact-path.example.com"
    # Envoy's own x-forwarded-*/x-request-id/x-envoy-* are not part of the Outcome.
    assert outcome.request.headers == (("x-mine", ("v",)),)
    assert harness.to_outcome(miss).status == 404
    assert no_port.status == 0 and no_port.error  # no listener: connection refused
    assert harness.effective_request(Request(port=80)).host == GATEWAY_ADDRESS


@needs_envoy
def test_mesh_identity_is_enforced() -> None:
    """The echo presents its pods' SPIFFE ID; a different SA must fail the handshake (503)."""
    scenario = FIXTURES / "httproute-mesh-backend"
    res, snap = load_scenario(scenario)
    cases = [c for c in load_cases(scenario, res) if c.case.name.startswith("mesh-backend-from")]
    key = next(k for k in res.workloads if k[1:] == ("mesh-apps", "mesh-backend-v1"))

    async def run() -> tuple[list[int], list[int], list[str]]:
        async with EmbeddedHarness(res, snap) as harness:
            good = [r.responses[0].status for r in await run_with(harness, cases)]
            notes = [f"{m.address}->{m.loopback}" for m in harness.endpoint_mappings]
        res.workloads[key] = dataclasses.replace(res.workloads[key], service_account="intruder")
        async with EmbeddedHarness(res, snap) as harness:
            bad = [r.responses[0].status for r in await run_with(harness, cases)]
        return good, bad, notes

    good, bad, notes = asyncio.run(run())
    assert good == [200, 200] and bad == [503, 503]
    assert notes and notes[0].startswith("10.244.40.1->127.")


@needs_envoy
def test_envoy_failure_surfaces_its_log(tmp_path: Path) -> None:
    bad = {"static_resources": {"clusters": [{"name": "x", "type": "NOPE"}]}}
    with pytest.raises(EnvoyError, match=r"(?s)exited with status 1\n.*unknown enum value: 'NOPE'"):
        asyncio.run(EnvoyProcess(bad, tmp_path).start(timeout=20))


def test_to_outcome_redirect_uses_effective_port() -> None:
    harness = EmbeddedHarness.__new__(EmbeddedHarness)
    harness.pods = {}
    harness.backends = {}
    req = Request(host="a.example.com", port=80, path="/p?q=1")

    def location(value: str) -> RedirectTarget | None:
        return harness.to_outcome(LiveResponse(req, 302, (("Location", value),))).redirect

    assert location("https://b.example.com/x?y=1") == RedirectTarget(
        "https", "b.example.com", 443, "/x"
    )
    assert location("http://b.example.com:8080/") == RedirectTarget(
        "http", "b.example.com", 8080, "/"
    )
    assert location("/rel") == RedirectTarget("http", "a.example.com", 80, "/rel")
    # A Host that carried a port keeps it when a redirect sets another: Envoy writes
    # "host:8080:8083" (mesh-redirect-port, from a client sending Host svc:8080), which
    # urlsplit cannot read; the host is all before the last colon.
    assert location("http://b.example.com:8080:8083/") == RedirectTarget(
        "http", "b.example.com:8080", 8083, "/"
    )
    assert location("http://[::1]:8080/") == RedirectTarget("http", "::1", 8080, "/")
    assert location("http://B.Example.com/") == RedirectTarget("http", "b.example.com", 80, "/")


@needs_envoy
def test_sampled_case_and_mirrors_are_judged() -> None:
    scenario = FIXTURES / "httproute-request-mirror"
    res, snap = load_scenario(scenario)
    cases = load_cases(scenario, res)

    async def run() -> list[list[str]]:
        async with EmbeddedHarness(res, snap) as harness:
            return [live_unmet(r) for r in await run_with(harness, cases)]

    assert asyncio.run(run()) == [[] for _ in cases]


CHUNKED = b"3\r\nhel\r\n2;x=1\r\nlo\r\n0\r\n\r\n"


@pytest.mark.parametrize(
    ("head", "body", "closed"),
    [
        (b"Content-Length: 5", b"hello", False),
        (b"Transfer-Encoding: chunked", CHUNKED, False),
        (b"Connection: close", b"hello", True),
    ],
    ids=["content-length", "chunked", "until-close"],
)
def test_a_pods_response_is_read_to_its_end_by_its_framing(
    head: bytes, body: bytes, closed: bool
) -> None:
    """``verifier.live.wire``: what a mesh request's raw connection reads. A framed
    response is read to its end without waiting for the connection to close (Envoy
    keeps one open for 1 s after a local reply unless the client closes it)."""
    from verifier.live.wire import parse_response, read_response

    wire = b"HTTP/1.1 200 OK\r\n" + head + b"\r\n\r\n" + body

    async def read() -> bytes:
        reader = asyncio.StreamReader()
        reader.feed_data(wire)
        if closed:
            reader.feed_eof()  # else a read past the framing would wait for ever
        return await asyncio.wait_for(read_response(reader), 5)

    data = asyncio.run(read())
    assert data == wire
    answer = parse_response(Request(host="a", path="/"), data)
    assert (answer.status, answer.body) == (200, b"hello")
    assert parse_response(Request(host="a", path="/"), b"").error == "closed without a response"
