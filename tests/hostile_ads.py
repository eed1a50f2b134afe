"""A hostile ADS server over raw HTTP/2 (``h2``), its misbehaviour drawn by Hypothesis.

A real control plane is a gRPC server; this one only looks like one for as long as
its plan says. It answers each request the client sends with the plan's next
response (or honestly, from a valid snapshot), and each response may lie: garbage
or truncated resources, the wrong type URL or an unknown one, an HTTP connection
manager whose bytes crash a decoder, a private key in cluster metadata, a peer's
text with ANSI escapes and a forged line, a gRPC length prefix of 4 GiB, a
compressed flag nobody offered, a flood of versions after a listener naming 5,000
route configurations, one resource bigger than the byte budget. Then it ends the
stream the way the plan says (any gRPC status with any message, a reset, GOAWAY,
a dropped connection) or stalls; and it may trickle every byte it writes.

The server is driven by the test process's own event loop while the tool runs in
a forked child (tests/hostile_peers.py), and keeps a ``Record`` of what it sent and
what the client answered, for the assertions: which responses were honest, which
were invalid beyond doubt, which the client ACKed or NACKed.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final

import h2.config
import h2.connection
import h2.events
from conftest import FIXTURES
from envoy_data_plane.envoy.config.cluster.v3 import Cluster
from envoy_data_plane.envoy.config.core.v3 import Metadata
from envoy_data_plane.envoy.config.listener.v3 import Filter, FilterChain, Listener
from envoy_data_plane.envoy.config.route.v3 import RouteConfiguration
from envoy_data_plane.envoy.service.discovery.v3 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
    Resource,
)
from envoy_data_plane.google.protobuf import Any as AnyMessage
from envoy_data_plane.google.protobuf import Struct
from hypothesis import strategies as st

from verifier.xds.codec import pack_any, to_json_dict
from verifier.xds.layout import (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    LISTENER_TYPE,
    ROUTE_TYPE,
    SECRET_TYPE,
)
from verifier.xds.snapshot import Snapshot, resource_name

TYPES: Final = (CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, ROUTE_TYPE, SECRET_TYPE)
HCM: Final = (
    "type.googleapis.com/"
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)

# --- what a hostile peer says ---------------------------------------------------------------

KEY_PEM: Final = (
    FIXTURES / "gateway-frontend-client-certificate-validation" / "client-a.key"
).read_text(encoding="utf-8")
_KEY_BODY: Final = "".join(ln for ln in KEY_PEM.splitlines() if not ln.startswith("-----"))
KEY_DER: Final = base64.b64decode(_KEY_BODY)
# Every form a key can take in JSON text: PEM, base64 of PEM, base64 of DER, hex of DER.
KEY_FORMS: Final = (
    KEY_PEM,
    base64.b64encode(KEY_PEM.encode()).decode(),
    base64.b64encode(KEY_DER).decode(),
    KEY_DER.hex(),
)
# Substrings only key material has, in each form: any of them in the output is a leak.
KEY_MARKERS: Final = (
    "PRIVATE KEY",
    _KEY_BODY[10:50],
    KEY_FORMS[1][20:60],
    KEY_FORMS[2][20:60],
    KEY_FORMS[3][20:80],
)
FORGED: Final = "edge-verify: ACK clusters version forged-by-the-peer"
PEER_WORDS: Final = (
    "plain words",
    f"\x1b[31mred\x1b[0m\n{FORGED}",
    f"ok\r{FORGED}",
    "\u202eesrever",
    "\x00\x07\x08",
    KEY_PEM,
    f"key: {KEY_FORMS[2]}",
    "x" * 5000,
)
PEER_TEXT = st.one_of(st.sampled_from(PEER_WORDS), st.text(max_size=20))


def leaked_key(text: str) -> bool:
    return any(m in text for m in KEY_MARKERS)


def raw_control(text: str) -> bool:
    """A control character (but newline and tab) or a forged line in the tool's output."""
    forged = any(line.startswith(FORGED) for line in text.splitlines())
    return forged or any((c < " " and c not in "\n\t") or c == "\x7f" for c in text)


# --- the plan ----------------------------------------------------------------------------------

# Kinds of resource in a response; the second group is invalid whatever the bytes say.
VALID_KINDS: Final = ("valid", "key-metadata", "odd-name")
UNSURE_KINDS: Final = ("garbage", "bitflip", "truncated", "empty")
INVALID_KINDS: Final = ("wrong-type", "unknown-any", "bad-enum")


@dataclass(frozen=True)
class Res:
    kind: str
    which: int = 0
    data: bytes = b""
    text: str = ""


