"""Which Kubernetes Service a cluster dials, and how, judged only by what it dials.

A cluster's endpoints name the Service: a DNS name ``<svc>.<ns>[.svc[.cluster.local]]``,
the Service's clusterIP, or a ready address of one of its EndpointSlices (dialled on
the target port, or on the mesh port). A cluster with no endpoints falls back to the
SNI of its TLS context. Cluster names and metadata are never read.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from verifier.rules.support import walk

from verifier.findings import Finding, new
from verifier.gatewayapi import model as m
from verifier.gatewayapi.resources import Resources
from verifier.semantics.directory import MESH_PORT
from verifier.xds import read
from verifier.xds.enums import (
    ClusterClusterProtocolSelection,
    ClusterDiscoveryType,
    SubjectAltNameMatcherSanType,
    name_of,
)
from verifier.xds.snapshot import Snapshot

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.cluster.v3 import Cluster
    from envoy_data_plane.envoy.config.endpoint.v3 import ClusterLoadAssignment
    from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import (
        CertificateValidationContext,
        CommonTlsContext,
        UpstreamTlsContext,
    )
    from envoy_data_plane.envoy.type.matcher.v3 import StringMatcher

HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
UPSTREAM_TLS = "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
DNS_SUFFIXES = (".svc.cluster.local", ".svc", "")


@dataclass(frozen=True)
class Dialled:
    service: m.Service
    port: m.ServicePort | None  # None: the endpoints do not say which Service port
    targets: tuple[tuple[str, int], ...]
    # Pods dialled by IP may stand for several Services at once; these are the
    # others (``service`` is the first by namespace/name). Empty when it is one.
    others: tuple[m.Service, ...] = ()
    # Every (Service, port) the endpoints may stand for: more than one when pods
    # are shared, or when several Service ports have the dialled targetPort.
    readings: tuple[tuple[m.Service, m.ServicePort], ...] = ()


def kind(cluster: Cluster) -> str:
    """STATIC, STRICT_DNS, LOGICAL_DNS, EDS, ORIGINAL_DST, or a cluster_type extension name.

    The ``envoy.cluster.dns`` extension resolving every address (not one per
    connection, ``all_addresses_in_single_endpoint``) is STRICT_DNS by another name.
    """
    which, _ = read.one_of(cluster, "cluster_discovery_type")
    if which != "cluster_type":
        return name_of(ClusterDiscoveryType, cluster.type or 0)
    ext = cluster.cluster_type
    config = walk.unpack(ext.typed_config) if ext is not None else None
    if read.is_a(config, "envoy.extensions.clusters.dns.v3.DnsCluster"):
        return "LOGICAL_DNS" if config.all_addresses_in_single_endpoint else "STRICT_DNS"
    return ext.name if ext is not None else ""


def assignment(cluster: Cluster, snap: Snapshot) -> ClusterLoadAssignment | None:
    if kind(cluster) == "EDS":
        eds = cluster.eds_cluster_config
        name = (eds.service_name if eds else "") or cluster.name
        found = next((e for e in snap.endpoints if e.cluster_name == name), None)
        return found or cluster.load_assignment
    return cluster.load_assignment


def targets(cla: ClusterLoadAssignment | None) -> tuple[tuple[str, int], ...]:
    out = []
    for locality in cla.endpoints if cla else []:
        for lb in locality.lb_endpoints:
            ep = lb.endpoint
            sa = ep.address.socket_address if ep and ep.address else None
            if sa is not None:
                out.append((sa.address, sa.port_value or 0))
    return tuple(out)


def upstream_tls(cluster: Cluster) -> UpstreamTlsContext | None:
    ts = cluster.transport_socket
    found = walk.unpack(ts.typed_config) if ts is not None else None
    return found if read.is_a(found, UPSTREAM_TLS) else None


def encrypts(cluster: Cluster) -> bool:
    """Any transport socket other than raw_buffer (or any per-endpoint socket match)."""
    if cluster.transport_socket_matches:
        return True
    ts = cluster.transport_socket
    if ts is None:
        return False
    inner = walk.unpack(ts.typed_config)
    raw = read.is_a(inner, "envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer")
    return not raw and ts.name != "envoy.transport_sockets.raw_buffer"


def http_protocol(cluster: Cluster) -> str:
    """``h2`` (always HTTP/2), ``downstream`` (HTTP/2 when the client used it), ``auto``
    (ALPN), or ``h1``; typed HttpProtocolOptions win over the legacy cluster fields."""
    opts = walk.unpack(cluster.typed_extension_protocol_options.get(HTTP_OPTIONS))
    if read.is_a(opts, HTTP_OPTIONS):
        which, value = read.one_of(opts, "upstream_protocol_options")
        if which == "explicit_http_config" and value is not None:
            proto, _ = read.one_of(value, "protocol_config")
            return "h2" if proto == "http2_protocol_options" else "h1"
        if which == "use_downstream_protocol_config" and value is not None:
            return "downstream" if value.http2_protocol_options is not None else "h1"
        return "auto" if which == "auto_config" else "h1"
    if cluster.http2_protocol_options is not None:
        downstream = ClusterClusterProtocolSelection.USE_DOWNSTREAM_PROTOCOL
        return "downstream" if cluster.protocol_selection == downstream else "h2"
    return "h1"


def san_matchers(common: CommonTlsContext) -> list[tuple[str, StringMatcher]]:
    """(SAN type, matcher) for every subject-alt-name matcher; type "" for legacy ones."""
    contexts: list[CertificateValidationContext] = []
    if common.validation_context is not None:
        contexts.append(common.validation_context)
    combined = common.combined_validation_context
    if combined is not None and combined.default_validation_context is not None:
        contexts.append(combined.default_validation_context)
    out: list[tuple[str, StringMatcher]] = []
    for vc in contexts:
        out += [
            (name_of(SubjectAltNameMatcherSanType, s.san_type or 0), s.matcher)
            for s in vc.match_typed_subject_alt_names
            if s.matcher is not None
        ]
        out += [("", s) for s in vc.match_subject_alt_names]
    return out


def describe_matcher(matcher: StringMatcher) -> str:
    which, value = read.one_of(matcher, "match_pattern")
    text = getattr(value, "regex", value)
    return f"{which or 'any'} {text!r}"


class Directory:
    """Services by DNS name, clusterIP and EndpointSlice address."""

    def __init__(self, res: Resources) -> None:
        self.res = res
        self.by_ip: dict[str, set[tuple[str, str]]] = {}
        for key, svc in res.services.items():
            if svc.cluster_ip and svc.cluster_ip != "None":
                self.by_ip.setdefault(svc.cluster_ip, set()).add(key)
        self.slice_ports: dict[tuple[str, str], set[tuple[str, int]]] = {}
        for sl in res.endpoint_slices.values():
            key = (sl.meta.namespace, sl.service_name)
            if key in res.services:
                self.slice_ports.setdefault(key, set()).update(sl.ports)
                for addr in sl.addresses:
                    self.by_ip.setdefault(addr, set()).add(key)

    def services(self, host: str, port: int | None = None) -> set[tuple[str, str]]:
        """The Services behind a DNS name or an IP; for a pod IP, those whose
        EndpointSlices publish ``port`` when any does (a pod serves several)."""
        h = host.lower().rstrip(".")
        for suffix in DNS_SUFFIXES:
            parts = h[: len(h) - len(suffix)].split(".") if h.endswith(suffix) else []
            if len(parts) == 2 and (parts[1], parts[0]) in self.res.services:
                return {(parts[1], parts[0])}
        found = set(self.by_ip.get(host, set()))
        on_port = {
            k
            for k in found
            if host != self.res.services[k].cluster_ip
            and any(n == port for _, n in self.slice_ports.get(k, set()))
        }
        return on_port or found

    def fits(self, key: tuple[str, str], ts: tuple[tuple[str, int], ...]) -> list[m.ServicePort]:
        """The ports of the Service that every target may be (a one-port Service's
        only port when the targets say nothing, as on the mesh port)."""
        svc = self.res.services[key]
        out = [p for p in svc.ports if all(self._may_be(key, h, n, p) for h, n in ts)]
        return out or (list(svc.ports) if len(svc.ports) == 1 else [])

    def _may_be(self, key: tuple[str, str], host: str, number: int, p: m.ServicePort) -> bool:
        if host == self.res.services[key].cluster_ip or host not in self.by_ip:
            return p.port == number
        # A slice names its ports after the Service's ports (unnamed: the only one),
        # whatever the targetPort is (a number, or a container port name).
        names = {n for n, num in self.slice_ports.get(key, set()) if num == number}
        return p.target_port == str(number) or p.name in names

    def port(self, key: tuple[str, str], host: str, number: int) -> m.ServicePort | None:
        """The one Service port a target is, if it is one."""
        fits = [p for p in self.res.services[key].ports if self._may_be(key, host, number, p)]
        return fits[0] if len(fits) == 1 else None


def dialled(cluster: Cluster, snap: Snapshot, directory: Directory) -> Dialled | None:
    """The one Service every endpoint of ``cluster`` belongs to, if there is one."""
    ts = targets(assignment(cluster, snap))
    tls = upstream_tls(cluster)
    probes = ts
    if not probes and tls is not None and tls.sni:
        probes = ((_sni_name(tls.sni), 0),)
    keys: set[tuple[str, str]] | None = None
    for host, port_number in probes:
        found = directory.services(host, port_number)
        keys = found if keys is None else keys & found
    if keys and len(keys) > 1 and tls is not None and tls.sni:
        keys &= directory.services(_sni_name(tls.sni))  # pods behind several Services
    if not keys:
        return None
    first, *others = sorted(keys)
    svc = directory.res.services[first]
    ports = {directory.port(first, h, p) for h, p in ts}
    port = next(iter(ports)) if len(ports) == 1 else None
    if port is None and len(svc.ports) == 1:
        port = svc.ports[0]  # the mesh port carries every Service port: only one here
    readings = tuple(
        (directory.res.services[k], p) for k in sorted(keys) for p in directory.fits(k, ts)
    )
    named = _sni_port(tls.sni) if tls is not None and tls.sni else None
    if named is not None and ts and all(n == MESH_PORT for _h, n in ts):
        # Every Service port arrives on the mesh port: the tunnel's SNI names which.
        readings = tuple(
            (s, p)
            for s in (directory.res.services[k] for k in sorted(keys))
            for p in s.ports
            if p.port == named
        )
        port = next((p for s, p in readings if s is svc), port)
    return Dialled(svc, port, ts, tuple(directory.res.services[k] for k in others), readings)


def _sni_name(sni: str) -> str:
    """The Service name a mesh tunnel's SNI carries: ``<port>.<svc>.<ns>...`` names one
    port of a Service with several (docs/mesh.md), ``<svc>.<ns>...`` a Service."""
    head, dot, rest = sni.partition(".")
    return rest if dot and head.isdigit() else sni


def _sni_port(sni: str) -> int | None:
    """The Service port a mesh tunnel's SNI names (``<port>.<svc>.<ns>...``), if any."""
    head, dot, _rest = sni.partition(".")
    return int(head) if dot and head.isdigit() else None


