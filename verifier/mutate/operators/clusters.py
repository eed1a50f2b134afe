"""Mutation operators on clusters and their endpoints: discovery, transport, protocol, identity.

The only equivalence proof for these is an unused cluster: one that no route, listener or
other cluster names (and that no route picks by header or plugin).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Final

from envoy_data_plane.envoy.config.cluster.v3 import (
    Cluster,
    ClusterDiscoveryType,
    ClusterEdsClusterConfig,
)
from envoy_data_plane.envoy.config.core.v3 import (
    Address,
    AggregatedConfigSource,
    ApiVersion,
    ConfigSource,
    Http1ProtocolOptions,
    Http2ProtocolOptions,
    SocketAddress,
    TransportSocket,
)
from envoy_data_plane.envoy.config.endpoint.v3 import (
    ClusterLoadAssignment,
    Endpoint,
    LbEndpoint,
    LocalityLbEndpoints,
)
from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import (
    CertificateValidationContext,
    UpstreamTlsContext,
)
from envoy_data_plane.envoy.extensions.upstreams.http.v3 import (
    HttpProtocolOptions,
    HttpProtocolOptionsExplicitHttpConfig,
)

from verifier.mutate.core import (
    Operator,
    Site,
    with_cluster,
)
from verifier.mutate.proofs import prove_no_http_to_cluster, prove_unused_cluster
from verifier.xds.codec import pack_any, unpack_any
from verifier.xds.snapshot import Snapshot, resource_name

HTTP_OPTIONS: Final = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
TLS_SOCKET: Final = "envoy.transport_sockets.tls"
MADE_UP_ADDRESS: Final = "192.0.2.1"  # TEST-NET-1: routable nowhere
FQDN: Final = re.compile(r"^(?P<svc>[^.]+)\.(?P<ns>[^.]+)\.svc(?P<rest>(\..*)?)$")
SPIFFE: Final = re.compile(r"^(?P<td>spiffe://[^/]+)/ns/(?P<ns>[^/]+)/sa/(?P<sa>[^/]+)$")
_DNS: Final = (ClusterDiscoveryType.STRICT_DNS, ClusterDiscoveryType.LOGICAL_DNS)


def _is_dns(c: Cluster) -> bool:
    return c.cluster_type is None and c.type in _DNS and c.load_assignment is not None


def _cluster_site(
    snap: Snapshot,
    k: int,
    suffix: str,
    detail: str,
    fn: Callable[[Cluster], None],
    endpoints: Callable[[tuple[ClusterLoadAssignment, ...]], tuple[ClusterLoadAssignment, ...]]
    | None = None,
) -> Site:
    name = snap.clusters[k].name
    return Site(f"clusters[{name}]{suffix}", detail, lambda: with_cluster(snap, k, fn, endpoints))


# --- discovery type ------------------------------------------------------------------------------


def _to_eds(made_up: bool) -> Callable[[Snapshot], Iterator[Site]]:
    def sites(snap: Snapshot) -> Iterator[Site]:
        for k, c in enumerate(snap.clusters):
            if not _is_dns(c):
                continue
            port = next((s.port_value or 0 for _, s in _socket_addresses(c)), 80)
            cla = ClusterLoadAssignment(cluster_name=c.name)
            if made_up:
                address = Address(
                    socket_address=SocketAddress(address=MADE_UP_ADDRESS, port_value=port)
                )
                cla.endpoints = [
                    LocalityLbEndpoints(
                        lb_endpoints=[LbEndpoint(endpoint=Endpoint(address=address))]
                    )
                ]

            def endpoints(
                eps: tuple[ClusterLoadAssignment, ...],
                name: str = c.name,
                cla: ClusterLoadAssignment = cla,
            ) -> tuple[ClusterLoadAssignment, ...]:
                return (*(e for e in eps if resource_name(e) != name), cla)

            what = f"{MADE_UP_ADDRESS}:{port}" if made_up else "no endpoints"
            kind = c.type.name if c.type is not None else "DNS"
            yield _cluster_site(
                snap, k, ".type", f"{kind} -> EDS with {what}", _make_eds, endpoints
            )

    return sites


def _make_eds(c: Cluster) -> None:
    c.type = ClusterDiscoveryType.EDS
    c.load_assignment = None
    c.eds_cluster_config = ClusterEdsClusterConfig(
        eds_config=ConfigSource(ads=AggregatedConfigSource(), resource_api_version=ApiVersion.V3)
    )


# --- transport -----------------------------------------------------------------------------------


def _add_tls(snap: Snapshot) -> Iterator[Site]:
    for k, c in enumerate(snap.clusters):
        if c.transport_socket is not None or c.transport_socket_matches:
            continue
        sni = next((s.address for _, s in _socket_addresses(c)), c.name)

        def apply(x: Cluster, sni: str = sni) -> None:
            x.transport_socket = TransportSocket(
                name=TLS_SOCKET, typed_config=pack_any(UpstreamTlsContext(sni=sni))
            )

        yield _cluster_site(
            snap, k, ".transport_socket", f"UpstreamTlsContext (sni {sni}) added", apply
        )


def _no_transport_socket(c: Cluster) -> None:
    c.transport_socket = None


def _drop_tls(snap: Snapshot) -> Iterator[Site]:
    for k, c in enumerate(snap.clusters):
        if c.transport_socket is not None:
            yield _cluster_site(
                snap, k, ".transport_socket", "transport socket dropped", _no_transport_socket
            )


def _http_options(c: Cluster) -> HttpProtocolOptions | None:
    packed = c.typed_extension_protocol_options.get(HTTP_OPTIONS)
    if packed is None:
        return None
    opts = unpack_any(packed)
    return opts if isinstance(opts, HttpProtocolOptions) else None


def _is_h2(c: Cluster) -> bool:
    opts = _http_options(c)
    cfg = opts.explicit_http_config if opts else None
    return cfg is not None and cfg.http2_protocol_options is not None


def _set_protocol(h2: bool) -> Callable[[Cluster], None]:
    def apply(c: Cluster) -> None:
        opts = _http_options(c) or HttpProtocolOptions()
        opts.use_downstream_protocol_config = opts.auto_config = None
        opts.explicit_http_config = (
            HttpProtocolOptionsExplicitHttpConfig(http2_protocol_options=Http2ProtocolOptions())
            if h2
            else HttpProtocolOptionsExplicitHttpConfig(http_protocol_options=Http1ProtocolOptions())
        )
        c.typed_extension_protocol_options[HTTP_OPTIONS] = pack_any(opts)

    return apply


def _force_protocol(h2: bool) -> Callable[[Snapshot], Iterator[Site]]:
    def sites(snap: Snapshot) -> Iterator[Site]:
        for k, c in enumerate(snap.clusters):
            opts = _http_options(c)
            explicit_h1 = (
                opts is not None
                and opts.explicit_http_config is not None
                and opts.explicit_http_config.http_protocol_options is not None
            )
            if (
                h2
                and (explicit_h1 or HTTP_OPTIONS not in c.typed_extension_protocol_options)
                and c.http2_protocol_options is None
            ) or (not h2 and _is_h2(c)):
                target = "HTTP/2" if h2 else "HTTP/1.1"
                yield _cluster_site(
                    snap,
                    k,
                    f".typed_extension_protocol_options[{HTTP_OPTIONS}]",
                    f"upstream protocol forced to {target}",
                    _set_protocol(h2),
                )

    return sites


# --- endpoints of DNS clusters -------------------------------------------------------------------


def _socket_addresses(c: Cluster) -> Iterator[tuple[str, SocketAddress]]:
    if c.load_assignment is None:
        return
    for e, group in enumerate(c.load_assignment.endpoints):
        for i, lb in enumerate(group.lb_endpoints):
            ep = lb.endpoint
            if ep and ep.address and ep.address.socket_address:
                path = f".load_assignment.endpoints[{e}].lb_endpoints[{i}].endpoint.address"
                yield path + ".socket_address", ep.address.socket_address


def _socket_at(c: Cluster, path: str) -> SocketAddress:
    return dict(_socket_addresses(c))[path]


def _names_in(snap: Snapshot, key: str, namespace: str | None = None) -> list[str]:
    names = set()
    for c in snap.clusters:
        for _, s in _socket_addresses(c):
            m = FQDN.match(s.address)
            if m and (namespace is None or m["ns"] == namespace):
                names.add(m[key])
    return sorted(names)


def _other(options: list[str], current: str) -> str:
    rest = [o for o in options if o != current]
    later = [o for o in rest if o > current]
    return (later or rest or [current + "-mutant"])[0]


def _dns_endpoint(what: str) -> Callable[[Snapshot], Iterator[Site]]:
    def sites(snap: Snapshot) -> Iterator[Site]:
        for k, c in enumerate(snap.clusters):
            if not _is_dns(c):
                continue
            for path, s in _socket_addresses(c):
                m = FQDN.match(s.address)
                old_port = new_port = s.port_value or 0
                if what == "port":
                    new_port = old_port + 1 if old_port < 65535 else old_port - 1
                    new = s.address
                elif m is None:
                    continue
                elif what == "namespace":
                    new = f"{m['svc']}.{_other(_names_in(snap, 'ns'), m['ns'])}.svc{m['rest']}"
                else:
                    svc = _other(_names_in(snap, "svc", m["ns"]), m["svc"])
                    new = f"{svc}.{m['ns']}.svc{m['rest']}"

                def apply(
                    x: Cluster, path: str = path, new: str = new, port: int = new_port
                ) -> None:
                    sock = _socket_at(x, path)
                    sock.address, sock.port_value = new, port

                yield _cluster_site(
                    snap, k, path, f"{s.address}:{old_port} -> {new}:{new_port}", apply
                )

    return sites


# --- mesh identities -----------------------------------------------------------------------------


def _tls(c: Cluster) -> UpstreamTlsContext | None:
    ts = c.transport_socket
    if ts is None or ts.typed_config is None:
        return None
    ctx = unpack_any(ts.typed_config)
    return ctx if isinstance(ctx, UpstreamTlsContext) else None


def _validation(ctx: UpstreamTlsContext) -> tuple[str, CertificateValidationContext] | None:
    """The validation context of a TLS context, and its path below ``common_tls_context``."""
    common = ctx.common_tls_context
    if common is None:
        return None
    combined = common.combined_validation_context
    if combined is not None and combined.default_validation_context is not None:
        return "combined_validation_context.default_validation_context", (
            combined.default_validation_context
        )
    if common.validation_context is not None:
        return "validation_context", common.validation_context
    return None


def _spiffe_matchers(c: Cluster) -> Iterator[tuple[str, int, re.Match[str]]]:
    """SPIFFE URIs a cluster's TLS context accepts: (path, index, parts)."""
    ctx = _tls(c)
    found = _validation(ctx) if ctx else None
    if found is None:
        return
    where, vc = found
    base = (
        f".transport_socket.typed_config.common_tls_context.{where}.match_typed_subject_alt_names"
    )
    for i, san in enumerate(vc.match_typed_subject_alt_names):
        exact = san.matcher.exact if san.matcher else None
        m = SPIFFE.match(exact or "")
        if m:
            yield f"{base}[{i}].matcher.exact", i, m


