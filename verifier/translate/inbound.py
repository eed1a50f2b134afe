"""A sidecar's inbound side: mesh mTLS terminated on :15008, then the application.

Every mesh client (the edge, other sidecars) dials a workload's :15008 whatever
Service port it meant, with the SNI ``clusters.mesh_sni`` names: the Service, and
its port when it has several. So the inbound listener has one filter chain per
SNI, for each port of each Service that selects the workload, and sends the
connection's bytes, once TLS is off, to that port's targetPort on loopback. The
client must present a certificate of the trust domain (any workload of the mesh
may call; which ones may is policy, not routing). An SNI no chain names is
refused: never guessed to another port.
"""

from __future__ import annotations

from envoy_data_plane.envoy.config.cluster.v3 import Cluster
from envoy_data_plane.envoy.config.core.v3 import Address, SocketAddress, TransportSocket
from envoy_data_plane.envoy.config.listener.v3 import (
    FilterChain,
    FilterChainMatch,
    Listener,
    ListenerFilter,
)
from envoy_data_plane.envoy.extensions.filters.listener.tls_inspector.v3 import TlsInspector
from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import DownstreamTlsContext
from envoy_data_plane.envoy.type.matcher.v3 import StringMatcher
from envoy_data_plane.google.protobuf import Any

from verifier.gatewayapi import mesh_attach as mesh
from verifier.gatewayapi import model as m
from verifier.gatewayapi.resources import Resources
from verifier.gatewayapi.workloads import target_port
from verifier.translate import clusters as cl
from verifier.translate.listeners import TLS_INSPECTOR, tcp_proxy_filter
from verifier.translate.names import INBOUND, inbound_cluster_name, service_port_name
from verifier.xds.codec import new

# Where the application listens, seen from its sidecar in the same pod.
APPLICATION_ADDRESS = "127.0.0.1"


def _tls(trust_domain: str) -> TransportSocket:
    context = new(
        DownstreamTlsContext,
        common_tls_context=cl.mesh_tls([new(StringMatcher, prefix=f"spiffe://{trust_domain}/")]),
        require_client_certificate=True,
    )
    return new(TransportSocket, name="envoy.transport_sockets.tls", typed_config=Any.pack(context))


def inbound(
    res: Resources, wl: m.Workload, trust_domain: str
) -> tuple[Listener | None, list[Cluster]]:
    """The inbound listener and the application clusters it forwards to; no listener
    when no Service port reaches the workload (Envoy refuses one with no chain)."""
    chains: list[FilterChain] = []
    targets: set[int] = set()
    for svc in mesh.selecting_services(res, wl):
        ns, name = svc.meta.key
        for port in svc.ports:
            target = target_port(port, wl)
            if target is None or port.protocol != "TCP":
                continue  # the pods have no such port: nothing reaches them on it
            targets.add(target)
            match = new(FilterChainMatch, server_names=[cl.mesh_sni(res, ns, name, port.port)])
            chains.append(
                new(
                    FilterChain,
                    name=f"{INBOUND}/{service_port_name(ns, name, port.port)}",
                    filter_chain_match=match,
                    transport_socket=_tls(trust_domain),
                    filters=[tcp_proxy_filter(inbound_cluster_name(target))],
                )
            )
    clusters = [
        cl.static_cluster(inbound_cluster_name(t), APPLICATION_ADDRESS, t) for t in sorted(targets)
    ]
    if not chains:
        return None, clusters
    listener = new(
        Listener,
        name=INBOUND,
        address=new(
            Address,
            socket_address=new(SocketAddress, address="0.0.0.0", port_value=cl.MESH_PORT),
        ),
        filter_chains=chains,
        # server_names match only once the TLS inspector has read the ClientHello.
        listener_filters=[
            new(ListenerFilter, name=TLS_INSPECTOR, typed_config=Any.pack(new(TlsInspector)))
        ],
    )
    return listener, clusters
