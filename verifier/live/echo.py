"""Echo backends that behave like the Gateway API conformance ``echo-basic`` pods.

The fixtures' cases were written against echo-basic (fixtures/README.md), so
the live oracle must answer the same way: 200 with a JSON description of the
request as received (``path`` is the RequestURI including the query, ``host``,
``method``, ``proto``, ``headers`` as Go's canonicalised ``{Name: [values]}``
without Host, ``namespace``, ``service``, ``pod``), ``?delay=<Go duration>``
before answering, ``/status/NNN`` answered with status NNN and ``/health``
with 200 ``OK`` (neither logged, as echo-basic logs only echoes),
``X-Echo-Set-Header: Name:value,...`` copied onto the response, a WebSocket
echo on ``/ws`` (golang.org/x/net/websocket: 403 without ``Origin``), and
h2c-only ports that answer anything but HTTP/2 with 400. One extra body
field, ``servicePort``, names the Service port the request arrived on, so a
Service with two ports is still identified exactly (echo-basic cannot know it).

Every request is also kept in ``EchoBackend.records`` (echo-basic logs
``Echoing back request made to <path> to client``); mirrors are detected there.

Mesh backends are the same servers wrapped in mutual TLS with the workload's
SPIFFE certificate (``pki.Pki``), standing in for the pod's mesh proxy on 15008.

An echo given a ``control`` port also serves Istio's echo control service there
(``verifier.live.echo_control``): ``ForwardEcho`` makes it the in-mesh client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpclib.server
import h2.config
import h2.connection
import h2.events
import h2.exceptions
from aiohttp import WSMsgType, web

from verifier.live.echo_control import EchoControl, serve
from verifier.live.echo_model import echo_status, go_canonical, parse_go_duration
from verifier.live.forward import SocketFactory

log = logging.getLogger(__name__)

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
ECHO_SET_HEADER = "X-Echo-Set-Header"


def pod_name(service: str) -> str:
    """``<deployment>-<replicaset hash>-<pod hash>``; the deployment is named after the Service."""
    return f"{service}-{secrets.token_hex(5)}-{secrets.token_hex(3)[:5]}"


@dataclass(frozen=True)
class EchoRecord:
    """One request as this backend received it (echo-basic's log line, with details)."""

    at: float
    service_port: int
    method: str
    path: str
    host: str
    proto: str
    headers: dict[str, list[str]]

    def header(self, name: str) -> list[str]:
        return self.headers.get(go_canonical(name), [])


@dataclass(frozen=True)
class EchoPort:
    """One Service port this backend answers: cleartext HTTP/1.1, h2c, or either inside TLS."""

    port: int
    h2c: bool = False
    tls: ssl.SSLContext | None = field(default=None, compare=False)


def _set_headers(values: Sequence[str]) -> list[tuple[str, str]]:
    """echo-basic's X-Echo-Set-Header: comma-separated ``Name:value``; repeats are joined."""
    out: dict[str, str] = {}
    for header in values:
        for item in header.split(","):
            name, _, value = item.strip().partition(":")
            if not name:
                continue
            out[name] = f"{out[name]},{value.strip()}" if name in out else value.strip()
    return list(out.items())


def special_answer(path: str, request_uri: str) -> tuple[int, str] | None:
    """echo-basic's non-echo handlers: ``/health`` and ``/status/NNN``, or None.

    Clients (and the conformance suite) probe with them, so a backend that
    echoed instead would answer 200 where a real echo-basic pod answers the
    asked-for status. Like echo-basic, ``/status/`` matches the RequestURI
    (query included) against ``^/status/(\\d\\d\\d)$`` and answers 400 otherwise.
    """
    status = echo_status(path, request_uri)
    if status is None:
        return None
    return status, "OK" if path == "/health" else ""


def bind_listener(ip: str, port: int, reuse_port: bool = False) -> socket.socket:
    """A listening TCP socket. Without ``reuse_port`` a taken address fails here, not
    silently; with it (only inside a run's own network namespace, where nobody else
    listens) a pod address may share its port with Envoy's wildcard listener, as a
    pod and the edge do in a cluster: the kernel gives the exact address the echo."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((ip, port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class EchoBackend:
    """The pod(s) behind one Service, listening on ``ip`` on each of the Service's ports.

    ``bound`` maps each requested port to the one actually bound: the same,
    except that a port below 1024 falls back to a free one when we may not bind
    it (unprivileged runs); the harness then rewrites that cluster's port.
    ``also`` are more addresses answering the same ports (a Service's pod IPs in a
    run's own network namespace: one echo stands in for every pod of the Service).
    ``control``, if given, is the port (0: any) of Istio's echo control service
    (``EchoTestService``: ``Echo`` and ``ForwardEcho``, ``verifier.live.echo_control``)
    on ``ip``; ``control_port`` is the port bound. Forwarded requests leave from ``ip``.
    ``listen`` makes each listening socket (``bind_listener``; a pod of its own
    binds in its network namespace: ``verifier.live.podnet.Pod.listen``), and
    ``sockets`` the sockets its forwarded requests connect on (``Pod.socket``), and
    ``nameserver`` the cluster DNS server their names are resolved through.
    """

    def __init__(
        self,
        namespace: str,
        service: str,
        ip: str,
        ports: Sequence[EchoPort],
        pod: str | None = None,
        *,
        also: Sequence[str] = (),
        reuse_port: bool = False,
        control: int | None = None,
        listen: Callable[[str, int, bool], socket.socket] = bind_listener,
        sockets: SocketFactory | None = None,
        nameserver: tuple[str, int] | None = None,
    ) -> None:
        self.sockets = sockets
        self.nameserver = nameserver
        self.namespace = namespace
        self.service = service
        self.ip = ip
        self.also = tuple(also)
        self.reuse_port = reuse_port
        self.listen = listen
        self.ports = list(ports)
        self.pod = pod or pod_name(service)
        self.records: list[EchoRecord] = []
        self.bound: dict[int, int] = {}
        self._by_actual: dict[int, int] = {}
        self.control = control
        self.control_port: int | None = None
        self._control: grpclib.server.Server | None = None
        self._runner: web.AppRunner | None = None
        self._servers: list[asyncio.AbstractServer] = []

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> EchoBackend:
        """Bind every port; raises OSError (EADDRINUSE) so the caller can pick another IP."""
        sockets: list[tuple[EchoPort, socket.socket]] = []
        try:
            for spec in self.ports:
                try:
                    sock = self.listen(self.ip, spec.port, self.reuse_port)
                except PermissionError:
                    sock = self.listen(self.ip, 0, False)
                actual = int(sock.getsockname()[1])
                self.bound[spec.port], self._by_actual[actual] = actual, spec.port
                sockets.append((spec, sock))
                for ip in self.also:  # the same port: these addresses are dialled as written
                    sockets.append((spec, self.listen(ip, actual, self.reuse_port)))
            control = None if self.control is None else self.listen(self.ip, self.control, False)
        except OSError:
            for _, sock in sockets:
                sock.close()
            raise
        http1 = [(s, k) for s, k in sockets if not s.h2c]
        if http1:
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self._handle)
            self._runner = web.AppRunner(
                app, access_log=None, handle_signals=False, shutdown_timeout=0.2
            )
            await self._runner.setup()
            for spec, sock in http1:
                await web.SockSite(self._runner, sock, ssl_context=spec.tls).start()
        loop = asyncio.get_running_loop()
        for spec, sock in sockets:
            if spec.h2c:
                port = self._by_actual[int(sock.getsockname()[1])]
                server = await loop.create_server(
                    lambda port=port: _H2cProtocol(self, port), sock=sock, ssl=spec.tls
                )
                self._servers.append(server)
        if control is not None:
            service = EchoControl(self.namespace, self.pod, self.ip, self.sockets, self.nameserver)
            self._control = await serve(service, control)
            self.control_port = service.port
        return self

    async def stop(self) -> None:
        if self._control is not None:
            self._control.close()
            await self._control.wait_closed()
            self._control = None
        for server in self._servers:
            server.close()
        self._servers.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> EchoBackend:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- the echo -----------------------------------------------------------------------------

    def record(
        self,
        service_port: int,
        method: str,
        path: str,
        host: str,
        proto: str,
        pairs: Sequence[tuple[str, str]],
    ) -> EchoRecord:
        headers: dict[str, list[str]] = {}
        for name, value in pairs:
            headers.setdefault(go_canonical(name), []).append(value)
        rec = EchoRecord(time.monotonic(), service_port, method, path, host, proto, headers)
        self.records.append(rec)
        log.debug("%s: Echoing back request made to %s to client", self.pod, path)
        return rec

    def body(self, rec: EchoRecord) -> bytes:
        doc: dict[str, Any] = {
            "path": rec.path,
            "host": rec.host,
            "method": rec.method,
            "proto": rec.proto,
            "headers": rec.headers,
            "namespace": self.namespace,
            "ingress": "",
            "service": self.service,
            "pod": self.pod,
            "servicePort": rec.service_port,
        }
        return json.dumps(doc).encode()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        port = self._by_actual.get(int(sockname[1]) if sockname else 0, 0)
        plain = special_answer(request.path, request.raw_path)
        if plain is not None:
            status, text = plain
            return web.Response(status=status, text=text)
        pairs = [(k, v) for k, v in request.headers.items() if k.lower() != "host"]
        version = f"HTTP/{request.version.major}.{request.version.minor}"
        rec = self.record(port, request.method, request.raw_path, request.host, version, pairs)
        if request.path == "/ws":
            return await self._websocket(request)
        delay = parse_go_duration(request.query.get("delay", "0"))
        if delay:
            await asyncio.sleep(delay)
        response = web.Response(body=self.body(rec), content_type="application/json")
        for name, value in _set_headers(request.headers.getall(ECHO_SET_HEADER, [])):
            response.headers[name] = value
        return response

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        """golang.org/x/net/websocket's Handler: 403 without Origin, 400 if not a handshake."""
        if "Origin" not in request.headers:
            return web.Response(status=403)
        ws = web.WebSocketResponse(autoping=True)
        if not ws.can_prepare(request).ok:
            return web.Response(status=400, text="Bad Request")
        await ws.prepare(request)
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                await ws.send_str(msg.data)
            elif msg.type == WSMsgType.BINARY:
                await ws.send_bytes(msg.data)
        return ws


class _H2cProtocol(asyncio.Protocol):
    """echo-basic's h2c port (prior knowledge only, as the conformance test uses it).

    Go's h2c handler hands anything that is not HTTP/2 to echo-basic, which
    answers ``400 Expected h2c request``; we do the same for an HTTP/1.x
    request, so an upstream that ignored appProtocol fails as it would in a
    cluster.
    """

    def __init__(self, backend: EchoBackend, service_port: int) -> None:
        self.backend = backend
        self.service_port = service_port
        self.transport: asyncio.Transport | None = None
        self.conn: h2.connection.H2Connection | None = None
        self.buffer = b""
        self.requests: dict[int, list[tuple[str, str]]] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        for task in self.tasks:
            task.cancel()

    def data_received(self, data: bytes) -> None:
        if self.conn is None:
            self.buffer += data
            if len(self.buffer) < len(H2_PREFACE) and H2_PREFACE.startswith(self.buffer):
                return
            if not self.buffer.startswith(H2_PREFACE):
                self._reject_http1()
                return
            self.conn = h2.connection.H2Connection(
                h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
            )
            self.conn.initiate_connection()
            data, self.buffer = self.buffer, b""
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            self._flush()
            self._close()
            return
        for event in events:
            self._event(event)
        self._flush()

    def _event(self, event: h2.events.Event) -> None:
        assert self.conn is not None
        if isinstance(event, h2.events.RequestReceived):
            # A StreamEnded event follows in the same batch when the request has no body.
            self.requests[event.stream_id] = [(str(k), str(v)) for k, v in event.headers or []]
        elif isinstance(event, h2.events.DataReceived):
            self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            self._spawn(event.stream_id)
        elif isinstance(event, h2.events.StreamReset):
            self.requests.pop(event.stream_id, None)
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._close()

    def _spawn(self, stream_id: int) -> None:
        task = asyncio.get_running_loop().create_task(self._respond(stream_id))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _respond(self, stream_id: int) -> None:
        headers = self.requests.pop(stream_id, None)
        if headers is None or self.conn is None:
            return
        pseudo = {k: v for k, v in headers if k.startswith(":")}
        plain = [(k, v) for k, v in headers if not k.startswith(":") and k != "host"]
        host = pseudo.get(":authority") or next((v for k, v in headers if k == "host"), "")
        path = pseudo.get(":path", "/")
        plain_answer = special_answer(path.partition("?")[0], path)
        if plain_answer is not None:
            self._answer_plain(stream_id, *plain_answer)
            return
        rec = self.backend.record(
            self.service_port, pseudo.get(":method", "GET"), path, host, "HTTP/2.0", plain
        )
        query = path.partition("?")[2]
        delays = [v for k, _, v in (p.partition("=") for p in query.split("&")) if k == "delay"]
        delay = parse_go_duration(delays[0]) if delays else 0.0
        if delay:
            await asyncio.sleep(delay)
        body = self.backend.body(rec)
        extra = _set_headers([v for k, v in plain if k.lower() == ECHO_SET_HEADER.lower()])
        response = [
            (":status", "200"),
            ("content-type", "application/json"),
            ("content-length", str(len(body))),
            *((k.lower(), v) for k, v in extra),
        ]
        try:
            self.conn.send_headers(stream_id, response)
            self.conn.send_data(stream_id, body, end_stream=True)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            return  # the proxy gave up (timeout) and reset the stream
        self._flush()

    def _answer_plain(self, stream_id: int, status: int, text: str) -> None:
        if self.conn is None:
            return
        body = text.encode()
        head = [(":status", str(status)), ("content-length", str(len(body)))]
        try:
            self.conn.send_headers(stream_id, head, end_stream=not body)
            if body:
                self.conn.send_data(stream_id, body, end_stream=True)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            return
        self._flush()

    def _reject_http1(self) -> None:
        if b"\r\n\r\n" not in self.buffer and len(self.buffer) < 65536:
            return  # wait for the whole request head
        body = b"Expected h2c request"
        head = (
            "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        if self.transport is not None:
            self.transport.write(head.encode() + body)
        self._close()

    def _flush(self) -> None:
        if self.conn is not None and self.transport is not None and not self.transport.is_closing():
            data = self.conn.data_to_send()
            if data:
                self.transport.write(data)

    def _close(self) -> None:
        if self.transport is not None:
            with contextlib.suppress(Exception):
                self.transport.close()