def _set_san(i: int, new: str) -> Callable[[Cluster], None]:
    def apply(c: Cluster) -> None:
        ctx = _tls(c)
        found = _validation(ctx) if ctx else None
        assert ctx is not None and found is not None and c.transport_socket is not None
        matcher = found[1].match_typed_subject_alt_names[i].matcher
        assert matcher is not None
        matcher.exact = new
        c.transport_socket.typed_config = pack_any(ctx)

    return apply


def _mesh_san(part: str) -> Callable[[Snapshot], Iterator[Site]]:
    def sites(snap: Snapshot) -> Iterator[Site]:
        spiffes = [m for c in snap.clusters for _, _, m in _spiffe_matchers(c)]
        namespaces = sorted({x["ns"] for x in spiffes} | set(_names_in(snap, "ns")))
        for k, c in enumerate(snap.clusters):
            for path, i, m in _spiffe_matchers(c):
                ns, sa = m["ns"], m["sa"]
                if part == "ns":
                    ns = _other(namespaces, ns)
                else:
                    sa = _other(sorted({x["sa"] for x in spiffes if x["ns"] == ns}), sa)
                new = f"{m['td']}/ns/{ns}/sa/{sa}"
                yield _cluster_site(snap, k, path, f"SAN {m.group(0)} -> {new}", _set_san(i, new))

    return sites


