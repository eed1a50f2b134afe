"""A hostile ADS server over raw HTTP/2 (``h2``), following a plan (tests/hostile_ads.py).

It answers each request the client sends with the plan's next response (or
honestly), ends the stream as the plan says or stalls, may trickle every byte, and
keeps a ``Record`` of what it sent and what the client answered. It is driven by
the test process's own event loop while the tool runs in a forked child
(tests/hostile_peers.py).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import deque
from typing import Any

import h2.config
import h2.connection
import h2.events
from envoy_data_plane.envoy.config.cluster.v3 import Cluster
from envoy_data_plane.envoy.config.route.v3 import RouteConfiguration
from envoy_data_plane.envoy.service.discovery.v3 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
    Resource,
)
from envoy_data_plane.google.protobuf import Any as AnyMessage
from hostile_ads import (
    HONEST,
    TYPES,
    AdsPlan,
    Record,
    Resp,
    Served,
    rds_listener,
)

from verifier.xds.codec import pack_any
from verifier.xds.layout import CLUSTER_TYPE, LISTENER_TYPE, ROUTE_TYPE

_PREFIX = 5
FLOOD = 3000  # route responses after the listener, each a new version


@functools.lru_cache(maxsize=8)
def _flood(names: int, delta: bool) -> tuple[list[tuple[str, str]], bytes]:
    """A listener naming ``names`` route configurations, then ``FLOOD`` versions of
    them, framed: made once per size, since the serving loop must not stall on it
    (nonces "f0", "f1"...)."""
    messages = [(LISTENER_TYPE, "flooded", pack_any(rds_listener(names)), "1")]
    for version in range(FLOOD):
        route = RouteConfiguration(name=f"r{version % names}")
        messages.append((ROUTE_TYPE, route.name, pack_any(route), str(version)))
    nonces, frames = [], []
    for i, (url, name, packed, version) in enumerate(messages):
        nonce = f"f{i}"
        nonces.append((nonce, url))
        frames.append(_frame(bytes(_response(delta, url, nonce, version, [(name, packed)]))))
    return nonces, b"".join(frames)


def _response(
    delta: bool, url: str, nonce: str, version: str, items: list[tuple[str, AnyMessage]]
) -> Any:
    if delta:
        return DeltaDiscoveryResponse(
            system_version_info=version, type_url=url, nonce=nonce,
            resources=[Resource(name=n, version=version, resource=a) for n, a in items],
        )  # fmt: skip
    return DiscoveryResponse(
        version_info=version, type_url=url, nonce=nonce, resources=[a for _, a in items]
    )


def _frame(message: bytes, flag: int = 0, length: int | None = None) -> bytes:
    size = len(message) if length is None else length
    return bytes([flag]) + size.to_bytes(4, "big") + message


class HostileAds(asyncio.Protocol):
    """One connection of the hostile server: it follows ``plan`` and writes ``record``."""

    def __init__(self, plan: AdsPlan, served: Served, record: Record) -> None:
        self.plan, self.served, self.record = plan, served, record
        self.answers = deque(plan.answers)
        config = h2.config.H2Configuration(
            client_side=False, header_encoding=None, validate_outbound_headers=False,
            normalize_outbound_headers=False, validate_inbound_headers=False,
        )  # fmt: skip
        self.h2 = h2.connection.H2Connection(config=config)
        self.transport: asyncio.Transport | None = None
        self.stream_id: int | None = None
        self.inbox = bytearray()
        self.pending = bytearray()  # stream data waiting for the client's window
        self.nonces = 0
        self.last_names: dict[str, frozenset[str] | None] = {}
        self.done = False
        self.writes: deque[bytes] = deque()
        self.trickler: asyncio.Task[None] | None = None

    # --- writing, at once or trickled ---

    def write(self, data: bytes) -> None:
        if not data or self.transport is None or self.transport.is_closing():
            return
        if not self.plan.trickle:
            self.transport.write(data)
            return
        self.writes.append(data)
        if self.trickler is None:
            self.trickler = asyncio.get_running_loop().create_task(self._trickle())

    async def _trickle(self) -> None:
        while self.transport is not None and not self.transport.is_closing():
            if not self.writes:
                await asyncio.sleep(self.plan.trickle)
                continue
            data = self.writes.popleft()
            for at in range(0, len(data), self.plan.chunk):
                if self.transport.is_closing():
                    return
                self.transport.write(data[at : at + self.plan.chunk])
                await asyncio.sleep(self.plan.trickle)

    def flush(self) -> None:
        self.write(self.h2.data_to_send())

    # --- the loop's calls ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.record.connected = self.record.connected or time.monotonic()
        opening = self.plan.opening
        if opening == "garbage":
            self.write(self.plan.garbage)
        elif opening == "http1":
            self.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        elif opening == "close":
            transport.close()
        elif opening == "h2":
            self.h2.initiate_connection()
            self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.record.closed = time.monotonic()
        if self.trickler is not None:
            self.trickler.cancel()

    def data_received(self, data: bytes) -> None:
        if self.plan.opening != "h2" or self.done:
            return
        try:
            events = self.h2.receive_data(data)
        except Exception:  # the client hung up mid-frame, or we broke our own state
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                self.stream_id = event.stream_id
                self.respond_headers()
            elif isinstance(event, h2.events.DataReceived):
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                self.inbox += event.data
                self.requests()
            elif isinstance(event, h2.events.WindowUpdated):
                self.pump()
        self.flush()

    def respond_headers(self) -> None:
        assert self.stream_id is not None
        headers = [(":status", str(self.plan.http_status)), ("content-type", "application/grpc")]
        if self.plan.trailers_only:
            headers += self.status_headers()
            self.h2.send_headers(self.stream_id, headers, end_stream=True)
            self.done = True
            return
        self.h2.send_headers(self.stream_id, headers)

    def status_headers(self) -> list[tuple[str, str | bytes]]:
        out: list[tuple[str, str | bytes]] = []
        if self.plan.end_code:
            out.append(("grpc-status", self.plan.end_code.encode("utf-8", "replace")))
        out.append(("grpc-message", self.plan.end_message[:2000].encode("utf-8", "replace")))
        return out

    # --- requests and responses ---

    def requests(self) -> None:
        while len(self.inbox) >= _PREFIX and not self.done:
            length = int.from_bytes(self.inbox[1:_PREFIX], "big")
            if len(self.inbox) < _PREFIX + length:
                return
            raw = bytes(self.inbox[_PREFIX : _PREFIX + length])
            del self.inbox[: _PREFIX + length]
            self.on_request(raw)

    def on_request(self, raw: bytes) -> None:
        self.record.requests += 1
        kind = DeltaDiscoveryRequest if self.plan.delta else DiscoveryRequest
        try:
            req = kind.parse(raw)
        except Exception:
            return
        url = req.type_url
        nonce = req.response_nonce
        if nonce:
            if req.error_detail is not None and req.error_detail.message:
                self.record.nacked.append(req.error_detail.message)
            else:
                self.record.acked.append((url, nonce))
        if self.answers:
            self.answer(self.answers.popleft(), req)
        elif self.plan.after == "honest":
            self.answer(HONEST, req)
        else:
            self.end()

    def names(self, req: Any) -> frozenset[str] | None:
        if isinstance(req, DeltaDiscoveryRequest):
            subscribed = set(req.resource_names_subscribe) - {"*"}
            return (
                None
                if "*" in req.resource_names_subscribe or not subscribed
                else frozenset(subscribed)
            )
        names = set(req.resource_names) - {"*"}
        return (
            None
            if req.type_url in (CLUSTER_TYPE, LISTENER_TYPE) and not names
            else frozenset(names)
        )

    def answer(self, resp: Resp, req: Any) -> None:
        url = req.type_url
        if resp.kind != "honest":  # what it asked for is answered: its ACK needs no more
            self.last_names[url] = self.names(req)
        if resp.kind == "honest":
            names = self.names(req)
            changed = self.last_names.get(url, ()) != names
            if req.response_nonce and not changed:
                return  # an ACK or NACK of what was sent: a real server sends nothing
            self.last_names[url] = names
            found = self.served.honest(url, None if names is None else set(names))
            self.send(url, list(found.items()), "valid", version="1")
        elif resp.kind == "resources":
            to = {
                "right": url,
                "other": TYPES[(TYPES.index(url) + 1) % 5] if url in TYPES else CLUSTER_TYPE,
                "unknown": "type.googleapis.com/no.Such",
                "odd": f"type.googleapis.com/{resp.version}",
            }[resp.type_choice]
            made = [self.served.resource(to, r) for r in resp.resources]
            verdicts = {v for _, v in made}
            verdict = (
                "invalid"
                if "invalid" in verdicts
                else "unsure"
                if "unsure" in verdicts
                else "valid"
            )
            items = [(f"r{i}", packed) for i, (packed, _) in enumerate(made)]
            self.send(to, items, verdict, version=resp.version)
        elif resp.kind == "push":  # a new version of a type, whatever was asked
            self.send(
                resp.type_choice,
                list(self.served.honest(resp.type_choice, None).items()),
                "valid",
                version="2",
            )
        elif resp.kind == "raw":
            self.stream(_frame(resp.data))
        elif resp.kind == "huge-prefix":
            self.stream(_frame(resp.data, length=(4 << 30) - 1))
        elif resp.kind == "empties":  # one empty Any per two bytes: objects, not bytes
            self.stream(_frame(b"\x12\x00" * resp.count))
        elif resp.kind == "unknown-fields":  # fields no table has: once a quadratic parse
            self.stream(_frame(b"x" * (2 * resp.count)))
        elif resp.kind == "compressed":
            self.stream(_frame(resp.data, flag=1))
        elif resp.kind == "flood":
            nonces, data = _flood(resp.count, self.plan.delta)
            for nonce, url in nonces:
                self.record.sent[nonce] = (url, "valid")
            self.stream(data)
        elif resp.kind == "big":
            self.send(CLUSTER_TYPE, [("big", pack_any(Cluster(name="b" * resp.count)))], "valid")

    def send(
        self, url: str, items: list[tuple[str, AnyMessage]], verdict: str, version: str = "1"
    ) -> None:
        self.nonces += 1
        nonce = f"n{self.nonces}"
        self.record.sent[nonce] = (url, verdict)
        self.stream(_frame(bytes(_response(self.plan.delta, url, nonce, version, items))))

    def stream(self, data: bytes) -> None:
        self.pending += data
        self.pump()

    def pump(self) -> None:
        if self.stream_id is None or self.done:
            return
        while self.pending:
            try:
                window = self.h2.local_flow_control_window(self.stream_id)
            except Exception:
                return
            room = min(window, self.h2.max_outbound_frame_size, len(self.pending))
            if room <= 0:
                return
            self.h2.send_data(self.stream_id, bytes(self.pending[:room]))
            del self.pending[:room]
            self.flush()

    def end(self) -> None:
        """The plan's end, once the answers ran out."""
        if self.done or self.stream_id is None or self.transport is None:
            return
        after = self.plan.after
        if after == "stall":
            return
        self.done = True
        if after == "end":
            self.pending.clear()
            self.h2.send_headers(self.stream_id, self.status_headers(), end_stream=True)
        elif after == "reset":
            self.h2.reset_stream(self.stream_id, error_code=2)
        elif after == "goaway":
            self.h2.close_connection(
                error_code=11, additional_data=self.plan.end_message.encode()[:100]
            )
        self.flush()
        if after == "close":
            self.transport.close()
