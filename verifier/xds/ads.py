"""An ADS server (state-of-the-world and delta) that serves a ``Snapshot`` to real Envoys.

The live pass must run exactly the xDS that was checked, so Envoy gets it the way a
control plane gives it: over ADS, in the order the xDS protocol asks for ("eventual
consistency considerations": clusters, then their endpoints, then listeners, then
routes), with a version and a nonce per type. What Envoy rejects is as much a verdict
as what it does, so every NACK is kept verbatim (Envoy's own ``error_detail``), and a
rejected version is never sent again on that stream: re-sending it would only make
that Envoy reject it again, and a log of repeated NACKs hides which change was bad.
Each stream's state is its own: what one client rejects (or a hostile client claims
to reject) never changes what another receives.

Gating is per stream and per type: a type is sent only when the types it depends on
(``AFTER``) are settled on that stream (no response waiting for an answer, nothing
newer to send), and never while its own previous response is unanswered, so every
response is answered before the next of its type and an answer always names the
response it is about. Secrets follow clusters only: mesh clusters need theirs to
warm, and listeners ask for theirs when they arrive.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from ssl import SSLContext
from typing import Any, Final

import betterproto2
from envoy_data_plane.envoy.config.bootstrap.v3 import (
    Bootstrap,
    BootstrapDynamicResources,
    BootstrapStaticResources,
)
from envoy_data_plane.envoy.config.cluster.v3 import Cluster, ClusterDiscoveryType
from envoy_data_plane.envoy.config.core.v3 import (
    Address,
    AggregatedConfigSource,
    ApiConfigSource,
    ApiConfigSourceApiType,
    ApiVersion,
    ConfigSource,
    GrpcService,
    GrpcServiceEnvoyGrpc,
    Http2ProtocolOptions,
    Node,
    SocketAddress,
)
from envoy_data_plane.envoy.config.endpoint.v3 import (
    ClusterLoadAssignment,
    Endpoint,
    LbEndpoint,
    LocalityLbEndpoints,
)
from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import Secret
from envoy_data_plane.envoy.extensions.upstreams.http.v3 import (
    HttpProtocolOptions,
    HttpProtocolOptionsExplicitHttpConfig,
)
from envoy_data_plane.envoy.service.discovery.v3 import (
    AggregatedDiscoveryServiceBase,
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
    Resource,
)
from envoy_data_plane.google.protobuf import Any as AnyMessage
from grpclib.server import Server

from verifier.inputs import limits
from verifier.peers import printable
from verifier.xds.ads_wire import CountedServer
from verifier.xds.codec import Json, pack_any, to_json_dict, type_url_of
from verifier.xds.layout import (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    LISTENER_TYPE,
    ROUTE_TYPE,
    SECRET_TYPE,
)
from verifier.xds.snapshot import REDACTED, Snapshot, resource_name

TYPES: Final = (CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, ROUTE_TYPE, SECRET_TYPE)
# Envoy subscribes to every cluster and listener; the rest it asks for by name.
WILDCARD_TYPES: Final = frozenset({CLUSTER_TYPE, LISTENER_TYPE})
# What must be settled on a stream before a type is sent (see the module docstring).
AFTER: Final[Mapping[str, tuple[str, ...]]] = {
    CLUSTER_TYPE: (),
    ENDPOINT_TYPE: (CLUSTER_TYPE,),
    LISTENER_TYPE: (CLUSTER_TYPE, ENDPOINT_TYPE),
    ROUTE_TYPE: (CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE),
    SECRET_TYPE: (CLUSTER_TYPE,),
}
XDS_CLUSTER: Final = "edge-verifier-ads"
# Requests up to this size are parsed on the loop (at most a few tens of milliseconds,
# and no thread is started for an Envoy's usual requests); larger ones off it.
INLINE_PARSE: Final = 16 * 1024
_KINDS: Final = dict(
    zip(TYPES, ("clusters", "endpoints", "listeners", "routes", "secrets"), strict=True)
)  # type URL -> the Snapshot field


def _digest(parts: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Packed:
    """One snapshot as served: each resource packed once, with a content version.

    Versions are content hashes, so serving the same snapshot again (or one that only
    changed other types) changes no version and sends nothing.
    """

    resources: Mapping[str, Mapping[str, tuple[str, AnyMessage]]]  # type -> name -> (ver, Any)
    versions: Mapping[str, str]  # type -> version of all its resources
    eds_names: frozenset[str]  # the assignments the snapshot's EDS clusters ask for


def pack_snapshot(snap: Snapshot, extra_secrets: Sequence[Secret] = ()) -> Packed:
    """Pack ``snap`` (plus secrets only the caller has, e.g. the mesh's ``default`` and
    ``ROOTCA``) for serving; a snapshot secret wins over an extra one of the same name."""
    resources: dict[str, dict[str, tuple[str, AnyMessage]]] = {}
    for url in TYPES:
        items: list[betterproto2.Message] = list(getattr(snap, _KINDS[url]))
        if url == SECRET_TYPE:
            own = {s.name for s in snap.secrets}
            items += [s for s in extra_secrets if s.name not in own]
        by_name: dict[str, tuple[str, AnyMessage]] = {}
        for msg in items:
            packed = pack_any(msg)
            by_name[resource_name(msg)] = (_digest([packed.value]), packed)
        resources[url] = dict(sorted(by_name.items()))
    versions = {
        url: _digest(f"{n}\0{v}".encode() for n, (v, _) in found.items())
        for url, found in resources.items()
    }
    eds = frozenset(
        (c.eds_cluster_config.service_name if c.eds_cluster_config else "") or c.name
        for c in snap.clusters
        if c.type == ClusterDiscoveryType.EDS
    )
    return Packed(resources, versions, eds)


@dataclass(frozen=True)
class Answer:
    """Envoy's answer to one response: an ACK, or a NACK with Envoy's own message."""

    type_url: str
    version: str  # the version of the response answered (the rejected one, for a NACK)
    nonce: str
    accepted: bool
    message: str = ""  # error_detail.message, verbatim
    code: int = 0  # error_detail.code (a google.rpc.Code)
    node: str = ""  # the Envoy's node id, as it introduced itself


@dataclass
class _Pending:
    nonce: str
    version: str
    sent: dict[str, str] = field(default_factory=dict)  # delta: name -> resource version
    removed: tuple[str, ...] = ()


@dataclass
class _TypeState:
    subscribed: bool = False
    wildcard: bool = False
    names: set[str] = field(default_factory=set)
    pending: _Pending | None = None
    last_nonce: str = ""
    sent: tuple[str, frozenset[str] | None] | None = None  # SotW: (version, names) last sent
    known: dict[str, str] = field(default_factory=dict)  # delta: what the Envoy holds


_END: Final = object()
_Request = DiscoveryRequest | DeltaDiscoveryRequest
_Handler = Callable[[Any], None]


class _Stream:
    """One Envoy's ADS stream: subscriptions, what is in flight, and the outbox."""

    def __init__(self, server: AdsServer) -> None:
        self.server = server
        self.state = {url: _TypeState() for url in TYPES}
        self.outbox: asyncio.Queue[object] = asyncio.Queue()
        self.node = ""
        # The versions this client rejected, never sent to it again (and only to it).
        self.nacked: dict[str, set[str]] = {url: set() for url in TYPES}

    # --- what a subclass says ----------------------------------------------------------------

    def wanted(self, url: str) -> bool:
        """Whether something in the current snapshot is not yet on its way to the Envoy."""
        raise NotImplementedError

    def response(self, url: str, nonce: str) -> tuple[object, _Pending]:
        raise NotImplementedError

    # --- shared ---------------------------------------------------------------------------------

    def served_names(self, url: str) -> Mapping[str, tuple[str, AnyMessage]]:
        found = self.server.packed.resources[url]
        st = self.state[url]
        if st.wildcard:
            return found
        return {n: found[n] for n in sorted(st.names) if n in found}

    def settled(self, url: str) -> bool:
        st = self.state[url]
        if url == ENDPOINT_TYPE and not self._asked_every_eds():
            return False
        return st.pending is None and not (st.subscribed and self._sendable(url))

    def _asked_every_eds(self) -> bool:
        """Envoy asks for new clusters' endpoints right after it ACKs them; listeners
        wait for that request (unless the clusters were rejected: nothing will ask)."""
        if self.server.packed.versions[CLUSTER_TYPE] in self.nacked[CLUSTER_TYPE]:
            return True
        st = self.state[ENDPOINT_TYPE]
        return st.wildcard or self.server.packed.eds_names <= st.names

    def _sendable(self, url: str) -> bool:
        version = self.server.packed.versions[url]
        return version not in self.nacked[url] and self.wanted(url)

    def evaluate(self) -> None:
        """Send, in order, every type whose turn it is."""
        for url in TYPES:
            st = self.state[url]
            if not st.subscribed or st.pending is not None or not self._sendable(url):
                continue
            if not all(self.settled(dep) for dep in AFTER[url]):
                continue
            nonce = self.server.next_nonce()
            message, st.pending = self.response(url, nonce)
            st.last_nonce = nonce
            self.server.sent[(url, st.pending.version)] += 1
            self.outbox.put_nowait(message)

    def answer(self, url: str, nonce: str, error: object | None) -> None:
        """Settle the pending response ``nonce`` names; stale nonces change nothing."""
        st = self.state[url]
        pending = st.pending
        if pending is None or nonce != pending.nonce:
            return
        st.pending = None
        message = getattr(error, "message", "") if error is not None else ""
        code = int(getattr(error, "code", 0)) if error is not None else 0
        if error is None:
            st.known.update(pending.sent)
            for name in pending.removed:
                st.known.pop(name, None)
        else:
            self.nacked[url].add(pending.version)
        self.server.record(
            Answer(url, pending.version, nonce, error is None, message, code, self.node)
        )


