"""A pod's port on 127.0.0.1, through the API server's port-forward over a WebSocket.

``live --kubeconfig --mesh`` drives in-cluster echo clients as the upstream mesh suite's
framework does (Istio's ``echo/kube`` workloads): a port-forward to the pod's echo
control port, and gRPC (``ForwardEcho``) over it. ``PortForward`` listens on an
ephemeral port of 127.0.0.1 and relays each connection made there to the pod:

- **The protocol** (the kubelet's WebSocket port-forward, subprotocol
  ``v4.channel.k8s.io``): ``GET /api/v1/namespaces/NS/pods/POD/portforward?ports=P``
  upgraded to a WebSocket, with the kubeconfig's credentials and TLS (``Endpoint``).
  Every binary message starts with a channel byte: 0 carries the port's bytes, 1 the
  kubelet's words on why forwarding failed; the server opens each channel with the
  port, two bytes little-endian, which must be the one asked for. The protocol has no
  multiplexing: one WebSocket per TCP connection, as every WebSocket client does.
- **Bounded**, as every call to the API server is (``kubeapi``): the upgrade within
  ``timeout`` seconds (``--cluster-timeout``), at most ``budget`` bytes from the server
  per connection (``--max-input-bytes``), messages of at most ``MAX_MESSAGE`` bytes,
  the error channel's words clipped. A server that stalls mid-stream holds up nothing:
  each gRPC call has its own deadline, and ``close`` ends every relay.
- **Refusals said**: an upgrade the server refuses is ``PortForwardRefused`` with its
  status (403: the role lacks ``create`` on ``pods/portforward``), and the error
  channel's words are kept (``errors``) so a failed call can say why.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from http import HTTPStatus
from urllib.parse import quote

import aiohttp

from verifier.children import printable
from verifier.errors import clip
from verifier.gatewayapi.kubeapi import connect_error
from verifier.gatewayapi.kubeconfig import Endpoint

PROTOCOL = "v4.channel.k8s.io"
DATA, ERROR = 0, 1  # the channels of the one port forwarded
MAX_MESSAGE = 1 << 20
ERROR_WORDS = 4096  # what is kept of the error channel
CHUNK = 64 * 1024


def _handshake(exc: aiohttp.WSServerHandshakeError) -> str:
    """The refusal as the server said it (``403 Forbidden``), not aiohttp's words for
    it ("Invalid response status"); a 101 aiohttp would not take, with its reason."""
    if exc.status != HTTPStatus.SWITCHING_PROTOCOLS:
        try:
            phrase = HTTPStatus(exc.status).phrase
        except ValueError:
            phrase = ""
        return f"{exc.status} {phrase}".strip()
    reason = printable(clip(exc.message or "")).lower()
    return f"101 Switching Protocols, but not a WebSocket upgrade ({reason})"


class PortForwardRefused(Exception):
    """The API server did not upgrade the port-forward: its status (0: no answer) and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class PortForward:
    """127.0.0.1:``port`` relayed to ``pod``:``target`` (module docstring), from
    ``start`` until ``close``."""

    def __init__(
        self,
        endpoint: Endpoint,
        namespace: str,
        pod: str,
        target: int,
        *,
        timeout: float,
        budget: int,
    ) -> None:
        self.endpoint = endpoint
        self.namespace = namespace
        self.pod = pod
        self.target = target
        self.timeout = timeout
        self.budget = budget
        self.port = 0
        self.errors: list[str] = []  # the kubelet's words, and what broke the protocol
        self._server: asyncio.Server | None = None
        self._session: aiohttp.ClientSession | None = None
        self._relays: set[asyncio.Task[None]] = set()

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.pod}:{self.target}"

    async def start(self) -> PortForward:
        self._session = aiohttp.ClientSession(
            cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False
        )
        self._server = await asyncio.start_server(self._accepted, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        relays, self._relays = list(self._relays), set()
        for task in relays:
            task.cancel()
        await asyncio.gather(*relays, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

    def said(self) -> str:
        """What went wrong on the forward so far, for a failed call's message."""
        return "; ".join(dict.fromkeys(self.errors))

    # --- one connection ------------------------------------------------------------------------

    async def open(self) -> aiohttp.ClientWebSocketResponse:
        """The upgraded WebSocket, within ``timeout``; ``PortForwardRefused`` otherwise."""
        assert self._session is not None
        path = (
            f"/api/v1/namespaces/{quote(self.namespace)}/pods/{quote(self.pod)}/portforward"
            f"?ports={self.target}"
        )
        headers = {"Accept-Encoding": "identity"}
        if self.endpoint.authorization is not None:
            headers["Authorization"] = self.endpoint.authorization
        try:
            async with asyncio.timeout(self.timeout):
                ws = await self._session.ws_connect(
                    self.endpoint.server + path,
                    protocols=(PROTOCOL,),
                    headers=headers,
                    ssl=self.endpoint.tls if self.endpoint.tls is not None else True,
                    server_hostname=self.endpoint.server_name,
                    proxy=self.endpoint.proxy,
                    max_msg_size=MAX_MESSAGE,
                    # A close the server never answers waits no longer than a request.
                    timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=self.timeout),
                    autoclose=True,
                    autoping=True,
                )
        except aiohttp.WSServerHandshakeError as exc:
            raise PortForwardRefused(exc.status, _handshake(exc)) from None
        except TimeoutError:
            why = f"no WebSocket upgrade within {self.timeout:g}s (--cluster-timeout)"
            raise PortForwardRefused(0, why) from None
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise PortForwardRefused(0, connect_error(exc)) from None
        if ws.protocol != PROTOCOL:
            await ws.close()
            chosen = printable(clip(ws.protocol or "none"))
            raise PortForwardRefused(0, f"the server chose subprotocol {chosen}, not {PROTOCOL}")
        return ws

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._relays.add(task)
        try:
            ws = await self.open()
        except PortForwardRefused as exc:
            self.errors.append(f"port-forward to {self.where} refused: {exc.message}")
            writer.close()
            return
        try:
            await _relay(self, ws, reader, writer)
        except asyncio.CancelledError:
            pass  # ``close`` ends it: the relay's end, not an error of its own
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await ws.close()
            self._relays.discard(task)


async def _relay(
    pf: PortForward,
    ws: aiohttp.ClientWebSocketResponse,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    """Both directions until either ends; then the other is stopped."""
    down = asyncio.create_task(_down(pf, ws, writer))
    up = asyncio.create_task(_up(ws, reader))
    try:
        await asyncio.wait({down, up}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (down, up):
            task.cancel()
        await asyncio.gather(down, up, return_exceptions=True)


async def _up(ws: aiohttp.ClientWebSocketResponse, reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(CHUNK):
            await ws.send_bytes(bytes([DATA]) + data)


async def _down(
    pf: PortForward, ws: aiohttp.ClientWebSocketResponse, writer: asyncio.StreamWriter
) -> None:
    """The server's messages: the port headers checked, data to the local connection,
    error words kept; anything else ends the connection and is said."""
    header = {DATA: b"", ERROR: b""}
    words = b""
    received = 0
    try:
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.BINARY:
                pf.errors.append(f"port-forward to {pf.where}: a {msg.type.name} message")
                return
            data: bytes = msg.data
            received += len(data)
            if received > pf.budget:
                pf.errors.append(f"port-forward to {pf.where}: more than {pf.budget:,} bytes")
                return
            if not data:
                continue
            channel, payload = data[0], data[1:]
            if channel not in header:
                pf.errors.append(f"port-forward to {pf.where}: channel {channel} (one port asked)")
                return
            if len(header[channel]) < 2:
                take = 2 - len(header[channel])
                header[channel] += payload[:take]
                payload = payload[take:]
                if len(header[channel]) == 2:
                    (port,) = struct.unpack("<H", header[channel])
                    if port != pf.target:
                        why = f"channel {channel} opened for port {port}, not {pf.target}"
                        pf.errors.append(f"port-forward to {pf.where}: {why}")
                        return
            if channel == DATA and payload:
                writer.write(payload)
                await writer.drain()
            elif channel == ERROR and payload:
                words = (words + payload)[:ERROR_WORDS]
    except ConnectionError:
        pass
    finally:
        if words.strip():
            said = printable(clip(words.decode("utf-8", "replace").strip()))
            pf.errors.append(f"port-forward to {pf.where}: {said}")
