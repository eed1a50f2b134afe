"""An ADS client: subscribe to a control plane as the edge's node and keep what it serves.

``check`` must judge the xDS the edge really gets, and the only faithful way to get it
from a control plane is to ask as Envoy does: one ADS stream, Envoy's own type URLs,
wildcard clusters and listeners, then by name the endpoints, routes and secrets those
reference. Every response is answered as Envoy would (ACK, or NACK with the reason
when a resource does not decode), since a control plane that never hears back may
hold further types back. The pull ends when every referenced name has arrived and
nothing new has come for a settle period, or fails (naming what was still missing)
when the overall timeout expires: a read-only tool pointed at production must end.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import betterproto2
from envoy_data_plane.envoy.config.cluster.v3 import Cluster, ClusterDiscoveryType
from envoy_data_plane.envoy.config.core.v3 import Node
from envoy_data_plane.envoy.config.endpoint.v3 import ClusterLoadAssignment
from envoy_data_plane.envoy.config.listener.v3 import Listener
from envoy_data_plane.envoy.config.route.v3 import RouteConfiguration
from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import Secret
from envoy_data_plane.envoy.service.discovery.v3 import (
    AggregatedDiscoveryServiceAsyncStub,
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
)
from envoy_data_plane.google.protobuf import Any as AnyMessage
from envoy_data_plane.google.rpc import Status
from grpclib.client import Channel
from grpclib.exceptions import GRPCError, StreamTerminatedError

from verifier.xds.codec import Json, to_json_dict, unpack_any
from verifier.xds.layout import (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    LISTENER_TYPE,
    ROUTE_TYPE,
    SECRET_TYPE,
)
from verifier.xds.snapshot import Snapshot, resource_name

ORDER: Final = (CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, ROUTE_TYPE, SECRET_TYPE)
WILDCARD: Final = (CLUSTER_TYPE, LISTENER_TYPE)
CLASSES: Final[Mapping[str, type[betterproto2.Message]]] = {
    CLUSTER_TYPE: Cluster,
    ENDPOINT_TYPE: ClusterLoadAssignment,
    LISTENER_TYPE: Listener,
    ROUTE_TYPE: RouteConfiguration,
    SECRET_TYPE: Secret,
}
KIND: Final = dict(
    zip(ORDER, ("clusters", "endpoints", "listeners", "routes", "secrets"), strict=True)
)
INVALID_ARGUMENT: Final = 3  # google.rpc.Code, what Envoy sends in its NACKs
DEFAULT_TIMEOUT: Final = 30.0
DEFAULT_SETTLE: Final = 1.0


class PullError(Exception):
    """The pull could not give a complete snapshot: unreachable, refused, or timed out."""


@dataclass(frozen=True)
class PullOptions:
    node_id: str
    node_cluster: str = ""
    delta: bool = False
    timeout: float = DEFAULT_TIMEOUT
    settle: float = DEFAULT_SETTLE  # quiet period after completeness before the pull ends
    ssl: ssl.SSLContext | None = None


@dataclass(frozen=True)
class Nack:
    type_url: str
    nonce: str
    message: str


@dataclass
class _Type:
    names: set[str] = field(default_factory=set)  # subscribed (by name; wildcard types: none)
    held: dict[str, betterproto2.Message] = field(default_factory=dict)
    answered: bool = False  # a response of this type has arrived
    version: str = ""  # last accepted (SotW version_info, delta system_version_info)
    nonce: str = ""


@dataclass
class PullResult:
    snapshot: Snapshot
    versions: Mapping[str, str]
    nacks: list[Nack]


def tls_context(ca: str | None, cert: str | None, key: str | None) -> ssl.SSLContext:
    """A client TLS context for gRPC: ALPN h2, the CA to trust (system CAs when none),
    and a client certificate when the control plane asks for mTLS."""
    ctx = ssl.create_default_context(cafile=ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["h2"])
    return ctx


# --- what the held resources reference ----------------------------------------------------


def _walk(node: Json) -> Iterable[dict[str, Json]]:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def eds_names(clusters: Iterable[betterproto2.Message]) -> set[str]:
    """The assignments EDS clusters ask for: ``service_name``, else the cluster's name."""
    out = set()
    for c in clusters:
        assert isinstance(c, Cluster)
        if c.type == ClusterDiscoveryType.EDS:
            out.add((c.eds_cluster_config.service_name if c.eds_cluster_config else "") or c.name)
    return out


