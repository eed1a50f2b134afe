"""ForwardEcho: our echo as the in-mesh client, the way Istio's echo is one.

A mesh test has to send its request from inside the mesh: from the client pod's own
process, so that the pod's traffic capture hands it to the sidecar. Istio's echo does
that on request (``EchoTestService.ForwardEcho``); ours does the same, with the same
request message and the same answer: one ``output`` string per request, in request
order, made of Istio's ``[N] Field=value`` lines, which Istio's tooling and the Gateway
API mesh suite parse (``pkg/test/echo/parse.go``, ``conformance/utils/echo/parse.go``)::

    [0] Url=http://echo.mesh-apps/
    [0] Header=X-Probe:one              the request headers sent (Host sets the authority)
    [0] StatusCode=200
    [0] ResponseHeader=Content-Type:application/json
    [0 body] ServicePort=80             the answer's body, one line each
    [0 body] Host=echo.mesh-apps
    [0 body] URL=/
    ...
    [0 body] RequestHeader=X-Probe:one
    [0 body] Hostname=echo-v1-0b1c2d3e4f-5a6b7

Istio's echo answers with such ``Field=value`` lines itself, and they are passed on as
they came. Our echo backends answer as the conformance suite's echo-basic does, in
JSON; that answer is written as the lines Istio's echo would have answered with
(``echo_lines``), so a parser of Istio's output reads the responding pod
(``Hostname``), the authority and path it saw, and the request headers it received.

The requests are plain HTTP/1.1 from this process (aiohttp), from the echo's own
address (a pod's echo: on the pod's own sockets), names resolved as a pod resolves them
when the echo is given a cluster DNS server (``ClusterResolver``: the pod's search
path, then the name, over UDP from the pod), bounded in number (``MAX_COUNT``) and time
(the request's ``timeout_micros``, Istio's 15 s when 0, at most ``MAX_TIMEOUT_S`` for
the whole set). A field this client cannot honour is refused with the gRPC status and
the field's name (``Refused``), never ignored; ``message`` is accepted and not sent,
as Istio's own HTTP forwarder does (Istio's ``client`` sets it on every call).
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import yarl
from aiohttp.abc import AbstractResolver, ResolveResult
from dnslib import QTYPE, DNSRecord
from grpclib.const import Status

from verifier.live.echo_model import go_canonical
from verifier.live.echoproto.proto import ForwardEchoRequest, ProxyProtoVersion

DEFAULT_TIMEOUT_S = 15.0  # Istio's DefaultRequestTimeout, for timeout_micros 0
MAX_TIMEOUT_S = 300.0
MAX_COUNT = 1000
MAX_BODY = 1 << 20
MAX_REDIRECTS = 10  # Go's http.Client, which Istio's forwarder uses
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 token: methods and names

# Fields of Istio's ForwardEchoRequest this client does not do, as the proto spells them,
# with why: set, they are refused (UNIMPLEMENTED), never ignored.
UNSUPPORTED: Mapping[str, str] = {
    "http2": "h2c prior knowledge: this echo forwards HTTP/1.1 only",
    "http3": "HTTP/3: this echo forwards HTTP/1.1 only",
    "serverFirst": "server-first protocols are TCP forwarding, which this echo does not do",
    "expectedResponse": "an expected response is TCP forwarding, which this echo does not do",
    "cert": "TLS client options need https://, which this echo does not forward",
    "key": "TLS client options need https://, which this echo does not forward",
    "caCert": "TLS client options need https://, which this echo does not forward",
    "certFile": "TLS client options need https://, which this echo does not forward",
    "keyFile": "TLS client options need https://, which this echo does not forward",
    "caCertFile": "TLS client options need https://, which this echo does not forward",
    "insecureSkipVerify": "TLS client options need https://, which this echo does not forward",
    "alpn": "TLS client options need https://, which this echo does not forward",
    "serverName": "TLS client options need https://, which this echo does not forward",
    "hbone": "HBONE tunnels are not supported by this echo",
    "double_hbone": "HBONE tunnels are not supported by this echo",
    "proxyProtocolVersion": "the PROXY protocol is not supported by this echo",
}
# The proto's names of the generated module's attributes that differ from them.
_ATTRIBUTE = {
    "serverFirst": "server_first",
    "expectedResponse": "expected_response",
    "caCert": "ca_cert",
    "certFile": "cert_file",
    "keyFile": "key_file",
    "caCertFile": "ca_cert_file",
    "insecureSkipVerify": "insecure_skip_verify",
    "serverName": "server_name",
    "proxyProtocolVersion": "proxy_protocol_version",
}
# Makes the socket of a connection (aiohttp's ``socket_factory``: a getaddrinfo entry in).
SocketFactory = Callable[[Any], socket.socket]
_MESSAGES = {"alpn", "hbone", "double_hbone", "expectedResponse"}
DNS_TIMEOUT_S = 2.0  # one query, as a pod's resolver waits (resolv.conf timeout:2)
NDOTS = 5  # kubelet's resolv.conf: names with fewer dots try the search path first
_FAMILIES = {"": socket.AF_UNSPEC, "tcp4": socket.AF_INET, "tcp6": socket.AF_INET6}


class Refused(Exception):
    """A ForwardEcho (or its outcome) answered with a gRPC error: status and message."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Forward:
    """A ForwardEchoRequest this client will carry out, defaults filled in as Istio's."""

    url: str
    count: int
    qps: int
    timeout: float
    method: str
    host: str | None  # the Host header's value, if given: the request's authority
    headers: tuple[tuple[str, str], ...]  # the others, in order, names as Go writes them
    new_connection: bool
    force_dns: bool
    family: socket.AddressFamily
    follow_redirects: bool


