"""Gateway listeners on one port to one Envoy listener.

HTTP listeners share one filter chain; HTTPS listeners get a filter chain
each, chosen by SNI from the listener hostname and terminating TLS with the
listener's certificateRefs, named over SDS (``<namespace>/<name>``). Every
chain uses a RouteConfiguration over RDS, where virtual hosts keep the
listeners apart by Host. The Envoy listener is
bound to its Gateway's address (per-Gateway addressing) or to 0.0.0.0 (shared),
and names its Gateway in ``aether.io/gateway`` metadata, for people and tools
(the models never read it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from envoy_data_plane.envoy.config.core.v3 import (
    Address,
    DataSource,
    Metadata,
    SocketAddress,
    TransportSocket,
)
from envoy_data_plane.envoy.config.listener.v3 import (
    Filter,
    FilterChain,
    FilterChainMatch,
    Listener,
    ListenerFilter,
)
from envoy_data_plane.envoy.extensions.filters.http.cors.v3 import Cors
from envoy_data_plane.envoy.extensions.filters.http.router.v3 import Router
from envoy_data_plane.envoy.extensions.filters.listener.tls_inspector.v3 import TlsInspector
from envoy_data_plane.envoy.extensions.filters.network.http_connection_manager.v3 import (
    HttpConnectionManager,
    HttpConnectionManagerCodecType,
    HttpConnectionManagerUpgradeConfig,
    HttpFilter,
    Rds,
)
from envoy_data_plane.envoy.extensions.filters.network.tcp_proxy.v3 import TcpProxy
from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import (
    CertificateValidationContext,
    CertificateValidationContextTrustChainVerification,
    CommonTlsContext,
    DownstreamTlsContext,
    SdsSecretConfig,
    Secret,
    TlsCertificate,
)
from envoy_data_plane.google.protobuf import Any, Struct

from verifier.gatewayapi import model as m
from verifier.gatewayapi.attach import ClientCa
from verifier.gatewayapi.resources import Resources
from verifier.translate.clusters import ads
from verifier.translate.names import (
    certificate_secret_name,
    https_route_config_name,
    listener_owner,
)
from verifier.translate.routes import CORS_FILTER
from verifier.xds.codec import new

HCM_FILTER = "envoy.filters.network.http_connection_manager"
GATEWAY_METADATA_KEY = "aether.io/gateway"
TLS_INSPECTOR = "envoy.filters.listener.tls_inspector"
TCP_PROXY = "envoy.filters.network.tcp_proxy"


def _hcm(port: int, route_config: str) -> HttpConnectionManager:
    return new(
        HttpConnectionManager,
        stat_prefix=route_config,
        codec_type=HttpConnectionManagerCodecType.AUTO,
        rds=new(Rds, config_source=ads(), route_config_name=route_config),
        http_filters=[
            new(HttpFilter, name=CORS_FILTER, typed_config=Any.pack(new(Cors))),
            new(HttpFilter, name="envoy.filters.http.router", typed_config=Any.pack(new(Router))),
        ],
        normalize_path=True,
        use_remote_address=True,
        # WebSocket upgrades only where a route's backend speaks it (appProtocol).
        upgrade_configs=[
            new(HttpConnectionManagerUpgradeConfig, upgrade_type="websocket", enabled=False)
        ],
    )


def hcm_filter(port: int, route_config: str) -> Filter:
    """The HTTP connection manager of every HTTP filter chain, the edge's and the
    sidecars' outbound ones: RDS ``route_config``, CORS then the router."""
    return new(Filter, name=HCM_FILTER, typed_config=Any.pack(_hcm(port, route_config)))


def tcp_proxy_filter(cluster: str) -> Filter:
    """Bytes to ``cluster`` as they come: a sidecar's passthrough and inbound chains."""
    proxy = new(TcpProxy, stat_prefix=cluster, cluster=cluster)
    return new(Filter, name=TCP_PROXY, typed_config=Any.pack(proxy))


def _certificates(
    res: Resources, gw: m.Gateway, lst: m.GatewayListener
) -> Iterator[tuple[str, m.Secret]]:
    """(SDS name, Secret) of each certificateRef that names a Secret we have."""
    for ref in lst.certificate_refs:
        key = (ref.namespace or gw.meta.namespace, ref.name)
        secret = res.secrets.get(key)
        if secret is not None:
            yield certificate_secret_name(*key), secret