def rds_names(listeners: Iterable[betterproto2.Message]) -> set[str]:
    """The route configurations the listeners' HTTP connection managers load over RDS."""
    out = set()
    for li in listeners:
        for node in _walk(to_json_dict(li)):
            rds = node.get("rds")
            if isinstance(rds, dict) and isinstance(rds.get("route_config_name"), str):
                out.add(str(rds["route_config_name"]))
    return out


def sds_names(messages: Iterable[betterproto2.Message]) -> set[str]:
    """The SDS secrets TLS transport sockets name (certificates and validation contexts)."""
    out = set()
    for msg in messages:
        for node in _walk(to_json_dict(msg)):
            refs = node.get("tls_certificate_sds_secret_configs")
            for ref in refs if isinstance(refs, list) else ():
                if isinstance(ref, dict) and ref.get("name"):
                    out.add(str(ref["name"]))
            ref = node.get("validation_context_sds_secret_config")
            if isinstance(ref, dict) and ref.get("name"):
                out.add(str(ref["name"]))
    return out


# --- the client ---------------------------------------------------------------------------


class _Session:
    """One pull: the subscriptions, what is held, and the requests still to send."""

    def __init__(self, opts: PullOptions) -> None:
        self.opts = opts
        self.types = {url: _Type() for url in ORDER}
        self.outbox: asyncio.Queue[object] = asyncio.Queue()
        self.nacks: list[Nack] = []
        self.activity = asyncio.Event()
        self.first = True

    def node(self) -> Node | None:
        """Sent on the first request only, as Envoy does with set_node_on_first_message_only."""
        if not self.first:
            return None
        self.first = False
        return Node(id=self.opts.node_id, cluster=self.opts.node_cluster)

    async def requests(self) -> AsyncIterator[Any]:
        while (item := await self.outbox.get()) is not None:
            yield item

    def wanted(self) -> dict[str, set[str]]:
        """The names each by-name type should be subscribed to, given what is held."""
        held = {url: list(t.held.values()) for url, t in self.types.items()}
        return {
            ENDPOINT_TYPE: eds_names(held[CLUSTER_TYPE]),
            ROUTE_TYPE: rds_names(held[LISTENER_TYPE]),
            SECRET_TYPE: sds_names([*held[CLUSTER_TYPE], *held[LISTENER_TYPE]]),
        }

    def missing(self) -> list[str]:
        """What the snapshot still lacks, as ``kind/name`` (``kind/*``: no response yet)."""
        out = []
        for url in WILDCARD:
            if not self.types[url].answered and not self.opts.delta:
                out.append(f"{KIND[url]}/*")
        for url, names in self.wanted().items():
            out += [f"{KIND[url]}/{n}" for n in sorted(names - set(self.types[url].held))]
        return out

    def decode(self, url: str, resources: Iterable[tuple[str, AnyMessage]]) -> dict[str, Any]:
        """Name -> message; raises ValueError with the reason a NACK carries."""
        out: dict[str, Any] = {}
        for given, packed in resources:
            if packed.type_url != url:
                raise ValueError(f"resource {given!r} is a {packed.type_url}, not a {url}")
            try:
                msg = unpack_any(packed)
            except Exception as exc:  # whatever betterproto raises on bad bytes
                raise ValueError(f"resource {given!r} does not decode: {exc}") from None
            out[given or resource_name(msg)] = msg
        return out

    # --- SotW ---

    def start_sotw(self) -> None:
        for url in WILDCARD:
            self.outbox.put_nowait(DiscoveryRequest(node=self.node(), type_url=url))

    def on_sotw(self, resp: DiscoveryResponse) -> None:
        url = resp.type_url
        if url not in self.types:
            return
        t = self.types[url]
        try:
            got = self.decode(url, (("", r) for r in resp.resources))
        except ValueError as exc:
            self.nacks.append(Nack(url, resp.nonce, str(exc)))
            t.nonce = resp.nonce
            self.outbox.put_nowait(
                DiscoveryRequest(
                    type_url=url,
                    version_info=t.version,
                    response_nonce=resp.nonce,
                    resource_names=sorted(t.names),
                    error_detail=Status(code=INVALID_ARGUMENT, message=str(exc)),
                )
            )
            return
        if url in WILDCARD:
            t.held = got
        else:  # by-name types: a response may carry only some of the names
            t.held.update(got)
            t.held = {n: m for n, m in t.held.items() if n in t.names}
        t.answered, t.version, t.nonce = True, resp.version_info, resp.nonce
        self.outbox.put_nowait(
            DiscoveryRequest(
                type_url=url,
                version_info=resp.version_info,
                response_nonce=resp.nonce,
                resource_names=sorted(t.names),
            )
        )
        self.resubscribe_sotw()

    def resubscribe_sotw(self) -> None:
        for url, names in self.wanted().items():
            t = self.types[url]
            if names != t.names:
                t.names = set(names)
                t.held = {n: m for n, m in t.held.items() if n in names}
                self.outbox.put_nowait(
                    DiscoveryRequest(
                        node=self.node(),
                        type_url=url,
                        version_info=t.version,
                        response_nonce=t.nonce,
                        resource_names=sorted(names),
                    )
                )

    # --- delta ---

    def start_delta(self) -> None:
        for url in WILDCARD:
            self.outbox.put_nowait(
                DeltaDiscoveryRequest(
                    node=self.node(), type_url=url, resource_names_subscribe=["*"]
                )
            )

    def on_delta(self, resp: DeltaDiscoveryResponse) -> None:
        url = resp.type_url
        if url not in self.types:
            return
        t = self.types[url]
        try:
            got = self.decode(url, ((r.name, r.resource) for r in resp.resources if r.resource))
        except ValueError as exc:
            self.nacks.append(Nack(url, resp.nonce, str(exc)))
            self.outbox.put_nowait(
                DeltaDiscoveryRequest(
                    type_url=url,
                    response_nonce=resp.nonce,
                    error_detail=Status(code=INVALID_ARGUMENT, message=str(exc)),
                )
            )
            return
        t.held.update(got)
        for name in resp.removed_resources:
            t.held.pop(name, None)
        t.answered, t.version, t.nonce = True, resp.system_version_info, resp.nonce
        self.outbox.put_nowait(DeltaDiscoveryRequest(type_url=url, response_nonce=resp.nonce))
        for by_name, names in self.wanted().items():
            bt = self.types[by_name]
            added, dropped = names - bt.names, bt.names - names
            if added or dropped:
                bt.names = set(names)
                for name in dropped:
                    bt.held.pop(name, None)
                self.outbox.put_nowait(
                    DeltaDiscoveryRequest(
                        node=self.node(),
                        type_url=by_name,
                        resource_names_subscribe=sorted(added),
                        resource_names_unsubscribe=sorted(dropped),
                    )
                )

    def result(self) -> PullResult:
        held = {url: list(t.held.values()) for url, t in self.types.items()}
        snap = Snapshot(
            clusters=tuple(held[CLUSTER_TYPE]),  # type: ignore[arg-type]
            endpoints=tuple(held[ENDPOINT_TYPE]),  # type: ignore[arg-type]
            listeners=tuple(held[LISTENER_TYPE]),  # type: ignore[arg-type]
            routes=tuple(held[ROUTE_TYPE]),  # type: ignore[arg-type]
            secrets=tuple(held[SECRET_TYPE]),  # type: ignore[arg-type]
        )
        versions = {KIND[url]: t.version for url, t in self.types.items() if t.answered}
        return PullResult(snap, versions, list(self.nacks))