class _SotwStream(_Stream):
    def on_request(self, req: DiscoveryRequest) -> None:
        url = req.type_url
        if url not in self.state:
            return  # a type we do not serve: Envoy waits for it, as with any control plane
        if req.node is not None and req.node.id:
            self.node = req.node.id
        st = self.state[url]
        if req.response_nonce:
            if req.response_nonce not in (st.last_nonce, getattr(st.pending, "nonce", None)):
                return  # stale: about an older response, ignored as the protocol says
            self.answer(url, req.response_nonce, req.error_detail)
        names = set(req.resource_names)
        st.wildcard = url in WILDCARD_TYPES and (not names or "*" in names)
        st.names = names - {"*"}
        st.subscribed = st.wildcard or bool(st.names)
        self.evaluate()

    def wanted(self, url: str) -> bool:
        st = self.state[url]
        return st.sent != (self.server.packed.versions[url], self._names(url))

    def _names(self, url: str) -> frozenset[str] | None:
        st = self.state[url]
        return None if st.wildcard else frozenset(st.names)

    def response(self, url: str, nonce: str) -> tuple[object, _Pending]:
        version = self.server.packed.versions[url]
        self.state[url].sent = (version, self._names(url))
        resources = [packed for _, packed in self.served_names(url).values()]
        message = DiscoveryResponse(
            version_info=version, resources=resources, type_url=url, nonce=nonce
        )
        return message, _Pending(nonce, version)


