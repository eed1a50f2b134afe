"""A small mesh and one sidecar's xDS, written by hand, for holding the Envoy model to Envoy.

The world (``RESOURCES``): a mesh-registered namespace ``mesh-apps`` with the Services
``echo`` (pods run as ServiceAccount ``echo``) and ``client`` (the workload whose
sidecar this is, ServiceAccount ``client``), and a namespace outside the mesh,
``legacy``, with ``web`` and ``other``. The sidecar's xDS (``sidecar``) is the
shape docs/mesh.md describes, plus a few deliberate mistakes to show what each
handshake does:

- listener ``outbound`` on 0.0.0.0:15001 with the ``original_dst`` and HTTP inspector
  listener filters; a filter chain per Service clusterIP and port (destination
  port and a /32 prefix), one for ``10.96.60.0/24`` that wants ``h2c`` (an HTTP/1.1
  connection there falls to the default chain: Envoy does not go back to broader
  chains), one for any other destination on port 80 that answers 418 itself, and
  the default chain passing everything else through (``tcp_proxy`` to the
  ORIGINAL_DST cluster ``passthrough``);
- ``echo``'s routes: the mTLS EDS cluster to its pod's :15008 pinning its SPIFFE ID,
  and clusters that get it wrong: another ServiceAccount, a prefix and a regex
  and a deprecated matcher that all accept it, no client certificate, cleartext
  to the tunnel, mTLS to the cleartext application port, and HTTP through the
  ORIGINAL_DST cluster;
- ``web``'s route: a cleartext EDS cluster to its pod;
- listener ``inbound`` on the sidecar's pod IP :15008, terminating mTLS: a client
  certificate of the mesh CA whose URI SAN is in the trust domain is required;
- listener ``virtual`` on 0.0.0.0:15002 with ``use_original_dst`` (as other
  implementations capture): a connection redirected there is handed off to the
  listener for its original destination, ``port-8088`` (``bind_to_port: false``, so
  no connection reaches it directly), or, without one, answered by ``virtual``.

Every HTTP connection manager and the tcp_proxy write an access log naming the
filter chain, route, cluster and both peers' URI SANs: what the live test reads
Envoy's decisions from.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from envoy_data_plane.envoy.config.accesslog.v3 import AccessLog
from envoy_data_plane.envoy.config.cluster.v3 import (
    Cluster,
    ClusterDiscoveryType,
    ClusterEdsClusterConfig,
    ClusterLbPolicy,
)
from envoy_data_plane.envoy.config.core.v3 import (
    Address,
    AggregatedConfigSource,
    ApiVersion,
    CidrRange,
    ConfigSource,
    DataSource,
    SocketAddress,
    SubstitutionFormatString,
    TransportSocket,
)
from envoy_data_plane.envoy.config.endpoint.v3 import (
    ClusterLoadAssignment,
    Endpoint,
    LbEndpoint,
    LocalityLbEndpoints,
)
from envoy_data_plane.envoy.config.listener.v3 import (
    Filter,
    FilterChain,
    FilterChainMatch,
    Listener,
    ListenerFilter,
)
from envoy_data_plane.envoy.config.route.v3 import (
    DirectResponseAction,
    Route,
    RouteAction,
    RouteConfiguration,
    RouteMatch,
    VirtualHost,
)
from envoy_data_plane.envoy.extensions.access_loggers.file.v3 import FileAccessLog
from envoy_data_plane.envoy.extensions.filters.http.router.v3 import Router
from envoy_data_plane.envoy.extensions.filters.listener.http_inspector.v3 import HttpInspector
from envoy_data_plane.envoy.extensions.filters.listener.original_dst.v3 import OriginalDst
from envoy_data_plane.envoy.extensions.filters.network.http_connection_manager.v3 import (
    HttpConnectionManager,
    HttpFilter,
    Rds,
)
from envoy_data_plane.envoy.extensions.filters.network.tcp_proxy.v3 import TcpProxy
from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import (
    CertificateValidationContext,
    CommonTlsContext,
    CommonTlsContextCombinedCertificateValidationContext,
    DownstreamTlsContext,
    SdsSecretConfig,
    Secret,
    SubjectAltNameMatcher,
    SubjectAltNameMatcherSanType,
    TlsCertificate,
    UpstreamTlsContext,
)
from envoy_data_plane.envoy.type.matcher.v3 import RegexMatcher, StringMatcher
from envoy_data_plane.google.protobuf import Any, Struct

from verifier.semantics.envoy.downstream import Redirect
from verifier.semantics.request import ClientCert, Request, normalize_headers
from verifier.xds.snapshot import Snapshot

TRUST_DOMAIN = "cluster.local"
CLIENT_POD, ECHO_POD, WEB_POD = "10.244.50.9", "10.244.50.1", "10.244.60.1"
ECHO_IP, CLIENT_IP, WEB_IP, OTHER_IP = "10.96.50.1", "10.96.50.9", "10.96.60.1", "10.96.60.2"
NOBODY_IP = "10.96.70.1"  # no Service: the catch-all chain answers itself
SERVICE_RANGE = "10.96.0.0/16"  # what the capture redirects to CAPTURE_PORT
HANDOFF_IP, HANDOFF_RANGE = "10.97.0.1", "10.97.0.0/16"  # ... and to HANDOFF_PORT
CAPTURE_PORT, HANDOFF_PORT, MESH_PORT, APP_PORT = 15001, 15002, 15008, 8080
PROBE_HEADER = "x-probe"


def spiffe(namespace: str, account: str) -> str:
    return f"spiffe://{TRUST_DOMAIN}/ns/{namespace}/sa/{account}"


def _service(ns: str, name: str, ip: str, pod: str, account: str, *, slice_: bool = True) -> str:
    endpoints = f"""
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-1
  namespace: {ns}
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{{name: http, port: {APP_PORT}, protocol: TCP}}]
endpoints:
- addresses: [{pod}]
  conditions: {{ready: true}}"""
    return f"""
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {ns}}}
spec:
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      serviceAccountName: {account}
      containers: [{{name: app, image: echo, ports: [{{containerPort: {APP_PORT}}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {ns}}}
spec:
  clusterIP: {ip}
  selector: {{app: {name}}}
  ports: [{{name: http, port: 80, targetPort: {APP_PORT}}}]{endpoints if slice_ else ""}"""


RESOURCES = (
    """
apiVersion: v1
kind: Namespace
metadata: {name: mesh-apps, labels: {aether.io/managed: "true"}}
---
apiVersion: v1
kind: Namespace
metadata: {name: legacy}"""
    + _service("mesh-apps", "echo", ECHO_IP, ECHO_POD, "echo")
    + _service("mesh-apps", "client", CLIENT_IP, CLIENT_POD, "client")
    + _service("legacy", "web", WEB_IP, WEB_POD, "web")
    + _service("legacy", "other", OTHER_IP, "10.244.60.2", "other")
    + "\n"
)


# --- the xDS -----------------------------------------------------------------------------------


def _ads() -> ConfigSource:
    return ConfigSource(ads=AggregatedConfigSource(), resource_api_version=ApiVersion.V3)


def _log(path: str) -> AccessLog:
    fields = {
        "probe": f"%REQ({PROBE_HEADER.upper()})%",
        "chain": "%FILTER_CHAIN_NAME%",
        "route": "%ROUTE_NAME%",
        "cluster": "%UPSTREAM_CLUSTER%",
        "code": "%RESPONSE_CODE%",
        "flags": "%RESPONSE_FLAGS%",
        "local": "%DOWNSTREAM_LOCAL_ADDRESS%",
        "upstream_san": "%UPSTREAM_PEER_URI_SAN%",
        "downstream_san": "%DOWNSTREAM_PEER_URI_SAN%",
        "failure": "%UPSTREAM_TRANSPORT_FAILURE_REASON%",
    }
    config = FileAccessLog(
        path=path, log_format=SubstitutionFormatString(json_format=Struct.from_dict(fields))
    )
    return AccessLog(name="envoy.access_loggers.file", typed_config=Any.pack(config))


def _hcm(name: str, log: str, *, rds: str = "", routes: RouteConfiguration | None = None) -> Filter:
    hcm = HttpConnectionManager(
        stat_prefix=name,
        http_filters=[
            HttpFilter(name="envoy.filters.http.router", typed_config=Any.pack(Router()))
        ],
        access_log=[_log(log)],
    )
    if routes is not None:
        hcm.route_config = routes
    else:
        hcm.rds = Rds(config_source=_ads(), route_config_name=rds)
    return Filter(name="envoy.filters.network.http_connection_manager", typed_config=Any.pack(hcm))


def _chain(name: str, filters: list[Filter], **match: object) -> FilterChain:
    return FilterChain(name=name, filters=filters, filter_chain_match=FilterChainMatch(**match))


def _prefix(address: str, length: int) -> list[CidrRange]:
    return [CidrRange(address_prefix=address, prefix_len=length)]


def _route(name: str, prefix: str, cluster: str) -> Route:
    return Route(name=name, match=RouteMatch(prefix=prefix), route=RouteAction(cluster=cluster))


def _address(ip: str, port: int) -> Address:
    return Address(socket_address=SocketAddress(address=ip, port_value=port))


# route name -> the cluster it names; the route's path prefix is "/" + its name ("/" for "mesh")
ECHO_ROUTES = {
    "wrong-san": "mesh-wrong-san",
    "prefix-san": "mesh-prefix-san",
    "regex-san": "mesh-regex-san",
    "deprecated-san": "mesh-deprecated-san",
    "no-client-cert": "mesh-no-client-cert",
    "cleartext-to-tunnel": "cleartext-to-tunnel",
    "tls-to-app": "tls-to-app",
    "through": "passthrough",
    "mesh": "mesh/mesh-apps/echo/80",
}
ROUTE_CLUSTERS = {**ECHO_ROUTES, "web": "k8s/legacy/web/80", "inbound": "inbound/app"}


def _route_configs() -> list[RouteConfiguration]:
    echo = [
        _route(name, "/" if name == "mesh" else f"/{name}", cluster)
        for name, cluster in ECHO_ROUTES.items()
    ]

    def config(name: str, routes: list[Route]) -> RouteConfiguration:
        return RouteConfiguration(
            name=name, virtual_hosts=[VirtualHost(name=name, domains=["*"], routes=routes)]
        )

    return [
        config("outbound/mesh-apps/echo/80", echo),
        config("outbound/legacy/web/80", [_route("web", "/", ROUTE_CLUSTERS["web"])]),
    ]


def _answer(name: str, status: int) -> RouteConfiguration:
    """Routes that answer every request with ``status`` themselves (route ``name``)."""
    route = Route(
        name=name, match=RouteMatch(prefix="/"), direct_response=DirectResponseAction(status=status)
    )
    return RouteConfiguration(
        name=name, virtual_hosts=[VirtualHost(name=name, domains=["*"], routes=[route])]
    )


def _handoff(log: str) -> list[Listener]:
    original_dst = ListenerFilter(
        name="envoy.filters.listener.original_dst", typed_config=Any.pack(OriginalDst())
    )
    virtual = Listener(
        name="virtual",
        address=_address("0.0.0.0", HANDOFF_PORT),
        use_original_dst=True,
        listener_filters=[original_dst],
        default_filter_chain=FilterChain(
            name="virtual-default",
            filters=[_hcm("virtual", log, routes=_answer("misdirected", 421))],
        ),
    )
    port_8088 = Listener(
        name="port-8088",
        address=_address("0.0.0.0", 8088),
        bind_to_port=False,
        filter_chains=[
            FilterChain(name="8088", filters=[_hcm("8088", log, routes=_answer("accepted", 202))])
        ],
    )
    return [virtual, port_8088]


def _listeners(log: str) -> list[Listener]:
    catch_all = _answer("teapot", 418)
    passthrough = Filter(
        name="envoy.filters.network.tcp_proxy",
        typed_config=Any.pack(
            TcpProxy(stat_prefix="passthrough", cluster="passthrough", access_log=[_log(log)])
        ),
    )
    outbound = Listener(
        name="outbound",
        address=_address("0.0.0.0", CAPTURE_PORT),
        listener_filters=[
            ListenerFilter(
                name="envoy.filters.listener.original_dst", typed_config=Any.pack(OriginalDst())
            ),
            ListenerFilter(
                name="envoy.filters.listener.http_inspector", typed_config=Any.pack(HttpInspector())
            ),
        ],
        filter_chains=[
            _chain(
                "mesh-apps/echo/80",
                [_hcm("echo", log, rds="outbound/mesh-apps/echo/80")],
                destination_port=80,
                prefix_ranges=_prefix(ECHO_IP, 32),
            ),
            _chain(
                "legacy/web/80",
                [_hcm("web", log, rds="outbound/legacy/web/80")],
                destination_port=80,
                prefix_ranges=_prefix(WEB_IP, 32),
            ),
            _chain(
                "legacy/h2c",
                [_hcm("legacy-h2c", log, routes=catch_all)],
                destination_port=80,
                prefix_ranges=_prefix("10.96.60.0", 24),
                application_protocols=["h2c"],
            ),
            _chain("any/80", [_hcm("any", log, routes=catch_all)], destination_port=80),
        ],
        default_filter_chain=FilterChain(name="passthrough", filters=[passthrough]),
    )
    inbound_routes = RouteConfiguration(
        name="inbound",
        virtual_hosts=[
            VirtualHost(
                name="inbound",
                domains=["*"],
                routes=[_route("inbound", "/", ROUTE_CLUSTERS["inbound"])],
            )
        ],
    )
    mtls = DownstreamTlsContext(
        require_client_certificate=True,
        common_tls_context=_common([_san("prefix", f"spiffe://{TRUST_DOMAIN}/")], client_cert=True),
    )
    inbound = Listener(
        name="inbound",
        address=_address(CLIENT_POD, MESH_PORT),
        filter_chains=[
            FilterChain(
                name="inbound-mtls",
                filters=[_hcm("inbound", log, routes=inbound_routes)],
                transport_socket=TransportSocket(
                    name="envoy.transport_sockets.tls", typed_config=Any.pack(mtls)
                ),
            )
        ],
    )
    return [outbound, inbound, *_handoff(log)]


def _san(kind: str, value: str, *, typed: bool = True) -> SubjectAltNameMatcher | StringMatcher:
    matcher = (
        StringMatcher(safe_regex=RegexMatcher(regex=value))
        if kind == "regex"
        else StringMatcher(**{kind: value})
    )
    if not typed:
        return matcher
    return SubjectAltNameMatcher(san_type=SubjectAltNameMatcherSanType.URI, matcher=matcher)


def _common(sans: list[object], *, client_cert: bool, typed: bool = True) -> CommonTlsContext:
    """The sidecar's identity (SDS ``default``, when ``client_cert``), the mesh CA (SDS
    ``ROOTCA``) and the SAN matchers, as the reference translator writes them."""
    default = (
        CertificateValidationContext(match_typed_subject_alt_names=sans)
        if typed
        else CertificateValidationContext(match_subject_alt_names=sans)
    )
    return CommonTlsContext(
        tls_certificate_sds_secret_configs=(
            [SdsSecretConfig(name="default", sds_config=_ads())] if client_cert else []
        ),
        combined_validation_context=CommonTlsContextCombinedCertificateValidationContext(
            default_validation_context=default,
            validation_context_sds_secret_config=SdsSecretConfig(name="ROOTCA", sds_config=_ads()),
        ),
    )


def _cluster(name: str, common: CommonTlsContext | None) -> Cluster:
    tls = (
        TransportSocket(
            name="envoy.transport_sockets.tls",
            typed_config=Any.pack(UpstreamTlsContext(common_tls_context=common)),
        )
        if common is not None
        else None
    )
    return Cluster(
        name=name,
        type=ClusterDiscoveryType.EDS,
        eds_cluster_config=ClusterEdsClusterConfig(eds_config=_ads()),
        connect_timeout=timedelta(seconds=2),
        transport_socket=tls,
    )


def _assignment(name: str, ip: str, port: int) -> ClusterLoadAssignment:
    endpoint = Endpoint(address=_address(ip, port))
    return ClusterLoadAssignment(
        cluster_name=name,
        endpoints=[LocalityLbEndpoints(lb_endpoints=[LbEndpoint(endpoint=endpoint)])],
    )


def _clusters() -> list[tuple[Cluster, tuple[str, int] | None]]:
    echo = spiffe("mesh-apps", "echo")
    exact = [_san("exact", echo)]
    mesh = [
        ("mesh/mesh-apps/echo/80", _common(exact, client_cert=True)),
        ("mesh-wrong-san", _common([_san("exact", spiffe("mesh-apps", "web"))], client_cert=True)),
        ("mesh-prefix-san", _common([_san("prefix", spiffe("mesh-apps", ""))], client_cert=True)),
        (
            "mesh-regex-san",
            _common([_san("regex", r"spiffe://cluster\.local/ns/[^/]+/sa/echo")], client_cert=True),
        ),
        (
            "mesh-deprecated-san",
            _common([_san("exact", echo, typed=False)], client_cert=True, typed=False),
        ),
        ("mesh-no-client-cert", _common(exact, client_cert=False)),
    ]
    out: list[tuple[Cluster, tuple[str, int] | None]] = [
        (_cluster(name, common), (ECHO_POD, MESH_PORT)) for name, common in mesh
    ]
    out += [
        (_cluster("cleartext-to-tunnel", None), (ECHO_POD, MESH_PORT)),
        (_cluster("tls-to-app", _common(exact, client_cert=True)), (ECHO_POD, APP_PORT)),
        (_cluster(ROUTE_CLUSTERS["web"], None), (WEB_POD, APP_PORT)),
        (_cluster(ROUTE_CLUSTERS["inbound"], None), (CLIENT_POD, APP_PORT)),
    ]
    passthrough = Cluster(
        name="passthrough",
        type=ClusterDiscoveryType.ORIGINAL_DST,
        lb_policy=ClusterLbPolicy.CLUSTER_PROVIDED,
        connect_timeout=timedelta(seconds=2),
    )
    return [*out, (passthrough, None)]


@dataclass(frozen=True)
class Pems:
    """The mesh CA and the sidecar's own certificate (ServiceAccount ``client``)."""

    ca: str
    cert: str
    key: str


def sidecar(pems: Pems, log: str) -> Snapshot:
    """The client sidecar's xDS, with the SDS secrets a config_dump would show."""
    clusters = _clusters()
    secrets = (
        Secret(
            name="default",
            tls_certificate=TlsCertificate(
                certificate_chain=DataSource(inline_string=pems.cert),
                private_key=DataSource(inline_string=pems.key),
            ),
        ),
        Secret(
            name="ROOTCA",
            validation_context=CertificateValidationContext(
                trusted_ca=DataSource(inline_string=pems.ca)
            ),
        ),
    )
    return Snapshot(
        clusters=tuple(c for c, _ in clusters),
        endpoints=tuple(_assignment(c.name, *at) for c, at in clusters if at is not None),
        listeners=tuple(_listeners(log)),
        routes=tuple(_route_configs()),
        secrets=secrets,
    )


# --- the probes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """One request: captured by the client's sidecar (``redirect``), or sent by
    another pod straight to the sidecar's inbound port (``source``), with the client
    certificate ``cert`` names (a key of the live test's certificates)."""

    name: str
    request: Request
    redirect: Redirect | None
    source: str
    cert: str | None = None


CAPTURED = Redirect(CAPTURE_PORT)


def outbound(
    name: str, address: str, path: str = "/", port: int = 80, redirect: Redirect | None = CAPTURED
) -> Probe:
    host = {ECHO_IP: "echo.mesh-apps", WEB_IP: "web.legacy", OTHER_IP: "other.legacy"}.get(
        address, address
    )
    request = Request(
        host=f"{host}.svc.cluster.local" if address != host else host,
        port=port,
        address=address,
        path=path,
        headers=normalize_headers([(PROBE_HEADER, name)]),
    )
    return Probe(name, request, redirect, CLIENT_POD if redirect else WEB_POD)


def inbound(name: str, cert: str | None, issuer: str, uri: str | None) -> Probe:
    client = None
    if cert is not None:
        client = ClientCert(issuer, uri_sans=(uri,) if uri else ())
    request = Request(
        scheme="https",
        host="client.mesh-apps.svc.cluster.local",
        port=MESH_PORT,
        address=CLIENT_POD,
        headers=normalize_headers([(PROBE_HEADER, name)]),
        client_cert=client,
    )
    return Probe(name, request, None, WEB_POD, cert)


def probes(ca: str, other_ca: str) -> list[Probe]:
    """``ca``, ``other_ca``: the fingerprints of the mesh CA and of a CA nobody trusts."""
    to_echo = [
        outbound(name, ECHO_IP, "/" if name == "mesh" else f"/{name}") for name in ECHO_ROUTES
    ]
    return [
        *to_echo,
        outbound("web", WEB_IP),
        outbound("h2c-only-chain", OTHER_IP),  # /24 chain wants h2c: default chain
        outbound("catch-all", NOBODY_IP),
        outbound("closed-port", ECHO_IP, port=81),  # no chain for :81, no Service port 81
        outbound("handed-off", HANDOFF_IP, port=8088, redirect=Redirect(HANDOFF_PORT)),
        outbound("not-handed-off", HANDOFF_IP, port=9099, redirect=Redirect(HANDOFF_PORT)),
        outbound("not-bound", HANDOFF_IP, port=8088, redirect=None),  # bind_to_port: false
        inbound("peer-in-domain", "web", ca, spiffe("legacy", "web")),
        inbound("peer-other-domain", "foreign", ca, "spiffe://elsewhere.example/ns/x/sa/y"),
        inbound("peer-untrusted-ca", "untrusted", other_ca, spiffe("legacy", "web")),
        inbound("peer-without-cert", None, ca, None),
    ]
