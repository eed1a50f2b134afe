"""One gRPC stream over HTTP/2 (the ``h2`` protocol machine), bounded by a ``Budget``;
and the server's side of the same wire for ``serve`` (a byte budget per connection).

The ADS client talks to a control plane it does not control, so the wire is ours
rather than a gRPC library's: each byte the server sends is counted into the pull's
budget (``--max-input-bytes``) as it arrives; a gRPC length prefix that would pass
the budget is refused before a byte of its message is buffered (a 4 GiB prefix is
an error, not 4 GiB of memory); a response is handed over as bytes, for the caller
to parse and to call the server's if it does not; and every way a stream can end
(trailers with any status, a reset, GOAWAY, a connection that drops or speaks no
HTTP/2) is one ``StreamEnded`` whose message says which, with the server's own
words (``grpc-message``) escaped. Nothing here starts a task: the caller's loop
drives reads, and a send waits only for flow control.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from typing import Any, Final
from urllib.parse import unquote

import h2.config
import h2.connection
import h2.events
import h2.settings
from grpclib.encoding.base import CodecBase
from grpclib.server import Server

from verifier.peers import Budget, PeerLimit, printable

_SERVICE: Final = "/envoy.service.discovery.v3.AggregatedDiscoveryService"
SOTW_PATH: Final = f"{_SERVICE}/StreamAggregatedResources"
DELTA_PATH: Final = f"{_SERVICE}/DeltaAggregatedResources"
_PREFIX: Final = 5  # gRPC message framing: compressed flag, 4-byte big-endian length
# google.rpc.Code names, for the statuses a server ends a stream with.
_CODES: Final = (
    *("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND"),
    *("ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION"),
    *("ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS"),
    "UNAUTHENTICATED",
)


class StreamEnded(Exception):
    """The stream can give no more responses; the message says why, in words."""


def _status(headers: dict[str, str]) -> str:
    raw = headers.get("grpc-status")
    if raw is None:
        return "no gRPC status"
    code = int(raw) if raw.isdigit() and len(raw) < 4 else None
    name = _CODES[code] if code is not None and code < len(_CODES) else "not a gRPC code"
    message = headers.get("grpc-message")
    words = printable(unquote(message), 400) if message else "no message"
    return f"gRPC status {printable(raw, 20)} ({name}): {words}"


def _text(headers: object) -> dict[str, str]:
    """Header names and values as text, whatever bytes the server sent."""
    out = {}
    for name, value in headers:  # type: ignore[attr-defined]
        key = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
        out[key] = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return out


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {printable(exc, 300)}" if str(exc) else type(exc).__name__


class _Protocol(asyncio.Protocol):
    """One HTTP/2 connection carrying the one stream, fed by the event loop."""

    def __init__(self, budget: Budget, authority: str, path: str, scheme: str) -> None:
        self.budget = budget
        self.authority, self.path, self.scheme = authority, path, scheme
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self.h2 = h2.connection.H2Connection(config=config)
        self.transport: asyncio.Transport | None = None
        self.stream_id = 0
        self.buffer = bytearray()
        self.messages: deque[bytes] = deque()
        self.ended: BaseException | None = None
        self.changed = asyncio.Event()  # a message, the end, or room to send
        self.headers: dict[str, str] = {}

    # --- the loop's calls ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None and ssl_object.selected_alpn_protocol() != "h2":
            self._end(StreamEnded("the server does not speak HTTP/2 over TLS (ALPN h2)"))
            return
        self.h2.initiate_connection()
        self.h2.update_settings({h2.settings.SettingCodes.ENABLE_PUSH: 0})
        self.stream_id = self.h2.get_next_available_stream_id()
        self.h2.send_headers(
            self.stream_id,
            [
                (":method", "POST"),
                (":scheme", self.scheme),
                (":path", self.path),
                (":authority", self.authority),
                ("content-type", "application/grpc+proto"),
                ("te", "trailers"),
                ("user-agent", "edge-verify"),
            ],
        )
        self._flush()

    def data_received(self, data: bytes) -> None:
        if self.ended is not None:
            return
        try:
            self.budget.take(len(data))
            events = self.h2.receive_data(data)
            for event in events:
                self._on(event)
            self._flush()
        except PeerLimit as exc:
            self._end(exc)
        except Exception as exc:  # h2's protocol errors, and whatever else bad frames raise
            self._end(StreamEnded(f"the server broke the HTTP/2 protocol: {_said(exc)}"))

    def connection_lost(self, exc: Exception | None) -> None:
        why = f": {printable(exc)}" if exc is not None else ""
        self._end(StreamEnded(f"the server closed the connection{why}"))

    # --- HTTP/2 events ------------------------------------------------------------------

    def _on(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.ResponseReceived):
            self.headers = _text(event.headers)
            status = self.headers.get(":status")
            if status != "200":
                self._end(StreamEnded(f"the server answered HTTP {printable(status, 20)}"))
            elif "grpc-status" in self.headers:  # trailers-only: no response will follow
                self._end(StreamEnded(f"the server ended the stream with {_status(self.headers)}"))
        elif isinstance(event, h2.events.DataReceived):
            if event.stream_id == self.stream_id and event.data:
                self.buffer += event.data
                self._frames()
            self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.TrailersReceived):
            trailers = _text(event.headers)
            self._end(StreamEnded(f"the server ended the stream with {_status(trailers)}"))
        elif isinstance(event, h2.events.StreamEnded):
            self._end(StreamEnded("the server ended the stream with no gRPC status"))
        elif isinstance(event, h2.events.StreamReset):
            self._end(StreamEnded(f"the server reset the stream (HTTP/2 error {event.error_code})"))
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._end(
                StreamEnded(f"the server closed the connection (GOAWAY, error {event.error_code})")
            )
        if isinstance(event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged):
            self.changed.set()

    def _frames(self) -> None:
        """Whole gRPC messages out of the buffer; a length past the budget is refused
        as soon as its prefix is read."""
        while len(self.buffer) >= _PREFIX:
            if self.buffer[0] != 0:
                self._end(StreamEnded("the server sent a compressed message, never offered"))
                return
            length = int.from_bytes(self.buffer[1:_PREFIX], "big")
            self.budget.announce(length, "a gRPC message", already=len(self.buffer) - _PREFIX)
            if len(self.buffer) < _PREFIX + length:
                return
            self.messages.append(bytes(self.buffer[_PREFIX : _PREFIX + length]))
            del self.buffer[: _PREFIX + length]
            self.changed.set()

    def _end(self, why: BaseException) -> None:
        if self.ended is None:
            self.ended = why
        self.changed.set()
        if self.transport is not None:
            self.transport.abort()

    def _flush(self) -> None:
        data = self.h2.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    # --- the caller's side --------------------------------------------------------------

    async def send(self, message: bytes) -> None:
        """Send one gRPC message, waiting for the server's flow-control window."""
        data = memoryview(len(message).to_bytes(_PREFIX, "big") + message)
        while data:
            if self.ended is not None:
                raise self.ended
            room = min(
                self.h2.local_flow_control_window(self.stream_id),
                self.h2.max_outbound_frame_size,
                len(data),
            )
            if room <= 0:
                self.changed.clear()
                await self.changed.wait()
                continue
            self.h2.send_data(self.stream_id, bytes(data[:room]))
            self._flush()
            data = data[room:]

    async def receive(self) -> bytes:
        """The next response, or the end's exception."""
        while not self.messages:
            if self.ended is not None:
                raise self.ended
            self.changed.clear()
            await self.changed.wait()
        return self.messages.popleft()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()