class _DeltaStream(_Stream):
    def on_request(self, req: DeltaDiscoveryRequest) -> None:
        url = req.type_url
        if url not in self.state:
            return
        if req.node is not None and req.node.id:
            self.node = req.node.id
        st = self.state[url]
        if req.response_nonce:
            self.answer(url, req.response_nonce, req.error_detail)
        if not st.subscribed:  # the first request of a type: legacy wildcard, reconnect state
            st.wildcard = url in WILDCARD_TYPES and not req.resource_names_subscribe
            st.known.update(req.initial_resource_versions)
        for name in req.resource_names_subscribe:
            if name == "*":
                st.wildcard = True
            else:
                st.names.add(name)
        for name in req.resource_names_unsubscribe:
            if name == "*":
                st.wildcard = False
            else:
                st.names.discard(name)
                st.known.pop(name, None)
        st.subscribed = st.wildcard or bool(st.names) or bool(st.known)
        self.evaluate()

    def _diff(self, url: str) -> tuple[dict[str, tuple[str, AnyMessage]], list[str]]:
        st = self.state[url]
        changed = {n: r for n, r in self.served_names(url).items() if st.known.get(n) != r[0]}
        present = self.server.packed.resources[url]
        removed = [n for n in sorted(st.known) if n not in present]
        return changed, removed

    def wanted(self, url: str) -> bool:
        changed, removed = self._diff(url)
        return bool(changed or removed)

    def response(self, url: str, nonce: str) -> tuple[object, _Pending]:
        version = self.server.packed.versions[url]
        changed, removed = self._diff(url)
        message = DeltaDiscoveryResponse(
            system_version_info=version,
            resources=[
                Resource(name=n, version=v, resource=packed) for n, (v, packed) in changed.items()
            ],
            type_url=url,
            removed_resources=removed,
            nonce=nonce,
        )
        sent = {n: v for n, (v, _) in changed.items()}
        return message, _Pending(nonce, version, sent, tuple(removed))


