"""Send one ``Request`` to a live Envoy exactly as the case describes it.

The client must not add meaning of its own: the request target is sent
byte-for-byte (no normalisation of ``..``, ``//`` or escapes), only the case's
headers plus Host are sent (aiohttp's automatic Accept/User-Agent headers are
suppressed, since the backend reports every header it sees and the Envoy model
only knows the case's), every request gets a fresh connection (aiohttp pools
by host:port, not by SNI, and a reused TLS connection would carry the previous
case's SNI into a 421 check), and redirects are not followed.

Three transports: aiohttp for HTTP/1.1 and HTTPS; a small ``h2`` client for
HTTP/2 with prior knowledge (cleartext); and a raw socket for WebSocket
upgrades, because the case fixes ``Sec-WebSocket-Key`` and expects the matching
``Sec-WebSocket-Accept``, which aiohttp's ws_connect would not let it choose.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
import h2.config
import h2.connection
import h2.events
import h2.exceptions
from multidict import CIMultiDict
from yarl import URL

from verifier.semantics.live_fields import PROTOCOLS
from verifier.semantics.request import Request

DEFAULT_TIMEOUT = 10.0
_SKIP_AUTO = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")


@dataclass(frozen=True)
class AccessEntry:
    """Envoy's own access-log line for one request: which xDS route and cluster it took.

    Only Envoy knows which route it matched; the answer alone cannot say whether a
    200 came from the route the case meant or from a broader one that happens to
    reach the same Service. The namespace harness adds this log (the one permitted
    addition to the served xDS) and matches lines to requests by a header of ours.
    """

    route: str  # %ROUTE_NAME% ("" when Envoy matched no route)
    cluster: str  # %UPSTREAM_CLUSTER% ("" for direct responses, redirects, 404s)
    code: int  # %RESPONSE_CODE%
    flags: str  # %RESPONSE_FLAGS% ("-" when none)


@dataclass(frozen=True)
class LiveResponse:
    """What came back for one request, kept raw enough to judge any expectation.

    ``headers`` are the response header (name, value) pairs as received;
    ``echo`` the parsed echo-basic JSON when a backend answered; ``error`` is
    set (and ``status`` 0) when no HTTP response arrived at all.
    ``mirrored`` is filled by the harness afterwards: the ``(namespace,
    service, service port)`` of every echo backend that logged a mirrored copy.
    """

    request: Request
    status: int
    headers: tuple[tuple[str, str], ...] = ()
    echo: dict[str, Any] | None = None
    body: bytes = b""
    protocol: str = "http1"
    websocket_echoes: tuple[str, ...] = ()
    error: str | None = None
    elapsed: float = 0.0
    mirrored: tuple[tuple[str, str, int], ...] = field(default=())
    correlation: str = ""  # the harness's request id (header x-edge-verify-id), if it set one
    access: AccessEntry | None = None  # Envoy's access-log line for it, when the harness has one

    def header(self, name: str) -> tuple[str, ...]:
        lname = name.lower()
        return tuple(v for k, v in self.headers if k.lower() == lname)

    @property
    def location(self) -> str | None:
        values = self.header("location")
        return values[0] if values else None


def _echo_of(body: bytes, content_type: str) -> dict[str, Any] | None:
    """The echo JSON, recognised by its shape rather than trusted by status code."""
    if "json" not in content_type.lower():
        return None
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(doc, dict) and "pod" in doc and "namespace" in doc and "path" in doc:
        return doc
    return None


def _insecure_tls(request: Request | None = None) -> ssl.SSLContext:
    """Fixture certificates are self-signed; what is under test is SNI routing, not trust.
    A request with a client certificate presents it (GEP-91 client validation)."""
    # Not create_default_context: it loads the system's CA store (~90 ms a request,
    # measured) for a verification that is switched off anyway.
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    cert = request.client_cert if request is not None else None
    if cert is not None:
        if not cert.cert_file:
            raise ValueError(
                f"no certificate file for the client certificate of CA {cert.issuer[:12]}"
            )
        ctx.load_cert_chain(cert.cert_file, cert.key_file or None)
    return ctx


def _header_pairs(request: Request) -> list[tuple[str, str]]:
    return [(name, value) for name, values in request.headers for value in values]


def _is_upgrade(request: Request) -> bool:
    return bool(request.header("upgrade"))


async def send(
    request: Request,
    connect: tuple[str, int],
    *,
    protocol: str = "http1",
    websocket_messages: Sequence[str] = (),
    timeout: float = DEFAULT_TIMEOUT,
) -> LiveResponse:
    """Send ``request`` to ``connect`` (the harness's address for the Gateway port).

    ``request.host`` must be set (the harness fills the default). Upgrade
    requests go over a raw socket and, after a 101, send ``websocket_messages``
    and record what comes back.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; expected one of {PROTOCOLS}")
    if not request.host:
        raise ValueError("request.host must be set (use EmbeddedHarness.effective_request)")
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        if protocol == "h2c":
            if request.scheme != "http":
                raise ValueError("h2c is cleartext HTTP/2; use scheme http")
            resp = await asyncio.wait_for(_send_h2c(request, connect), timeout)
        elif _is_upgrade(request):
            resp = await asyncio.wait_for(
                _send_upgrade(request, connect, websocket_messages), timeout
            )
        else:
            resp = await _send_http1(request, connect, timeout)
    except (OSError, TimeoutError, aiohttp.ClientError, h2.exceptions.ProtocolError) as exc:
        resp = LiveResponse(request, 0, protocol=protocol, error=f"{type(exc).__name__}: {exc}")
    return replace(resp, elapsed=loop.time() - started)


async def _send_http1(request: Request, connect: tuple[str, int], timeout: float) -> LiveResponse:
    path, _, query = request.path.partition("?")
    url = URL.build(
        scheme=request.scheme,
        host=f"[{connect[0]}]" if ":" in connect[0] else connect[0],  # encoded: as written
        port=connect[1],
        path=path,
        query_string=query,
        encoded=True,
    )
    headers = [("Host", request.host), *_header_pairs(request)]
    is_tls = request.scheme == "https"
    sni = (request.sni or request.hostname) if is_tls else None
    connector = aiohttp.TCPConnector(
        force_close=True, ssl=_insecure_tls(request) if is_tls else False
    )
    async with (
        aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            skip_auto_headers=_SKIP_AUTO,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as session,
        session.request(
            request.method,
            url,
            headers=CIMultiDict(headers),
            allow_redirects=False,
            server_hostname=sni or None,
        ) as resp,
    ):
        body = await resp.read()
        pairs = tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in resp.raw_headers)
        return LiveResponse(
            request,
            resp.status,
            pairs,
            _echo_of(body, resp.headers.get("content-type", "")),
            body,
        )