@dataclass(frozen=True)
class Resp:
    """One response: ``honest`` (what a control plane would send), ``resources`` (the
    drawn ones), ``raw`` (bytes that are no DiscoveryResponse), ``huge-prefix``,
    ``compressed``, ``flood`` (a listener naming ``count`` route configurations, then
    a version of each), ``big`` (one resource of ``count`` bytes), ``push`` (the
    honest resources of type ``type_choice``, whatever was asked), ``empties`` and
    ``unknown-fields`` (``count`` empty resources, or ``2 * count`` bytes of fields
    no table has: what costs a parser most per byte)."""

    kind: str
    type_choice: str = "right"
    resources: tuple[Res, ...] = ()
    version: str = "1"
    count: int = 0
    data: bytes = b""


HONEST: Final = Resp("honest")


@dataclass(frozen=True)
class AdsPlan:
    opening: str = "h2"  # h2, garbage, http1, silent, close
    garbage: bytes = b""
    http_status: int = 200
    trailers_only: bool = False
    answers: tuple[Resp, ...] = ()
    after: str = "honest"  # honest, stall, end, reset, goaway, close
    end_code: str = "0"
    end_message: str = ""
    trickle: float = 0.0  # seconds between writes of ``chunk`` bytes; 0: at once
    chunk: int = 1
    delta: bool = False

    @property
    def honest(self) -> bool:
        return self == AdsPlan(delta=self.delta)


def _weighted(*pairs: tuple[int, Any]) -> st.SearchStrategy[Any]:
    return st.sampled_from([value for weight, value in pairs for _ in range(weight)])


RES = st.builds(
    Res,
    kind=st.sampled_from((*VALID_KINDS, *UNSURE_KINDS, *INVALID_KINDS)),
    which=st.integers(0, 50),
    data=st.binary(max_size=40),
    text=PEER_TEXT,
)
RESP = st.one_of(
    st.just(HONEST),
    st.just(HONEST),
    st.builds(
        Resp,
        kind=st.just("resources"),
        type_choice=_weighted((5, "right"), (1, "other"), (1, "unknown"), (1, "odd")),
        resources=st.lists(RES, max_size=3).map(tuple),
        version=PEER_TEXT,
    ),
    st.builds(Resp, kind=st.just("raw"), data=st.binary(max_size=60)),
    st.builds(Resp, kind=st.sampled_from(["huge-prefix", "compressed"]), data=st.binary()),
    st.builds(Resp, kind=st.just("flood"), count=st.sampled_from([1, 40, 5000])),
    st.builds(Resp, kind=st.just("big"), count=st.integers(1 << 20, 3 << 20)),
    st.builds(
        Resp, kind=st.sampled_from(["empties", "unknown-fields"]), count=st.integers(1, 400_000)
    ),
)
PLANS: st.SearchStrategy[AdsPlan] = st.builds(
    AdsPlan,
    opening=_weighted((12, "h2"), (1, "garbage"), (1, "http1"), (1, "silent"), (1, "close")),
    garbage=st.binary(min_size=1, max_size=200),
    http_status=_weighted((12, 200), (1, 404), (1, 503)),
    trailers_only=_weighted((12, False), (1, True)),
    answers=st.lists(RESP, max_size=5).map(tuple),
    after=_weighted(
        (3, "honest"), (1, "stall"), (2, "end"), (1, "reset"), (1, "goaway"), (1, "close")
    ),
    end_code=st.sampled_from(["0", "2", "14", "99", "", "x\x1b"]),
    end_message=PEER_TEXT,
    trickle=_weighted((10, 0.0), (1, 0.02), (1, 0.3)),
    chunk=st.integers(1, 64),
    delta=_weighted((4, False), (1, True)),
)


# --- what the server saw ---------------------------------------------------------------------


@dataclass
class Record:
    connected: float | None = None
    closed: float | None = None
    sent: dict[str, tuple[str, str]] = field(default_factory=dict)  # nonce -> (type, verdict)
    acked: list[tuple[str, str]] = field(default_factory=list)  # (type, nonce)
    nacked: list[str] = field(default_factory=list)  # the clients' messages
    requests: int = 0

    def accepted_invalid(self) -> list[str]:
        """Nonces of responses invalid beyond doubt that the client ACKed."""
        return [n for t, n in self.acked if self.sent.get(n, (t, ""))[1] == "invalid"]

    def accepted(self, url: str) -> bool:
        return any(t == url for t, _ in self.acked)


# --- the valid snapshot and the resources drawn from it -------------------------------------