def _is_set(request: ForwardEchoRequest, field: str) -> bool:
    """Set as Istio reads it: a message field (``expectedResponse`` included, a wrapper
    whose empty string still means "expect nothing") when present, a scalar when not zero."""
    value = getattr(request, _ATTRIBUTE.get(field, field))
    if value is None:
        return False
    if isinstance(value, ProxyProtoVersion):
        return value != ProxyProtoVersion.NONE
    return field in _MESSAGES or bool(value)


def unknown_fields(data: bytes) -> list[int]:
    """The field numbers in protobuf wire bytes (the parser's unknown fields)."""
    numbers, pos = [], 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            _, pos = _varint(data, pos)
        elif wire == 1:
            pos += 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            pos += size
        elif wire == 5:
            pos += 4
        else:  # groups: deprecated, never in this proto
            numbers.append(number)
            break
        numbers.append(number)
    return sorted(set(numbers))


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while pos < len(data):
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
    return value, pos


def plan(request: ForwardEchoRequest) -> Forward:
    """The request checked and completed; ``Refused`` names the first field it cannot honour."""
    unknown = unknown_fields(getattr(request, "_unknown_fields", b""))
    if unknown:
        numbers = ", ".join(map(str, unknown))
        raise Refused(Status.UNIMPLEMENTED, f"fields {numbers}: not in the echo proto we know")
    for field, why in UNSUPPORTED.items():
        if _is_set(request, field):
            raise Refused(Status.UNIMPLEMENTED, f"{field}: {why}")
    if not 0 <= request.count <= MAX_COUNT:
        raise Refused(Status.INVALID_ARGUMENT, f"count: {request.count} not in 0..{MAX_COUNT}")
    if request.qps < 0:
        raise Refused(Status.INVALID_ARGUMENT, f"qps: {request.qps} is negative")
    timeout = request.timeout_micros / 1e6 or DEFAULT_TIMEOUT_S
    if not 0 < timeout <= MAX_TIMEOUT_S:
        raise Refused(
            Status.INVALID_ARGUMENT,
            f"timeout_micros: {request.timeout_micros} not in 0..{int(MAX_TIMEOUT_S * 1e6)}",
        )
    method = request.method or "GET"
    if not _TOKEN.fullmatch(method):
        raise Refused(Status.INVALID_ARGUMENT, f"method: {method!r} is not an HTTP method")
    if request.force_ip_family not in _FAMILIES:
        raise Refused(
            Status.INVALID_ARGUMENT,
            f"force_ip_family: {request.force_ip_family!r} is neither tcp4 nor tcp6",
        )
    _check_url(request.url)
    host, headers = None, []
    for header in request.headers:
        if not _TOKEN.fullmatch(header.key) or re.search(r"[\r\n\0]", header.value):
            raise Refused(Status.INVALID_ARGUMENT, f"headers: {header.key!r} is not a header")
        if header.key.lower() != "host":
            headers.append((go_canonical(header.key), header.value))
        elif host is None:  # Go's Header.Get: the first Host
            host = header.value
    return Forward(
        url=request.url,
        count=max(request.count, 1),
        qps=request.qps,
        timeout=timeout,
        method=method,
        host=host,
        headers=tuple(headers),
        new_connection=request.new_connection_per_request,
        force_dns=request.new_connection_per_request and request.force_dns_lookup,
        family=_FAMILIES[request.force_ip_family],
        follow_redirects=request.follow_redirects,
    )


