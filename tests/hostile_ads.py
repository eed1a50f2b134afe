"""What a hostile ADS server does, drawn by Hypothesis (tests/hostile_ads_server.py
does it, over raw HTTP/2).

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

from dataclasses import dataclass, field
from typing import Any, Final

from envoy_data_plane.envoy.config.cluster.v3 import Cluster
from envoy_data_plane.envoy.config.core.v3 import Metadata
from envoy_data_plane.envoy.config.listener.v3 import Filter, FilterChain, Listener
from envoy_data_plane.google.protobuf import Any as AnyMessage
from envoy_data_plane.google.protobuf import Struct
from hypothesis import strategies as st
from peer_words import KEY_FORMS, PEER_TEXT, weighted

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
        type_choice=weighted((5, "right"), (1, "other"), (1, "unknown"), (1, "odd")),
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
    opening=weighted((12, "h2"), (1, "garbage"), (1, "http1"), (1, "silent"), (1, "close")),
    garbage=st.binary(min_size=1, max_size=200),
    http_status=weighted((12, 200), (1, 404), (1, 503)),
    trailers_only=weighted((12, False), (1, True)),
    answers=st.lists(RESP, max_size=5).map(tuple),
    after=weighted(
        (3, "honest"), (1, "stall"), (2, "end"), (1, "reset"), (1, "goaway"), (1, "close")
    ),
    end_code=st.sampled_from(["0", "2", "14", "99", "", "x\x1b"]),
    end_message=PEER_TEXT,
    trickle=weighted((10, 0.0), (1, 0.02), (1, 0.3)),
    chunk=st.integers(1, 64),
    delta=weighted((4, False), (1, True)),
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


def rds_listener(count: int) -> Listener:
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


def snapshot_json(snap: Snapshot) -> dict[str, Any]:
    """Each type's resources as JSON, by name (what an exit 0 must have written)."""
    kinds = ("clusters", "endpoints", "listeners", "routes", "secrets")
    return {k: {resource_name(m): to_json_dict(m) for m in getattr(snap, k)} for k in kinds}
