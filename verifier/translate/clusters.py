"""Backends to Envoy clusters, following the aether edge's two paths.

A Service outside the mesh is dialled by name: a cleartext STRICT_DNS cluster
to ``<svc>.<ns>.svc.cluster.local:<port>``, HTTP/1.1 unless the Service port's
appProtocol says h2c. A mesh-registered Service is dialled on the mesh path:
mTLS to each workload's port 15008, accepting only the SPIFFE identity of the
backend's ServiceAccount, so a compromised DNS answer cannot impersonate it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from envoy_data_plane.envoy.config.cluster.v3 import (
    Cluster,
    ClusterDiscoveryType,
    ClusterDnsLookupFamily,
    ClusterEdsClusterConfig,
    ClusterLbPolicy,
)
from envoy_data_plane.envoy.config.core.v3 import (
    Address,
    AggregatedConfigSource,
    ApiVersion,
    ConfigSource,
    Http1ProtocolOptions,
    Http2ProtocolOptions,
    Metadata,
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
    CommonTlsContext,
    CommonTlsContextCombinedCertificateValidationContext,
    SdsSecretConfig,
    SubjectAltNameMatcher,
    SubjectAltNameMatcherSanType,
    UpstreamTlsContext,
)
from envoy_data_plane.envoy.extensions.upstreams.http.v3 import (
    HttpProtocolOptions,
    HttpProtocolOptionsExplicitHttpConfig,
)
from envoy_data_plane.envoy.type.matcher.v3 import StringMatcher
from envoy_data_plane.google.protobuf import Any, Struct

from verifier.gatewayapi import workloads
from verifier.gatewayapi.attach import ResolvedBackend
from verifier.gatewayapi.mesh_attach import mesh_registered
from verifier.gatewayapi.resources import Resources
from verifier.xds.codec import new

MESH_PORT = 15008
# The ORIGINAL_DST cluster a sidecar sends what it does not route to (docs/mesh.md).
PASSTHROUGH = "passthrough"
METADATA_KEY = "aether.io/backend"
HTTP_OPTIONS_KEY = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
# Names of the SDS secrets the edge's own agent serves: its workload certificate
# and the mesh trust bundle.
SDS_IDENTITY = "default"
SDS_ROOT = "ROOTCA"


@dataclass(frozen=True)
class BackendKey:
    """What makes two backendRefs share one cluster."""

    namespace: str
    service: str
    port: int
    protocol: str  # http1 | h2c | ws
    mesh: bool

    @property
    def service_port(self) -> tuple[str, str, int]:
        return (self.namespace, self.service, self.port)

    @property
    def cluster_name(self) -> str:
        path = "mesh" if self.mesh else "k8s"
        return f"{path}/{self.namespace}/{self.service}/{self.port}"


def ads() -> ConfigSource:
    return new(ConfigSource, ads=new(AggregatedConfigSource), resource_api_version=ApiVersion.V3)


def fqdn(namespace: str, service: str) -> str:
    return f"{service}.{namespace}.svc.cluster.local"


def service_accounts(res: Resources, backend: ResolvedBackend) -> list[str]:
    """The identities the pods behind a backend's Service may present."""
    if backend.service is None:
        return ["default"]
    return workloads.service_accounts(res, backend.namespace, backend.service.meta.name)


def backend_key(
    res: Resources, registry: frozenset[tuple[str, str]], backend: ResolvedBackend
) -> BackendKey:
    assert backend.port is not None and backend.service is not None
    return BackendKey(
        backend.namespace,
        backend.service.meta.name,
        backend.port.port,
        backend.protocol,
        mesh_registered(res, registry, backend.namespace, backend.service.meta.name),
    )


def _metadata(key: BackendKey, identities: list[str] | None) -> Metadata:
    fields: dict[str, object] = {
        "namespace": key.namespace,
        "service": key.service,
        "port": key.port,
        "path": "mesh" if key.mesh else "dns",
    }
    if identities:
        fields["identity"] = identities[0] if len(identities) == 1 else identities
    return new(Metadata, filter_metadata={METADATA_KEY: Struct.from_dict(fields)})


def _protocol_options(protocol: str) -> dict[str, Any]:
    explicit = (
        new(HttpProtocolOptionsExplicitHttpConfig, http2_protocol_options=new(Http2ProtocolOptions))
        if protocol == "h2c"
        else new(
            HttpProtocolOptionsExplicitHttpConfig, http_protocol_options=new(Http1ProtocolOptions)
        )
    )
    return {HTTP_OPTIONS_KEY: Any.pack(new(HttpProtocolOptions, explicit_http_config=explicit))}


def dns_cluster(key: BackendKey) -> Cluster:
    host = fqdn(key.namespace, key.service)
    return new(
        Cluster,
        name=key.cluster_name,
        type=ClusterDiscoveryType.STRICT_DNS,
        connect_timeout=timedelta(seconds=5),
        dns_lookup_family=ClusterDnsLookupFamily.V4_ONLY,
        load_assignment=new(
            ClusterLoadAssignment,
            cluster_name=key.cluster_name,
            endpoints=[
                new(
                    LocalityLbEndpoints,
                    lb_endpoints=[
                        new(
                            LbEndpoint,
                            endpoint=new(
                                Endpoint,
                                address=new(
                                    Address,
                                    socket_address=new(
                                        SocketAddress, address=host, port_value=key.port
                                    ),
                                ),
                                hostname=host,
                            ),
                        )
                    ],
                )
            ],
        ),
        typed_extension_protocol_options=_protocol_options(key.protocol),
        metadata=_metadata(key, None),
    )