def _check_url(url: str) -> None:
    scheme, sep, _ = url.partition("://")
    if not sep or not scheme:
        raise Refused(Status.INVALID_ARGUMENT, f"url: {url!r}: missing protocol scheme")
    if scheme.lower() != "http":
        raise Refused(
            Status.UNIMPLEMENTED, f"url: scheme {scheme.lower()!r}: this echo forwards http:// only"
        )
    try:
        parsed = yarl.URL(url, encoded=True)
    except ValueError as exc:
        raise Refused(Status.INVALID_ARGUMENT, f"url: {url!r}: {exc}") from exc
    if not parsed.host:
        raise Refused(Status.INVALID_ARGUMENT, f"url: {url!r} names no host")


class ClusterResolver(AbstractResolver):
    """Names resolved as a pod of ``namespace`` resolves them: through the cluster DNS
    ``server`` (host, port), the pod's search path first for a name of fewer than
    ``NDOTS`` dots (``echo`` is ``echo.<namespace>.svc.cluster.local``), over UDP on a
    socket ``sockets`` makes (the pod's own); A records only (the mesh is IPv4)."""

    def __init__(
        self,
        server: tuple[str, int],
        namespace: str,
        sockets: SocketFactory | None = None,
        domain: str = "cluster.local",
    ) -> None:
        self.server = server
        self.search = (f"{namespace}.svc.{domain}", f"svc.{domain}", domain)
        self.sockets = sockets

    def names(self, host: str) -> list[str]:
        """The names asked for ``host``, in order (resolv.conf's search and ndots)."""
        name = host.rstrip(".")
        if host.endswith(".") or name.count(".") >= NDOTS:
            return [name]
        return [*(f"{name}.{suffix}" for suffix in self.search), name]

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        for name in self.names(host):
            found = await self._ask(name)
            if found:
                return [
                    ResolveResult(
                        hostname=host,
                        host=ip,
                        port=port,
                        family=socket.AF_INET,
                        proto=0,
                        flags=socket.AI_NUMERICHOST,
                    )
                    for ip in found
                ]
        raise OSError(f"lookup {host} on {self.server[0]}:{self.server[1]}: no such host")

    async def _ask(self, name: str) -> list[str]:
        info = (socket.AF_INET, socket.SOCK_DGRAM, 0, "", self.server)
        sock = self.sockets(info) if self.sockets else socket.socket(*info[:3])
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[bytes] = loop.create_future()

        class _Answer(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
                if not reply.done():
                    reply.set_result(data)

        try:
            sock.setblocking(False)
            sock.connect(self.server)
        except OSError:
            sock.close()
            raise
        transport, _ = await loop.create_datagram_endpoint(_Answer, sock=sock)
        try:
            transport.sendto(DNSRecord.question(name, "A").pack())
            answer = DNSRecord.parse(await asyncio.wait_for(reply, DNS_TIMEOUT_S))
        except TimeoutError:
            raise OSError(f"lookup {name}: no answer from {self.server[0]}") from None
        finally:
            transport.close()
        return [str(r.rdata) for r in answer.rr if r.rtype == QTYPE.A]

    async def close(self) -> None:
        return None


async def forward(
    fwd: Forward,
    source: str | None = None,
    sockets: SocketFactory | None = None,
    resolver: AbstractResolver | None = None,
) -> list[str]:
    """Send the requests (from ``source``, the echo's own address, if given; on sockets
    ``sockets`` makes, if given: a pod's own; names through ``resolver``, if given, else
    the host's) and return one output string per request; ``Refused`` if any failed or
    the set timed out, as Istio's forwarder fails the whole call."""
    connector = aiohttp.TCPConnector(
        resolver=resolver,
        socket_factory=sockets,
        local_addr=(source, 0) if source else None,
        force_close=fwd.new_connection,
        use_dns_cache=not fwd.force_dns,
        family=fwd.family,
    )
    session = aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=fwd.timeout),
        skip_auto_headers=("Accept", "Accept-Encoding"),
        auto_decompress=False,
    )
    tasks: list[asyncio.Task[str]] = []
    try:
        async with session, asyncio.timeout(fwd.timeout):
            loop = asyncio.get_running_loop()
            start = loop.time()
            for index in range(fwd.count):
                if fwd.qps:  # Istio ticks before each request, the first included
                    await asyncio.sleep(max(0.0, start + (index + 1) / fwd.qps - loop.time()))
                tasks.append(asyncio.create_task(_one(session, fwd, index)))
            results = await asyncio.gather(*tasks, return_exceptions=True)
    except TimeoutError:
        done = sum(1 for t in tasks if t.done() and not t.cancelled() and not t.exception())
        raise Refused(
            Status.DEADLINE_EXCEEDED,
            f"request set timed out after {fwd.timeout:g}s and only {done}/{fwd.count} "
            "requests completed",
        ) from None
    finally:
        for task in tasks:
            task.cancel()
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        first = failed[0]
        raise Refused(
            Status.UNAVAILABLE,
            f"{len(failed)}/{fwd.count} requests had errors; first error: "
            f"{type(first).__name__}: {first}",
        )
    return [r for r in results if isinstance(r, str)]