class Served:
    """The honest snapshot, packed, and the drawn resources built from it."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        kinds = ("clusters", "endpoints", "listeners", "routes", "secrets")
        self.by_type: dict[str, dict[str, AnyMessage]] = {
            url: {resource_name(m): pack_any(m) for m in getattr(snap, kind)}
            for url, kind in zip(TYPES, kinds, strict=True)
        }

    def honest(self, url: str, names: set[str] | None) -> dict[str, AnyMessage]:
        found = self.by_type.get(url, {})
        return dict(found) if names is None else {n: a for n, a in found.items() if n in names}

    def any_valid(self, url: str, which: int) -> AnyMessage:
        found = list(self.by_type.get(url, {}).values()) or list(
            self.by_type[CLUSTER_TYPE].values()
        )
        return found[which % len(found)]

    def resource(self, url: str, res: Res) -> tuple[AnyMessage, str]:
        """(the packed resource, "valid" | "unsure" | "invalid")."""
        base = self.any_valid(url, res.which)
        verdict = "valid" if res.kind in VALID_KINDS else "invalid"
        if res.kind in UNSURE_KINDS:
            verdict = "unsure"
        value = base.value
        if res.kind == "garbage":
            value = res.data
        elif res.kind == "bitflip" and value:
            at = res.which % len(value)
            value = value[:at] + bytes([value[at] ^ (1 << (res.which % 8))]) + value[at + 1 :]
        elif res.kind == "truncated":
            value = value[: res.which % (len(value) + 1)]
        elif res.kind == "empty":
            value = b""
        elif res.kind == "wrong-type":
            other = (
                TYPES[(TYPES.index(url) + 1 + res.which % 4) % 5] if url in TYPES else ROUTE_TYPE
            )
            return AnyMessage(type_url=other, value=base.value), verdict
        elif res.kind == "unknown-any":
            return pack_any(
                _listener(AnyMessage(type_url="type.googleapis.com/no.Such", value=b"x"))
            ), verdict
        elif res.kind == "bad-enum":  # codec_type (an enum) as fixed32: KeyError 'enum' once
            bad = AnyMessage(type_url=HCM, value=b"\x0d\x01\x00\x00\x00")
            return pack_any(_listener(bad)), verdict
        elif res.kind == "key-metadata":
            key = KEY_FORMS[res.which % len(KEY_FORMS)]
            meta = Metadata(filter_metadata={"peer": Struct.from_dict({"k": key, "t": res.text})})
            return pack_any(Cluster(name=f"keyed-{res.which}", metadata=meta)), "valid"
        elif res.kind == "odd-name":
            return pack_any(Cluster(name=f"odd{res.text}")), "valid"
        return AnyMessage(type_url=base.type_url, value=value), verdict


def _listener(typed: AnyMessage, name: str = "hostile") -> Listener:
    return Listener(
        name=name, filter_chains=[FilterChain(filters=[Filter(name="hcm", typed_config=typed)])]
    )


def _rds_listener(count: int) -> Listener:
    """One listener whose filter chains load ``count`` route configurations over RDS."""
    from envoy_data_plane.envoy.config.core.v3 import AggregatedConfigSource, ConfigSource
    from envoy_data_plane.envoy.extensions.filters.network.http_connection_manager.v3 import (
        HttpConnectionManager,
        Rds,
    )

    source = ConfigSource(ads=AggregatedConfigSource())
    chains = [
        FilterChain(
            filters=[
                Filter(
                    name="hcm",
                    typed_config=pack_any(
                        HttpConnectionManager(
                            stat_prefix="s",
                            rds=Rds(route_config_name=f"r{i}", config_source=source),
                        )
                    ),
                )
            ]
        )
        for i in range(count)
    ]
    return Listener(name="flooded", filter_chains=chains)


# --- the server --------------------------------------------------------------------------------

_PREFIX = 5
FLOOD = 3000  # route responses after the listener, each a new version


@functools.lru_cache(maxsize=8)
def _flood(names: int, delta: bool) -> tuple[list[tuple[str, str]], bytes]:
    """A listener naming ``names`` route configurations, then ``FLOOD`` versions of
    them, framed: made once per size, since the serving loop must not stall on it
    (nonces "f0", "f1"...)."""
    messages = [(LISTENER_TYPE, "flooded", pack_any(_rds_listener(names)), "1")]
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


def snapshot_json(snap: Snapshot) -> dict[str, Any]:
    """Each type's resources as JSON, by name (what an exit 0 must have written)."""
    kinds = ("clusters", "endpoints", "listeners", "routes", "secrets")
    return {k: {resource_name(m): to_json_dict(m) for m in getattr(snap, k)} for k in kinds}