class AdsServer(AggregatedDiscoveryServiceBase):
    """Serves one snapshot at a time to every Envoy connected over ADS (SotW or delta).

    ``answers`` lists every ACK and NACK in arrival order (``nacks`` the NACKs);
    ``sent`` counts responses per (type, version), so a test can prove a rejected
    version went out once; ``wait_answer`` waits for Envoy's verdict on a version.
    """

    def __init__(
        self,
        snapshot: Snapshot,
        *,
        extra_secrets: Sequence[Secret] = (),
        on_answer: Callable[[Answer], None] | None = None,
    ) -> None:
        self.extra_secrets = tuple(extra_secrets)
        self.on_answer = on_answer
        self.packed = pack_snapshot(snapshot, self.extra_secrets)
        self.answers: list[Answer] = []
        self.sent: Counter[tuple[str, str]] = Counter()
        self._streams: set[_Stream] = set()
        self._nonces = itertools.count(1)
        self._waiters: list[tuple[str, str, asyncio.Future[Answer]]] = []
        self._server: Server | None = None
        self._decoding = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ads-decode")

    @property
    def nacks(self) -> list[Answer]:
        return [a for a in self.answers if not a.accepted]

    @property
    def versions(self) -> Mapping[str, str]:
        """The version of each type in the snapshot being served."""
        return self.packed.versions

    def resource_version(self, type_url: str, name: str) -> str:
        """The per-resource version delta xDS gives ``name`` (Envoy's config_dump shows it)."""
        return self.packed.resources[type_url][name][0]

    def update(self, snapshot: Snapshot) -> Mapping[str, str]:
        """Serve ``snapshot`` from now on and push what changed to every connected Envoy."""
        self.packed = pack_snapshot(snapshot, self.extra_secrets)
        for stream in list(self._streams):
            stream.evaluate()
        return self.packed.versions

    def next_nonce(self) -> str:
        return str(next(self._nonces))

    def record(self, answer: Answer) -> None:
        self.answers.append(answer)
        if self.on_answer is not None:
            self.on_answer(answer)
        waiting = []
        for url, version, future in self._waiters:
            if (url, version) == (answer.type_url, answer.version) and not future.done():
                future.set_result(answer)
            elif not future.done():
                waiting.append((url, version, future))
        self._waiters = waiting

    async def wait_answer(self, type_url: str, version: str) -> Answer:
        """Envoy's first answer (ACK or NACK) to ``version`` of ``type_url``; callers
        bound the wait (``asyncio.wait_for``): an Envoy that never asks never answers."""
        for answer in self.answers:
            if (answer.type_url, answer.version) == (type_url, version):
                return answer
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._waiters.append((type_url, version, future))
        return await future

    # --- gRPC -------------------------------------------------------------------------------

    async def stream_aggregated_resources(
        self, messages: AsyncIterator[DiscoveryRequest]
    ) -> AsyncIterator[DiscoveryResponse]:
        stream = _SotwStream(self)
        async for response in self._serve(stream, messages, DiscoveryRequest, stream.on_request):
            assert isinstance(response, DiscoveryResponse)
            yield response

    async def delta_aggregated_resources(
        self, messages: AsyncIterator[DeltaDiscoveryRequest]
    ) -> AsyncIterator[DeltaDiscoveryResponse]:
        stream = _DeltaStream(self)
        async for response in self._serve(
            stream, messages, DeltaDiscoveryRequest, stream.on_request
        ):
            assert isinstance(response, DeltaDiscoveryResponse)
            yield response

    async def _serve(
        self,
        stream: _Stream,
        messages: AsyncIterator[Any],
        kind: type[betterproto2.Message],
        handle: _Handler,
    ) -> AsyncIterator[object]:
        """Requests are read by a task of their own, so pushes from ``update`` go out
        while no request is coming in. Over gRPC they arrive as bytes (``ads_wire.Raw``);
        one past ``INLINE_PARSE`` is parsed on the decoding thread: any program may
        connect, a parse of hostile bytes can take seconds (about 5 us a byte at worst),
        and the loop every other client is served from must not wait for it. A client
        that sends what is no request is hung up on."""

        async def read() -> None:
            loop = asyncio.get_running_loop()
            try:
                async for message in messages:
                    if isinstance(message, bytes):
                        try:
                            message = (
                                kind.parse(message)
                                if len(message) <= INLINE_PARSE
                                else await loop.run_in_executor(self._decoding, kind.parse, message)
                            )
                        except Exception:  # whatever betterproto raises on bad bytes
                            break
                    handle(message)
            finally:
                stream.outbox.put_nowait(_END)

        self._streams.add(stream)
        reader = asyncio.create_task(read())
        try:
            while (item := await stream.outbox.get()) is not _END:
                yield item
        finally:
            self._streams.discard(stream)
            reader.cancel()

    async def start(
        self, host: str = "127.0.0.1", port: int = 0, *, ssl: SSLContext | None = None
    ) -> tuple[str, int]:
        """Listen on ``host``:``port`` (0: the kernel picks), over TLS given ``ssl``
        (its ALPN must offer h2); returns where it listens."""
        self._decoding = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ads-decode")
        self._server = CountedServer([self], limits().max_bytes)
        await self._server.start(host, port, ssl=ssl)
        sockets = getattr(self._server._server, "sockets", None) or ()
        bound = sockets[0].getsockname() if sockets else (host, port)
        return str(bound[0]), int(bound[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        self._decoding.shutdown(wait=False, cancel_futures=True)
        for _, _, future in self._waiters:
            future.cancel()
        self._waiters = []


async def serve_forever(
    server: AdsServer,
    host: str,
    port: int,
    on_listening: Callable[[str, int], None],
) -> None:
    """Serve until cancelled (Ctrl-C); ``on_listening`` learns where, once bound."""
    bound = await server.start(host, port)
    try:
        on_listening(*bound)
        await asyncio.Event().wait()
    finally:
        await server.stop()


def bootstrap(address: str, port: int, *, delta: bool = False, node: str = "edge") -> Bootstrap:
    """The bootstrap that points an Envoy at this server: everything over one ADS
    stream to a static HTTP/2 cluster (gRPC needs HTTP/2)."""
    ads = ConfigSource(ads=AggregatedConfigSource(), resource_api_version=ApiVersion.V3)
    api = ApiConfigSourceApiType.DELTA_GRPC if delta else ApiConfigSourceApiType.GRPC
    h2 = HttpProtocolOptions(
        explicit_http_config=HttpProtocolOptionsExplicitHttpConfig(
            http2_protocol_options=Http2ProtocolOptions()
        )
    )
    endpoint = LbEndpoint(
        endpoint=Endpoint(
            address=Address(socket_address=SocketAddress(address=address, port_value=port))
        )
    )
    cluster = Cluster(
        name=XDS_CLUSTER,
        type=ClusterDiscoveryType.STATIC,
        load_assignment=ClusterLoadAssignment(
            cluster_name=XDS_CLUSTER, endpoints=[LocalityLbEndpoints(lb_endpoints=[endpoint])]
        ),
        typed_extension_protocol_options={type_url_of(h2).rsplit("/", 1)[-1]: pack_any(h2)},
    )
    return Bootstrap(
        node=Node(id=node, cluster="edge-verifier"),
        dynamic_resources=BootstrapDynamicResources(
            ads_config=ApiConfigSource(
                api_type=api,
                transport_api_version=ApiVersion.V3,
                grpc_services=[
                    GrpcService(envoy_grpc=GrpcServiceEnvoyGrpc(cluster_name=XDS_CLUSTER))
                ],
                set_node_on_first_message_only=True,
            ),
            cds_config=ads,
            lds_config=ads,
        ),
        static_resources=BootstrapStaticResources(clusters=[cluster]),
    )


# --- what a person running ``edge-verify serve`` is told ----------------------------------


def unservable(snap: Snapshot) -> list[tuple[str, str]]:
    """(field, why) for what Envoy could only reject: secrets whose keys a config_dump
    replaced by ``[redacted]`` (Envoy never prints keys, so a dump cannot be served as is)."""
    return [
        (
            f"secrets[{s.name}]",
            "the key is [redacted], as a config_dump shows it; serve the resources (PATHs) "
            "or xDS with the keys in it",
        )
        for s in snap.secrets
        if REDACTED in json.dumps(to_json_dict(s))
    ]


def _sds_names(node: Json) -> Iterable[str]:
    if isinstance(node, list):
        for item in node:
            yield from _sds_names(item)
    elif isinstance(node, dict):
        for ref in node.get("tls_certificate_sds_secret_configs", []):
            yield str(ref.get("name", ""))
        ref = node.get("validation_context_sds_secret_config")
        if isinstance(ref, dict):
            yield str(ref.get("name", ""))
        for value in node.values():
            yield from _sds_names(value)


def missing_secrets(snap: Snapshot, extra: Sequence[Secret] = ()) -> list[str]:
    """SDS secrets the clusters and listeners name that nobody here serves (the mesh's
    ``default`` and ``ROOTCA`` come from its agent): Envoy waits for them."""
    named = set(_sds_names([to_json_dict(m) for m in (*snap.clusters, *snap.listeners)]))
    return sorted(named - {s.name for s in (*snap.secrets, *extra)})


def serving_banner(snap: Snapshot, host: str, port: int, *, delta: bool) -> str:
    """What is served where, and the bootstrap to give Envoy, as YAML (``envoy -c``)."""
    import yaml

    counts = ", ".join(f"{len(getattr(snap, kind))} {kind}" for kind in _KINDS.values())
    boot = yaml.safe_dump(to_json_dict(bootstrap(host, port, delta=delta)), sort_keys=False)
    flavour = "delta" if delta else "state-of-the-world"
    return (
        f"edge-verify: serving {counts} over ADS (state-of-the-world and delta) on "
        f"{host}:{port}; Ctrl-C stops\n"
        f"edge-verify: an Envoy bootstrap for it ({flavour}; envoy -c FILE):\n{boot.rstrip()}\n"
        "edge-verify: waiting for Envoys to connect"
    )


def answer_line(answer: Answer) -> str:
    """One line per ACK or NACK; a NACK carries the client's message as it sent it,
    escaped: a client is any program that connects, and its words (and its node id)
    must not forge a line of this output or drive the terminal (``printable``)."""
    kind = _KINDS.get(answer.type_url, answer.type_url)
    who = f" from {printable(answer.node, 200)}" if answer.node else ""
    if answer.accepted:
        return f"edge-verify: ACK {kind} version {answer.version}{who}"
    return f"edge-verify: NACK {kind} version {answer.version}{who}: {printable(answer.message)}"