async def _one(session: aiohttp.ClientSession, fwd: Forward, index: int) -> str:
    lines = [f"[{index}] Url={fwd.url}"]
    headers = list(fwd.headers)
    lines += [f"[{index}] Header={name}:{value}" for name, value in headers]
    if fwd.host is not None:
        headers.append(("Host", fwd.host))
    async with session.request(
        fwd.method,
        yarl.URL(fwd.url, encoded=True),
        headers=headers,
        allow_redirects=fwd.follow_redirects,
        max_redirects=MAX_REDIRECTS,
    ) as response:
        body = b""
        while chunk := await response.content.read(MAX_BODY + 1 - len(body)):
            body += chunk  # read(n) gives what has come, up to n: read on to the end
            if len(body) > MAX_BODY:
                raise ValueError(f"the answer's body is over {MAX_BODY} bytes")
        lines.append(f"[{index}] StatusCode={response.status}")
        answered: dict[str, list[str]] = {}
        for name, value in response.headers.items():
            answered.setdefault(go_canonical(name), []).append(value)
        for name in sorted(answered):
            lines += [f"[{index}] ResponseHeader={name}:{value}" for value in answered[name]]
        lines += [f"[{index} body] {line}" for line in body_lines(response.content_type, body)]
    return "".join(f"{line}\n" for line in lines)


def body_lines(content_type: str, body: bytes) -> list[str]:
    """The answer's body as Istio's lines: an echo-basic JSON answer as Istio's echo
    would have written it (``echo_lines``), anything else line by line, as it came."""
    if content_type == "application/json":
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and {"path", "host", "method", "headers", "pod"} <= doc.keys():
            return echo_lines(doc)
    return [line for line in body.decode("utf-8", "replace").split("\n") if line]


def echo_lines(doc: Mapping[str, Any]) -> list[str]:
    """An echo-basic answer as the fields Istio's echo answers with, in its order: the
    Service port, the authority, the request URI, the namespace, method, protocol, the
    request headers (sorted, one line a value) and, last, the pod (``Hostname``)."""
    lines = []
    if doc.get("servicePort"):
        lines.append(f"ServicePort={doc['servicePort']}")
    lines += [f"Host={doc['host']}", f"URL={doc['path']}"]
    if doc.get("namespace"):
        lines.append(f"Namespace={doc['namespace']}")
    lines += [f"Method={doc['method']}", f"Proto={doc.get('proto', '')}"]
    headers = doc["headers"] if isinstance(doc["headers"], dict) else {}
    for name in sorted(headers):
        values = headers[name] if isinstance(headers[name], list) else [headers[name]]
        lines += [f"RequestHeader={name}:{value}" for value in values]
    lines.append(f"Hostname={doc['pod']}")
    return lines
