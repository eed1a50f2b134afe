"""The aether sidecar's xDS for one workload of a mesh-registered namespace.

Pure, like the edge's translator, and built from the same pieces: the clusters
(``clusters.ClusterCollector``: a mesh-registered backend over mTLS to its pods'
:15008, any other over cleartext STRICT_DNS), the routes (``routes.build_routes``:
every HTTPRoute feature the edge supports) and the HTTP connection manager. What
is the sidecar's own (docs/mesh.md):

* ``outbound`` on 0.0.0.0:15001, where the capture sends the workload's outbound
  TCP, with the ``original_dst`` listener filter to restore where it was going. A
  filter chain per captured Service ClusterIP and port (``<ns>/<svc>/<port>``,
  matched on ``<ClusterIP>/32`` and the port) routes over RDS
  (``outbound/<ns>/<svc>/<port>``) by the mesh routes that apply to this client
  (``mesh_attach.routes_for``), or, when none does, to the Service itself. Anything
  else takes the default chain to the ORIGINAL_DST cluster ``passthrough``.
* ``inbound`` on 0.0.0.0:15008 (``verifier.translate.inbound``).

Mesh routes' hostnames select nothing, so every route table has one virtual host
for any Host; its routes are in the spec's precedence (``order.route_key``, with
no hostname to rank).
"""

from __future__ import annotations

import ipaddress

from envoy_data_plane.envoy.config.core.v3 import Address, CidrRange, SocketAddress
from envoy_data_plane.envoy.config.listener.v3 import (
    FilterChain,
    FilterChainMatch,
    Listener,
    ListenerFilter,
)
from envoy_data_plane.envoy.config.route.v3 import Route, RouteConfiguration, VirtualHost
from envoy_data_plane.envoy.extensions.filters.listener.original_dst.v3 import OriginalDst
from envoy_data_plane.google.protobuf import Any

from verifier.gatewayapi import mesh_attach as mesh
from verifier.gatewayapi import model as m
from verifier.gatewayapi.resources import Resources
from verifier.translate import TranslateOptions
from verifier.translate import clusters as cl
from verifier.translate.inbound import inbound
from verifier.translate.listeners import hcm_filter, tcp_proxy_filter
from verifier.translate.names import (
    OUTBOUND,
    OUTBOUND_PORT,
    outbound_route_config_name,
    service_port_name,
)
from verifier.translate.order import route_key
from verifier.translate.routes import RouteSource, build_routes, service_route
from verifier.xds.codec import new
from verifier.xds.snapshot import Snapshot

ORIGINAL_DST = "envoy.filters.listener.original_dst"
ANY_HOST = "*"


def _routes(
    attached: list[mesh.MeshAttachment],
    graph: mesh.MeshGraph,
    collector: cl.ClusterCollector,
) -> list[Route]:
    """The applicable mesh routes' (rule, match) pairs in precedence order."""
    entries = []
    for a in attached:
        for rule in a.route.rules:
            for i, match in enumerate(rule.matches):
                key = route_key((ANY_HOST,), ANY_HOST, a.route, rule, match, i)
                entries.append((key, RouteSource(a.route, rule, match, i, a.port.port, "http")))
    entries.sort(key=lambda e: e[0])
    sources = [src for _key, src in entries]
    return build_routes(sources, graph.backends, graph.mirrors, collector.name_for)


def _route_config(
    wl: m.Workload,
    svc: m.Service,
    port: m.ServicePort,
    graph: mesh.MeshGraph,
    collector: cl.ClusterCollector,
) -> RouteConfiguration | None:
    """The route table of one captured Service port; None when nothing applies and the
    port is not one the sidecar speaks HTTP on (its traffic passes through)."""
    ns, name = svc.meta.key
    label = service_port_name(ns, name, port.port)
    attached = mesh.routes_for(graph, wl.meta.namespace, (ns, name, port.port))
    if attached:
        routes = _routes(attached, graph, collector)
    else:
        itself = mesh.service_backend(svc, port)
        if itself is None:
            return None
        routes = [service_route(f"{label}/default", itself, collector.name_for)]
    vhost = new(VirtualHost, name=label, domains=[ANY_HOST], routes=routes)
    # Invalid-backend shares point at a cluster that is deliberately absent.
    return new(
        RouteConfiguration,
        name=outbound_route_config_name(ns, name, port.port),
        virtual_hosts=[vhost],
        validate_clusters=False,
    )


def _chain(svc: m.Service, port: m.ServicePort, route_config: str) -> FilterChain:
    address = mesh.frontend(svc)
    assert address is not None  # captured Services have one
    bits = ipaddress.ip_address(address).max_prefixlen
    match = new(
        FilterChainMatch,
        prefix_ranges=[new(CidrRange, address_prefix=address, prefix_len=bits)],
        destination_port=port.port,
    )
    return new(
        FilterChain,
        name=service_port_name(*svc.meta.key, port.port),
        filter_chain_match=match,
        filters=[hcm_filter(port.port, route_config)],
    )


def _outbound(chains: list[FilterChain]) -> Listener:
    passthrough = new(FilterChain, name=cl.PASSTHROUGH, filters=[tcp_proxy_filter(cl.PASSTHROUGH)])
    return new(
        Listener,
        name=OUTBOUND,
        address=new(
            Address, socket_address=new(SocketAddress, address="0.0.0.0", port_value=OUTBOUND_PORT)
        ),
        listener_filters=[
            new(ListenerFilter, name=ORIGINAL_DST, typed_config=Any.pack(new(OriginalDst)))
        ],
        filter_chains=chains,
        default_filter_chain=passthrough,
    )


def translate_sidecar(
    res: Resources, graph: mesh.MeshGraph, wl: m.Workload, opts: TranslateOptions | None = None
) -> Snapshot:
    """The xDS of ``wl``'s sidecar; deterministic for the same input. The caller has
    made sure the workload has one (``mesh_attach.has_sidecar``)."""
    opts = opts or TranslateOptions()
    collector = cl.ClusterCollector(res, opts.mesh_registry, opts.trust_domain)
    chains: list[FilterChain] = []
    route_configs: list[RouteConfiguration] = []
    seen: set[tuple[str, int]] = set()
    for svc in mesh.captured_services(res, opts.mesh_registry, wl):
        for port in svc.ports:
            frontend = (mesh.frontend(svc) or "", port.port)
            if port.protocol != "TCP" or frontend in seen:
                continue  # one chain per address and port: a ClusterIP is never shared
            rc = _route_config(wl, svc, port, graph, collector)
            if rc is None:
                continue
            seen.add(frontend)
            route_configs.append(rc)
            chains.append(_chain(svc, port, rc.name))
    listener, app_clusters = inbound(res, wl, opts.trust_domain)
    clusters = {**collector.clusters, cl.PASSTHROUGH: cl.passthrough_cluster()}
    clusters.update((c.name, c) for c in app_clusters)
    return Snapshot(
        clusters=tuple(clusters.values()),
        endpoints=tuple(collector.endpoints.values()),
        listeners=(_outbound(chains), *((listener,) if listener is not None else ())),
        routes=tuple(route_configs),
    )