def routed_clusters(snap: Snapshot) -> dict[str, list[walk.RouteRef]]:
    """Clusters that routes forward or mirror traffic to, with those routes."""
    out: dict[str, list[walk.RouteRef]] = {}
    for ref in walk.routes(snap):
        act = walk.action(ref.route)
        if act is None:
            continue
        names = walk.forward_clusters(act) + walk.mirror_clusters(
            act.request_mirror_policies, "route.request_mirror_policies"
        )
        for name, _field in names:
            out.setdefault(name, []).append(ref)
    return out


def with_service(
    snap: Snapshot,
    res: Resources,
    *,
    shared: bool = False,
    unjudged: Collection[str] = (),
) -> Iterator[tuple[Cluster, Dialled, list[walk.RouteRef]]]:
    """Routed clusters of the snapshot whose Service is known (one Service, unless
    ``shared``: then also pods that stand for several, with ``others`` set), but for
    ``unjudged`` ones (serving route kinds the edge does not read)."""
    directory = Directory(res)
    routed = routed_clusters(snap)
    for cluster in snap.clusters:
        if cluster.name in routed and cluster.name not in unjudged:
            found = dialled(cluster, snap, directory)
            if found is not None and (shared or not found.others):
                yield cluster, found, routed[cluster.name]


def backend_finding(
    code: str, rule: str, cluster: Cluster, svc: m.Service, problem: str
) -> Finding:
    """A cluster that breaks the edge's backend contract, located at the Service."""
    where = svc.meta.where()
    service = f"{svc.meta.namespace}/{svc.meta.name}"
    return new(
        code,
        rule,
        file=where.file,
        line=where.line,
        resource=f"Service {service}",
        xds_path=f"clusters[{cluster.name}]",
        actual={"problem": problem},
        cluster=cluster.name,
        service=service,
        problem=problem,
    )
