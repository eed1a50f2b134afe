"""Mutation operators for a sidecar's xDS: the mesh mistakes of docs/mesh.md.

They find their sites by the shapes a sidecar has, read from xDS alone: an outbound
listener restores original destinations (the ``original_dst`` listener filter) and has
one filter chain per destination ClusterIP and port, each naming its route table over
RDS, and a default chain passing anything else through; mesh clusters dial the pods'
tunnel port over mTLS with SPIFFE SAN matchers; an inbound listener terminates mTLS
per SNI and proxies to a local cluster. On an edge's xDS most of them find no site.

``foreign_route_tables(peers)`` is the one operator that needs more than the snapshot:
another client's sidecar xDS, whose route table for the same Service port replaces
this one's (a consumer route leaking into another namespace, or a producer route
kept where the client's namespace has its own). Without peers it has no site.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Final

from envoy_data_plane.envoy.config.cluster.v3 import Cluster
from envoy_data_plane.envoy.config.listener.v3 import Filter, FilterChain, Listener
from envoy_data_plane.envoy.config.route.v3 import RouteConfiguration
from envoy_data_plane.envoy.extensions.filters.network.http_connection_manager.v3 import (
    HttpConnectionManager,
)
from envoy_data_plane.envoy.extensions.filters.network.tcp_proxy.v3 import TcpProxy

from verifier.mutate.core import Mutant, Operator, Site, find_named, with_listener
from verifier.mutate.scope import facts
from verifier.xds.codec import XdsLoadError, pack_any, unpack_any
from verifier.xds.snapshot import Snapshot, resource_name

ORIGINAL_DST_FILTER: Final = "envoy.filters.listener.original_dst"
MESH_PORT: Final = 15008
SPIFFE: Final = re.compile(r"^spiffe://(?P<td>[^/]+)/ns/(?P<ns>[^/]+)/sa/(?P<sa>[^/]+)$")
OTHER_TRUST_DOMAIN: Final = "mutant.invalid"

# --- reading a sidecar's shapes ------------------------------------------------------------------


def _unpacked(f: Filter) -> object | None:
    if f.typed_config is None:
        return None
    try:
        return unpack_any(f.typed_config)
    except XdsLoadError:
        return None


def _restores_destination(li: Listener) -> bool:
    return any(
        f.name == ORIGINAL_DST_FILTER
        or (f.typed_config is not None and f.typed_config.type_url.endswith(".OriginalDst"))
        for f in li.listener_filters
    )


def _rds_name(chain: FilterChain) -> str | None:
    for f in chain.filters:
        hcm = _unpacked(f)
        if isinstance(hcm, HttpConnectionManager) and hcm.rds is not None:
            return hcm.rds.route_config_name
    return None


def tcp_cluster(chain: FilterChain | None) -> str | None:
    for f in chain.filters if chain is not None else ():
        tcp = _unpacked(f)
        if isinstance(tcp, TcpProxy) and tcp.cluster:
            return tcp.cluster
    return None


def _destination(chain: FilterChain) -> tuple[str, int] | None:
    """The one ClusterIP and port an outbound chain matches."""
    fcm = chain.filter_chain_match
    if fcm is None or len(fcm.prefix_ranges) != 1 or fcm.destination_port is None:
        return None
    return fcm.prefix_ranges[0].address_prefix, fcm.destination_port


def _outbound(
    snap: Snapshot,
) -> Iterator[tuple[int, Listener, list[tuple[int, str, tuple[str, int]]]]]:
    """Each listener restoring original destinations, with its (index, RDS name,
    destination) chains."""
    for k, li in enumerate(snap.listeners):
        if not _restores_destination(li):
            continue
        chains = []
        for c, chain in enumerate(li.filter_chains):
            name, dest = _rds_name(chain), _destination(chain)
            if name is not None and dest is not None:
                chains.append((c, name, dest))
        yield k, li, chains


def chain_path(li: Listener, c: int, suffix: str = "") -> str:
    return f"listeners[{li.name}].filter_chains[{c}]{suffix}"


def listener_site(
    snap: Snapshot, k: int, path: str, detail: str, fn: Callable[[Listener], None]
) -> Site:
    return Site(path, detail, lambda: with_listener(snap, k, fn))


# --- outbound: a route on the wrong Service, or on the wrong port ---------------------------------


def _set_rds(c: int, name: str) -> Callable[[Listener], None]:
    def apply(li: Listener) -> None:
        chain = li.filter_chains[c]
        for f in chain.filters:
            hcm = _unpacked(f)
            if isinstance(hcm, HttpConnectionManager) and hcm.rds is not None:
                hcm.rds.route_config_name = name
                f.typed_config = pack_any(hcm)

    return apply


def _other_routes(same_service: bool) -> Callable[[Snapshot], Iterator[Site]]:
    """Each chain given the route table of another chain: of the same ClusterIP on
    another port (``same_service``), else of another ClusterIP, on the same port when
    there is one."""

    def sites(snap: Snapshot) -> Iterator[Site]:
        for k, li, chains in _outbound(snap):
            for c, name, (ip, port) in chains:
                others = [
                    (n, d) for _c, n, d in chains if n != name and (d[0] == ip) == same_service
                ]
                others.sort(key=lambda x: (x[1][1] != port, x[1], x[0]))
                if not others:
                    continue
                new, (oip, oport) = others[0]
                yield listener_site(
                    snap,
                    k,
                    chain_path(li, c, ".filters[0].rds.route_config_name"),
                    f"{ip}:{port} routed over {new} (the route table of {oip}:{oport})",
                    _set_rds(c, new),
                )

    return sites


def _swap_ips(a: int, b: int) -> Callable[[Listener], None]:
    def apply(li: Listener) -> None:
        fa, fb = li.filter_chains[a].filter_chain_match, li.filter_chains[b].filter_chain_match
        assert fa is not None and fb is not None
        fa.prefix_ranges, fb.prefix_ranges = fb.prefix_ranges, fa.prefix_ranges

    return apply


def _swap_cluster_ips(snap: Snapshot) -> Iterator[Site]:
    for k, li, chains in _outbound(snap):
        for i, (a, _name, (ip, port)) in enumerate(chains):
            b = next((c for c, _n, d in chains[i + 1 :] if d[1] == port and d[0] != ip), None)
            if b is None:
                continue
            other = _destination(li.filter_chains[b])
            assert other is not None
            yield listener_site(
                snap,
                k,
                chain_path(li, a, ".filter_chain_match.prefix_ranges"),
                f"chains for {ip}:{port} and {other[0]}:{port} swap their ClusterIPs",
                _swap_ips(a, b),
            )


def _without_chain(c: int) -> Callable[[Listener], None]:
    def apply(li: Listener) -> None:
        del li.filter_chains[c]

    return apply


def _drop_outbound_chain(snap: Snapshot) -> Iterator[Site]:
    for k, li, chains in _outbound(snap):
        for c, _name, (ip, port) in chains:
            detail = f"chain for {ip}:{port} removed: the default chain passes it through"
            yield listener_site(snap, k, chain_path(li, c), detail, _without_chain(c))


CHAIN_RDS: Final = re.compile(
    r"^listeners\[(?P<name>[^\[\]]*)\]\.filter_chains\[(?P<chain>\d+)\]\.filters\[0\]\.rds"
)


def _nameless(rc: RouteConfiguration) -> RouteConfiguration:
    out = copy.deepcopy(rc)
    out.name = ""
    for vh in out.virtual_hosts:
        vh.name = ""
    return out


def prove_same_route_table(original: Snapshot, mutant: Mutant) -> bool:
    """The chain now routes over a table that differs from its own only in its name and
    its virtual hosts' names, and no header formatter can reveal them (a producer route
    without ``parentRef.port`` makes the same table for every port of its Service)."""
    m = CHAIN_RDS.match(mutant.xds_path)
    after = mutant.snapshot
    if m is None or (original.routes, original.clusters, original.endpoints) != (
        after.routes,
        after.clusters,
        after.endpoints,
    ):
        return False
    k, c = find_named(original.listeners, m["name"]), int(m["chain"])
    if k is None or len(original.listeners) != len(after.listeners):
        return False
    pairs = enumerate(zip(original.listeners, after.listeners, strict=True))
    if any(a != b for i, (a, b) in pairs if i != k):
        return False
    old_li, new_li = original.listeners[k], after.listeners[k]
    if c >= len(old_li.filter_chains) or len(old_li.filter_chains) != len(new_li.filter_chains):
        return False
    old, new = _rds_name(old_li.filter_chains[c]), _rds_name(new_li.filter_chains[c])
    if old is None or new is None:
        return False
    restored = copy.deepcopy(new_li)
    _set_rds(c, old)(restored)
    if restored != old_li or facts(original).formatters:
        return False
    tables = [rc for rc in original.routes if rc.name in (old, new)]
    return len(tables) == 2 and _nameless(tables[0]) == _nameless(tables[1])


# --- outbound: the passthrough ---------------------------------------------------------------


def _no_default_chain(li: Listener) -> None:
    li.default_filter_chain = None


def _drop_default_chain(snap: Snapshot) -> Iterator[Site]:
    for k, li, _chains in _outbound(snap):
        if li.default_filter_chain is not None:
            path = f"listeners[{li.name}].default_filter_chain"
            yield listener_site(snap, k, path, "default chain removed", _no_default_chain)


def _no_original_dst(li: Listener) -> None:
    li.listener_filters = [
        f
        for f in li.listener_filters
        if not (
            f.name == ORIGINAL_DST_FILTER
            or (f.typed_config is not None and f.typed_config.type_url.endswith(".OriginalDst"))
        )
    ]


def _drop_original_dst(snap: Snapshot) -> Iterator[Site]:
    for k, li, _chains in _outbound(snap):
        path = f"listeners[{li.name}].listener_filters"
        yield listener_site(snap, k, path, "original_dst listener filter removed", _no_original_dst)


def _set_tcp_cluster(name: str) -> Callable[[Listener], None]:
    def apply(li: Listener) -> None:
        chain = li.default_filter_chain
        assert chain is not None
        for f in chain.filters:
            tcp = _unpacked(f)
            if isinstance(tcp, TcpProxy):
                tcp.cluster = name
                f.typed_config = pack_any(tcp)

    return apply


def _retarget_passthrough(snap: Snapshot) -> Iterator[Site]:
    for k, li, _chains in _outbound(snap):
        old = tcp_cluster(li.default_filter_chain)
        routed = sorted({c.name for c in snap.clusters} - {old or ""})
        if old is None or not routed:
            continue
        path = f"listeners[{li.name}].default_filter_chain.filters[0].cluster"
        detail = f"passthrough to {old} -> {routed[0]}"
        yield listener_site(snap, k, path, detail, _set_tcp_cluster(routed[0]))


# --- another client's route table ----------------------------------------------------------------


def _eds_name(c: Cluster) -> str:
    return (c.eds_cluster_config.service_name if c.eds_cluster_config else "") or c.name


def _foreign_builder(snap: Snapshot, i: int, peer: Snapshot, name: str) -> Callable[[], Snapshot]:
    """``snap`` with route configuration ``i`` replaced by ``peer``'s of that name, and
    the clusters (and their endpoints) it sends to that ``snap`` lacks, as a translator
    that built the table for the other client would have written them."""

    def build() -> Snapshot:
        theirs = next(rc for rc in peer.routes if rc.name == name)
        routes = list(snap.routes)
        routes[i] = theirs
        have = {c.name for c in snap.clusters}
        added = [c for c in peer.clusters if c.name not in have]
        names = {_eds_name(c) for c in added}
        have_eps = {resource_name(e) for e in snap.endpoints}
        eps = [
            e
            for e in peer.endpoints
            if resource_name(e) in names and resource_name(e) not in have_eps
        ]
        return dataclasses.replace(
            snap,
            routes=tuple(routes),
            clusters=(*snap.clusters, *added),
            endpoints=(*snap.endpoints, *eps),
        )

    return build


def foreign_route_tables(peers: Mapping[str, Snapshot]) -> Callable[[Snapshot], Iterator[Site]]:
    """Each route table replaced by the first peer's of the same name that differs."""

    def sites(snap: Snapshot) -> Iterator[Site]:
        for i, rc in enumerate(snap.routes):
            for who, peer in sorted(peers.items()):
                theirs = next((x for x in peer.routes if x.name == rc.name), None)
                if theirs is not None and theirs != rc:
                    detail = f"route table {rc.name} of the sidecar of {who}"
                    yield Site(
                        f"routes[{rc.name}]", detail, _foreign_builder(snap, i, peer, rc.name)
                    )
                    break

    return sites