def mesh_sni(res: Resources, namespace: str, service: str, port: int) -> str:
    """The SNI a mesh client sends to a workload's :15008: the Service's name, and, when
    the Service has several ports, the port too (``<port>.<svc>.<ns>.svc.cluster.local``).

    Every port of a Service arrives on the same :15008, so the SNI is all the
    destination's sidecar has to choose the targetPort by (its inbound listener has a
    filter chain per SNI, ``verifier.translate.inbound``). A one-port Service needs no
    port in it, and keeps the name the edge has always sent."""
    svc = res.services.get((namespace, service))
    name = fqdn(namespace, service)
    return f"{port}.{name}" if svc is not None and len(svc.ports) > 1 else name


def spiffe_id(trust_domain: str, namespace: str, sa: str) -> str:
    return f"spiffe://{trust_domain}/ns/{namespace}/sa/{sa}"


def mesh_tls(san: list[StringMatcher]) -> CommonTlsContext:
    """The mesh's TLS on either end: the workload's own certificate (SDS ``default``),
    the trust bundle (SDS ``ROOTCA``), and the URI SANs the peer may present."""
    return new(
        CommonTlsContext,
        tls_certificate_sds_secret_configs=[
            new(SdsSecretConfig, name=SDS_IDENTITY, sds_config=ads())
        ],
        combined_validation_context=new(
            CommonTlsContextCombinedCertificateValidationContext,
            default_validation_context=new(
                CertificateValidationContext,
                match_typed_subject_alt_names=[
                    new(SubjectAltNameMatcher, san_type=SubjectAltNameMatcherSanType.URI, matcher=m)
                    for m in san
                ],
            ),
            validation_context_sds_secret_config=new(
                SdsSecretConfig, name=SDS_ROOT, sds_config=ads()
            ),
        ),
    )


def mesh_cluster(key: BackendKey, identities: list[str], sni: str) -> Cluster:
    tls = new(
        UpstreamTlsContext,
        common_tls_context=mesh_tls([new(StringMatcher, exact=i) for i in identities]),
        sni=sni,
    )
    return new(
        Cluster,
        name=key.cluster_name,
        type=ClusterDiscoveryType.EDS,
        eds_cluster_config=_eds_config(),
        connect_timeout=timedelta(seconds=5),
        transport_socket=new(
            TransportSocket, name="envoy.transport_sockets.tls", typed_config=Any.pack(tls)
        ),
        typed_extension_protocol_options=_protocol_options(key.protocol),
        metadata=_metadata(key, identities),
    )


def _eds_config() -> ClusterEdsClusterConfig:
    return new(ClusterEdsClusterConfig, eds_config=ads())


def mesh_endpoints(res: Resources, key: BackendKey) -> ClusterLoadAssignment:
    """Workload addresses from the Service's EndpointSlices, dialled on the mesh port."""
    addresses = sorted(
        {
            a
            for s in res.endpoint_slices.values()
            if s.meta.namespace == key.namespace and s.service_name == key.service
            for a in s.addresses
        }
    )
    lb = [
        new(
            LbEndpoint,
            endpoint=new(
                Endpoint,
                address=new(
                    Address, socket_address=new(SocketAddress, address=a, port_value=MESH_PORT)
                ),
            ),
        )
        for a in addresses
    ]
    return new(
        ClusterLoadAssignment,
        cluster_name=key.cluster_name,
        endpoints=[new(LocalityLbEndpoints, lb_endpoints=lb)] if lb else [],
    )


def passthrough_cluster() -> Cluster:
    """Where a sidecar sends a connection no filter chain claims: to the address it
    was sent to, which the ``original_dst`` listener filter restored."""
    return new(
        Cluster,
        name=PASSTHROUGH,
        type=ClusterDiscoveryType.ORIGINAL_DST,
        lb_policy=ClusterLbPolicy.CLUSTER_PROVIDED,
        connect_timeout=timedelta(seconds=5),
    )


@dataclass
class ClusterCollector:
    """Collects the clusters that routes actually use, so none is orphaned; the edge and
    the sidecars dial a backend alike (one decision: ``backend_key``)."""

    res: Resources
    registry: frozenset[tuple[str, str]]
    trust_domain: str
    clusters: dict[str, Cluster] = field(default_factory=dict)
    endpoints: dict[str, ClusterLoadAssignment] = field(default_factory=dict)

    def name_for(self, backend: ResolvedBackend) -> str:
        key = backend_key(self.res, self.registry, backend)
        name = key.cluster_name
        if name not in self.clusters:
            if key.mesh:
                ids = [
                    spiffe_id(self.trust_domain, key.namespace, sa)
                    for sa in service_accounts(self.res, backend)
                ]
                self.clusters[name] = mesh_cluster(key, ids, mesh_sni(self.res, *key.service_port))
                self.endpoints[name] = mesh_endpoints(self.res, key)
            else:
                self.clusters[name] = dns_cluster(key)
        return name


def static_cluster(name: str, address: str, port: int) -> Cluster:
    """A cluster of one fixed address: a sidecar's own application port."""
    endpoint = new(
        Endpoint,
        address=new(Address, socket_address=new(SocketAddress, address=address, port_value=port)),
    )
    return new(
        Cluster,
        name=name,
        type=ClusterDiscoveryType.STATIC,
        connect_timeout=timedelta(seconds=5),
        load_assignment=new(
            ClusterLoadAssignment,
            cluster_name=name,
            endpoints=[new(LocalityLbEndpoints, lb_endpoints=[new(LbEndpoint, endpoint=endpoint)])],
        ),
    )