OPERATORS: tuple[Operator, ...] = (
    Operator(
        "dns-to-eds-empty",
        "A STRICT_DNS/LOGICAL_DNS cluster turned into EDS with an empty assignment: the "
        "backend has no endpoints (503). The backend resolution rule should catch it. "
        "Equivalent only when no route, listener or cluster uses the cluster, or when "
        "its Service has no ready endpoint either (503 both ways).",
        _to_eds(made_up=False),
        prove_unused_cluster,
    ),
    Operator(
        "dns-to-eds-made-up",
        f"A DNS cluster turned into EDS with a made-up endpoint ({MADE_UP_ADDRESS}). "
        "The backend resolution rule should catch it. Equivalent only when the cluster is unused.",
        _to_eds(made_up=True),
        prove_unused_cluster,
    ),
    Operator(
        "add-upstream-tls",
        "An UpstreamTlsContext added to a cleartext cluster: TLS to a plaintext backend. "
        "The backend protocol rule should catch it. Equivalent when the cluster is unused.",
        _add_tls,
        prove_unused_cluster,
    ),
    Operator(
        "drop-transport-socket",
        "A cluster's transport socket (mesh mTLS) dropped: plaintext to a mesh backend. "
        "The mesh backend rule should catch it. Equivalent when the cluster is unused.",
        _drop_tls,
        prove_unused_cluster,
    ),
    Operator(
        "force-http2",
        "An HTTP/1.1 cluster forced to HTTP/2 (h2c) upstream. The backend protocol rule "
        "should catch it. Equivalent when the cluster is unused, or only plain tcp_proxy "
        "filters use it (a sidecar's passthrough or inbound cluster): no HTTP is spoken there.",
        _force_protocol(h2=True),
        prove_no_http_to_cluster,
    ),
    Operator(
        "force-http1",
        "An HTTP/2 (appProtocol h2c) cluster forced to HTTP/1.1. The backend protocol rule "
        "should catch it. Equivalent when the cluster is unused or used by tcp_proxy only.",
        _force_protocol(h2=False),
        prove_no_http_to_cluster,
    ),
    Operator(
        "dns-wrong-namespace",
        "A DNS endpoint's FQDN points at the same service in another namespace. The "
        "backend reference rule should catch it. Equivalent when the cluster is unused.",
        _dns_endpoint("namespace"),
        prove_unused_cluster,
    ),
    Operator(
        "dns-wrong-service",
        "A DNS endpoint's FQDN points at another service. The backend reference rule "
        "should catch it. Equivalent when the cluster is unused.",
        _dns_endpoint("service"),
        prove_unused_cluster,
    ),
    Operator(
        "dns-wrong-port",
        "A DNS endpoint's port off by one. The backend port rule should catch it. "
        "Equivalent when the cluster is unused.",
        _dns_endpoint("port"),
        prove_unused_cluster,
    ),
    Operator(
        "mesh-wrong-san-namespace",
        "A mesh cluster's expected SPIFFE SAN names another namespace: wrong identity "
        "accepted. The mesh backend rule should catch it. Equivalent when unused.",
        _mesh_san("ns"),
        prove_unused_cluster,
    ),
    Operator(
        "mesh-wrong-san-account",
        "A mesh cluster's expected SPIFFE SAN names another service account. The mesh "
        "backend rule should catch it. Equivalent when unused.",
        _mesh_san("sa"),
        prove_unused_cluster,
    ),
)