async def open_stream(
    host: str, port: int, path: str, budget: Budget, context: ssl.SSLContext | None
) -> _Protocol:
    """Connect and start the gRPC call ``path``; the caller closes what it gets."""
    loop = asyncio.get_running_loop()
    scheme = "https" if context is not None else "http"
    _, protocol = await loop.create_connection(
        lambda: _Protocol(budget, f"{host}:{port}", path, scheme),
        host,
        port,
        ssl=context,
        server_hostname=host if context is not None else None,
    )
    return protocol


# --- the server's side ------------------------------------------------------------------


class Raw(CodecBase):
    """The server's codec: requests as bytes, parsed off the loop by
    ``verifier.xds.ads.AdsServer``; responses are the messages' own bytes."""

    __content_subtype__ = "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        return bytes(message)

    def decode(self, data: bytes, message_type: Any) -> bytes:
        return data


class CountedServer(Server):
    """grpclib's server with each connection held to a byte budget: a client is any
    program that connects, and one that sends more than ``max_bytes`` in all (an
    Envoy's requests are a few hundred bytes each; a hostile client's 4 GiB length
    prefix is followed by whatever it likes) is cut off, not buffered, so it never
    takes the memory every other client is served from (``--max-input-bytes``)."""

    def __init__(self, handlers: list[Any], max_bytes: int) -> None:
        super().__init__(handlers, codec=Raw())
        self.max_bytes = max_bytes

    def _protocol_factory(self) -> Any:  # grpclib's hook for each connection
        protocol = super()._protocol_factory()
        made, received = protocol.connection_made, protocol.data_received
        held: list[Any] = []
        count = [0]

        def connection_made(transport: Any) -> None:
            held.append(transport)
            made(transport)

        def data_received(data: bytes) -> None:
            count[0] += len(data)
            if count[0] > self.max_bytes:
                held[0].abort()
                return
            received(data)

        protocol.connection_made = connection_made  # type: ignore[method-assign]
        protocol.data_received = data_received  # type: ignore[method-assign]
        return protocol