async def _receive(session: _Session, stub: AggregatedDiscoveryServiceAsyncStub) -> None:
    if session.opts.delta:
        session.start_delta()
        async for delta in stub.delta_aggregated_resources(session.requests()):
            session.on_delta(delta)
            session.activity.set()
    else:
        session.start_sotw()
        async for sotw in stub.stream_aggregated_resources(session.requests()):
            session.on_sotw(sotw)
            session.activity.set()
    raise PullError("the server ended the ADS stream before the snapshot was complete")


async def _until_complete(session: _Session) -> None:
    """Return once nothing is missing and no response came for a whole settle period."""
    while True:
        await session.activity.wait()
        session.activity.clear()
        if session.missing():
            continue
        try:
            await asyncio.wait_for(session.activity.wait(), session.opts.settle)
        except TimeoutError:
            if not session.missing():
                return


async def pull(host: str, port: int, opts: PullOptions) -> PullResult:
    """The snapshot the control plane at ``host``:``port`` serves to node ``opts.node_id``."""
    session = _Session(opts)
    channel = Channel(host, port, ssl=opts.ssl)
    stub = AggregatedDiscoveryServiceAsyncStub(channel)
    receiver = asyncio.create_task(_receive(session, stub))
    done = asyncio.create_task(_until_complete(session))
    where = f"{host}:{port}"
    try:
        finished, _ = await asyncio.wait(
            {receiver, done}, timeout=opts.timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if done in finished:
            return session.result()
        if receiver in finished:
            exc = receiver.exception()
            if isinstance(exc, PullError):
                raise exc
            raise PullError(f"ADS at {where}: {_describe(exc)}") from None
        missing = session.missing() or ["(the snapshot was still changing)"]
        if not any(t.answered for t in session.types.values()):
            raise PullError(f"ADS at {where}: no response within {opts.timeout:g}s")
        raise PullError(
            f"ADS at {where}: incomplete after {opts.timeout:g}s; still missing: "
            + ", ".join(missing)
        )
    finally:
        session.outbox.put_nowait(None)
        for task in (receiver, done):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        channel.close()


def _describe(exc: BaseException | None) -> str:
    if isinstance(exc, GRPCError):
        return f"gRPC error {exc.status.name}: {exc.message or ''}".rstrip(": ")
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc.reason or exc}"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    if isinstance(exc, StreamTerminatedError):
        return f"the stream ended: {exc}"
    return repr(exc)


def parse_ads_url(url: str) -> tuple[str, int, PullOptions]:
    """``ads://HOST:PORT?node=ID[&cluster=C][&delta=1][&timeout=S]`` -> where and how."""
    from urllib.parse import parse_qs, urlsplit

    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    unknown = sorted(set(query) - {"node", "cluster", "delta", "timeout"})
    if parts.scheme != "ads" or not parts.hostname or parts.port is None:
        raise PullError(f"{url}: expected ads://HOST:PORT?node=ID[&cluster=C][&delta=1]")
    if unknown:
        raise PullError(f"{url}: unknown parameter {unknown[0]!r} (node, cluster, delta, timeout)")
    if not query.get("node"):
        raise PullError(f"{url}: say which node to pull as: ?node=ID")
    try:
        timeout = float(query.get("timeout", DEFAULT_TIMEOUT))
    except ValueError:
        raise PullError(f"{url}: timeout must be a number of seconds") from None
    opts = PullOptions(
        node_id=query["node"],
        node_cluster=query.get("cluster", ""),
        delta=query.get("delta", "0") not in ("", "0", "false"),
        timeout=timeout,
    )
    return parts.hostname, parts.port, opts