# --- HTTP/2 with prior knowledge ------------------------------------------------------------


def _text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


async def _send_h2c(request: Request, connect: tuple[str, int]) -> LiveResponse:
    reader, writer = await asyncio.open_connection(*connect)
    try:
        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        conn.initiate_connection()
        headers = [
            (":method", request.method),
            (":scheme", "http"),
            (":authority", request.host),
            (":path", request.path),
            *((k.lower(), v) for k, v in _header_pairs(request)),
        ]
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, headers, end_stream=True)
        writer.write(conn.data_to_send())
        status, pairs, body = 0, [], bytearray()
        done = False
        while not done:
            data = await reader.read(65536)
            if not data:
                raise ConnectionError("connection closed before the HTTP/2 response ended")
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    for raw_name, raw_value in event.headers or []:
                        name, value = _text(raw_name), _text(raw_value)
                        if name == ":status":
                            status = int(value)
                        else:
                            pairs.append((name, value))
                elif isinstance(event, h2.events.DataReceived):
                    body += event.data or b""
                    conn.acknowledge_received_data(event.flow_controlled_length, stream)
                elif isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                    done = True
            writer.write(conn.data_to_send())
        content_type = next((v for k, v in pairs if k == "content-type"), "")
        return LiveResponse(
            request,
            status,
            tuple(pairs),
            _echo_of(bytes(body), content_type),
            bytes(body),
            protocol="h2c",
        )
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


# --- WebSocket upgrade ----------------------------------------------------------------------


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, list[tuple[str, str]]]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    pairs = []
    for line in lines[1:]:
        if ":" in line:
            name, _, value = line.partition(":")
            pairs.append((name.strip(), value.strip()))
    return status, pairs


def _frame(text: str) -> bytes:
    """A masked final text frame, as RFC 6455 5.3 requires from clients."""
    payload = text.encode()
    mask = os.urandom(4)
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", 0x81, 0x80 | size)
    elif size < 65536:
        head = struct.pack("!BBH", 0x81, 0x80 | 126, size)
    else:
        head = struct.pack("!BBQ", 0x81, 0x80 | 127, size)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def _read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    first, second = await reader.readexactly(2)
    size = second & 0x7F
    if size == 126:
        size = struct.unpack("!H", await reader.readexactly(2))[0]
    elif size == 127:
        size = struct.unpack("!Q", await reader.readexactly(8))[0]
    mask = await reader.readexactly(4) if second & 0x80 else b""
    data = await reader.readexactly(size)
    if mask:
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
    return first & 0x0F, data


async def _send_upgrade(
    request: Request, connect: tuple[str, int], messages: Sequence[str]
) -> LiveResponse:
    tls = _insecure_tls(request) if request.scheme == "https" else None
    sni = (request.sni or request.hostname) if tls else None
    reader, writer = await asyncio.open_connection(*connect, ssl=tls, server_hostname=sni)
    try:
        lines = [f"{request.method} {request.path} HTTP/1.1", f"Host: {request.host}"]
        lines += [f"{k}: {v}" for k, v in _header_pairs(request)]
        # Header values go as UTF-8, as aiohttp sends them and the models read them.
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("utf-8"))
        status, pairs = await _read_head(reader)
        if status != 101:
            length = next((int(v) for k, v in pairs if k.lower() == "content-length"), 0)
            body = await reader.readexactly(length) if length else b""
            ctype = next((v for k, v in pairs if k.lower() == "content-type"), "")
            return LiveResponse(request, status, tuple(pairs), _echo_of(body, ctype), body)
        echoes: list[str] = []
        for text in messages:
            writer.write(_frame(text))
            opcode, data = await _read_frame(reader)
            while opcode == 0x9:  # ping: answer and keep waiting for the echo
                writer.write(struct.pack("!BB", 0x8A, 0x80) + os.urandom(4))
                opcode, data = await _read_frame(reader)
            if opcode == 0x8:
                break
            echoes.append(data.decode("utf-8", "replace"))
        writer.write(struct.pack("!BB", 0x88, 0x80) + os.urandom(4))  # close
        return LiveResponse(request, status, tuple(pairs), websocket_echoes=tuple(echoes))
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()