FOREIGN_ROUTE_TABLE: Final = "foreign-route-table"
FOREIGN_DOC: Final = (
    "A route table replaced by another client's sidecar's for the same Service port "
    "(with the clusters it needs): a consumer route leaking into another namespace, or a "
    "producer route kept where the client's namespace has a consumer route of its own. "
    "mesh-consumer-route should catch it. Mutated only beside the other sidecars of the "
    "scenario, where the two tables differ; never proven equivalent."
)


def with_peers(peers: Mapping[str, Snapshot]) -> Operator:
    """The foreign-route-table operator, given the other sidecars' xDS by workload."""
    return Operator(FOREIGN_ROUTE_TABLE, FOREIGN_DOC, foreign_route_tables(peers))


OPERATORS: tuple[Operator, ...] = (
    Operator(
        "chain-other-service-routes",
        "An outbound filter chain (one Service's ClusterIP and port) routing over another "
        "Service's route table: a route on the wrong Service. mesh-cluster-ip-matching "
        "should catch it. Equivalent when the two tables differ only in their names.",
        _other_routes(same_service=False),
        prove_same_route_table,
    ),
    Operator(
        "chain-other-port-routes",
        "An outbound filter chain routing over the route table of another port of the "
        "same Service: parentRef.port ignored. mesh-cluster-ip-matching should catch it. "
        "Equivalent when the two tables differ only in their names (a producer route "
        "without parentRef.port makes the same table for every port).",
        _other_routes(same_service=True),
        prove_same_route_table,
    ),
    Operator(
        "swap-chain-cluster-ips",
        "Two outbound filter chains of one port exchange their ClusterIPs: each Service's "
        "traffic takes the other's routes. mesh-cluster-ip-matching should catch it. "
        "Never proven equivalent.",
        _swap_cluster_ips,
    ),
    Operator(
        "drop-outbound-chain",
        "An outbound filter chain removed: the passthrough swallows that Service's "
        "traffic (no route applies, and a mesh Service is reached in cleartext). The mesh "
        "routing rules and mesh-mtls (a mesh frontend passed through) should catch it. "
        "Never proven equivalent.",
        _drop_outbound_chain,
    ),
    Operator(
        "drop-default-chain",
        "The outbound listener's default filter chain removed: a captured destination no "
        "chain names is refused instead of passed through. mesh-passthrough should catch "
        "it. Never proven equivalent.",
        _drop_default_chain,
    ),
    Operator(
        "retarget-passthrough",
        "The default chain's tcp_proxy sent to another cluster instead of the ORIGINAL_DST "
        "passthrough: uncaptured traffic reaches a Service it was not sent to. "
        "mesh-passthrough should catch it. Never proven equivalent.",
        _retarget_passthrough,
    ),
    Operator(
        "drop-original-dst-filter",
        "The original_dst listener filter removed: redirected connections lose their "
        "destination and match no chain. The mesh routing rules and mesh-passthrough "
        "should catch it. Never proven equivalent.",
        _drop_original_dst,
    ),
    Operator(FOREIGN_ROUTE_TABLE, FOREIGN_DOC, lambda snap: iter(())),
)