def listener_secrets(
    listeners: Iterable[tuple[m.Gateway, m.GatewayListener]], res: Resources
) -> dict[str, Secret]:
    """The SDS secrets the HTTPS listeners name, as the agent serves them.

    Keys travel by SDS, as in production, rather than inline in the listener: the
    listener (which people read in config_dumps, reports and goldens) only names
    its certificate, and the key material exists where Envoy needs it.
    """
    out: dict[str, Secret] = {}
    for gw, lst in listeners:
        if lst.protocol != "HTTPS":
            continue
        for name, secret in _certificates(res, gw, lst):
            out[name] = new(
                Secret,
                name=name,
                tls_certificate=new(
                    TlsCertificate,
                    certificate_chain=new(DataSource, inline_string=secret.cert_pem),
                    private_key=new(DataSource, inline_string=secret.key_pem),
                ),
            )
    return out


def _tls_context(
    res: Resources, gw: m.Gateway, lst: m.GatewayListener, ca: ClientCa | None
) -> DownstreamTlsContext:
    certs = [
        new(SdsSecretConfig, name=name, sds_config=ads()) for name, _ in _certificates(res, gw, lst)
    ]
    validation = None
    if ca is not None:
        # AllowValidOnly: a certificate is required and must verify;
        # AllowInsecureFallback: one is asked for, and neither its absence nor
        # a failed verification refuses the connection.
        validation = new(
            CertificateValidationContext,
            trusted_ca=new(DataSource, inline_string=ca.pem),
            trust_chain_verification=(
                CertificateValidationContextTrustChainVerification.ACCEPT_UNTRUSTED
                if ca.insecure_fallback
                else CertificateValidationContextTrustChainVerification.VERIFY_TRUST_CHAIN
            ),
        )
    return new(
        DownstreamTlsContext,
        common_tls_context=new(
            CommonTlsContext,
            tls_certificate_sds_secret_configs=certs,
            alpn_protocols=["h2", "http/1.1"],
            validation_context=validation,
        ),
        require_client_certificate=True if ca is not None and not ca.insecure_fallback else None,
    )


@dataclass(frozen=True)
class ListenerPlace:
    """Where an Envoy listener goes: its name, bound address and port, and the
    Gateway it serves alone (None: shared by every Gateway on the port)."""

    name: str
    address: str
    port: int
    gateway: tuple[str, str] | None = None


def _metadata(place: ListenerPlace) -> Metadata | None:
    if place.gateway is None:
        return None
    fields = {"namespace": place.gateway[0], "name": place.gateway[1]}
    return new(Metadata, filter_metadata={GATEWAY_METADATA_KEY: Struct.from_dict(fields)})


def build_listener(
    place: ListenerPlace,
    listeners: list[tuple[m.Gateway, m.GatewayListener]],
    res: Resources,
    client_ca: Mapping[tuple[str, str, int], ClientCa] | None = None,
) -> Listener:
    port = place.port
    chains: list[FilterChain] = []
    if any(lst.protocol == "HTTP" for _, lst in listeners):
        chains.append(
            new(FilterChain, name=f"{place.name}-http", filters=[hcm_filter(port, place.name)])
        )
    seen_sni: set[str | None] = set()
    for gw, lst in listeners:
        if lst.protocol != "HTTPS" or lst.hostname in seen_sni:
            continue
        seen_sni.add(lst.hostname)
        ca = (client_ca or {}).get((gw.meta.namespace, gw.meta.name, port))
        tls = _tls_context(res, gw, lst, ca)
        chains.append(
            new(
                FilterChain,
                name=f"{listener_owner(gw, lst)}/{lst.name}",
                filter_chain_match=new(FilterChainMatch, server_names=[lst.hostname])
                if lst.hostname
                else None,
                transport_socket=new(
                    TransportSocket, name="envoy.transport_sockets.tls", typed_config=Any.pack(tls)
                ),
                filters=[hcm_filter(port, https_route_config_name(port, gw, lst))],
            )
        )
    terminates_tls = any(c.transport_socket is not None for c in chains)
    return new(
        Listener,
        name=place.name,
        address=new(
            Address, socket_address=new(SocketAddress, address=place.address, port_value=port)
        ),
        filter_chains=chains,
        # SNI is only known to filter chain matching once the TLS inspector has
        # read the ClientHello; without it `server_names` never match.
        listener_filters=[
            new(ListenerFilter, name=TLS_INSPECTOR, typed_config=Any.pack(new(TlsInspector)))
        ]
        if terminates_tls
        else [],
        metadata=_metadata(place),
    )
