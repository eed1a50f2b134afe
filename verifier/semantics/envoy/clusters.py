"""From a cluster name to the Service it reaches, through what the cluster dials.

Decisions never read a cluster's name or metadata: the endpoints do (DNS names for
STRICT_DNS / LOGICAL_DNS / ``envoy.cluster.dns``; addresses for EDS and STATIC,
EDS taking its ClusterLoadAssignment from the snapshot, named by
``eds_cluster_config.service_name`` or else the cluster name), and for mesh
tunnels the SAN identity and SNI the cluster insists on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from verifier.semantics.directory import BackendDirectory
from verifier.semantics.envoy.strings import compile_regex
from verifier.semantics.request import Backend
from verifier.xds import read
from verifier.xds.enums import ClusterDiscoveryType
from verifier.xds.layout import XdsLoadError

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.cluster.v3 import Cluster
    from envoy_data_plane.envoy.config.endpoint.v3 import ClusterLoadAssignment

UPSTREAM_TLS = "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"

DNS_TYPES = frozenset({ClusterDiscoveryType.STRICT_DNS, ClusterDiscoveryType.LOGICAL_DNS})
DNS_EXTENSION = "envoy.cluster.dns"
# SPIFFE IDs of Kubernetes workloads: spiffe://<trust domain>/ns/<namespace>/sa/<sa>
SPIFFE = compile_regex(r"spiffe://[^/]+/ns/([^/]+)/sa/[^/]+")


@dataclass(frozen=True)
class ClusterTarget:
    """What a route's cluster reaches; ``backend`` is None when the cluster is absent."""

    backend: Backend | None
    dns_host: str | None = None  # for auto_host_rewrite
    notes: tuple[str, ...] = ()
    # The cluster exists but has no host to send to: Envoy answers 503 ("no healthy
    # upstream", or a refused connection to a Service with no ready endpoint).
    unavailable: bool = False


def _identity_and_sni(cluster: Cluster) -> tuple[str | None, str | None]:
    ts = cluster.transport_socket
    if ts is None or ts.typed_config is None:
        return None, None
    try:
        tls = read.unpack(ts.typed_config)
    except XdsLoadError:
        return None, None
    if not read.is_a(tls, UPSTREAM_TLS):
        return None, None
    namespaces: set[str] = set()
    common = tls.common_tls_context
    contexts = []
    if common is not None:
        if common.validation_context is not None:
            contexts.append(common.validation_context)
        combined = common.combined_validation_context
        if combined is not None and combined.default_validation_context is not None:
            contexts.append(combined.default_validation_context)
    for ctx in contexts:
        for san in ctx.match_typed_subject_alt_names:
            if san.matcher is not None and san.matcher.exact:
                groups = SPIFFE.groups(san.matcher.exact)
                if groups is not None:
                    namespaces.add(groups[0])
    ns = next(iter(namespaces)) if len(namespaces) == 1 else None
    return ns, tls.sni or None


def _targets(assignment: ClusterLoadAssignment | None) -> list[tuple[str, int, str]]:
    out: list[tuple[str, int, str]] = []
    if assignment is None:
        return out
    for locality in assignment.endpoints:
        for lb in locality.lb_endpoints:
            ep = lb.endpoint
            if ep is None or ep.address is None or ep.address.socket_address is None:
                continue
            sa = ep.address.socket_address
            out.append((sa.address, sa.port_value or 0, ep.hostname))
    return out


def target_hosts(cluster: Cluster, assignments: dict[str, ClusterLoadAssignment]) -> set[str]:
    """Every endpoint host ``ClusterResolver._resolve`` may look up for ``cluster``: its
    own load assignment's and those of EDS under its name or service name (a superset
    of the one it takes). check --baseline digests the Services these may reach."""
    eds = cluster.eds_cluster_config
    names = {cluster.name, (eds.service_name if eds else "") or cluster.name}
    found = [cluster.load_assignment, *(assignments.get(n) for n in names)]
    return {host for a in found for host, _port, _hostname in _targets(a)}


class ClusterResolver:
    def __init__(
        self,
        clusters: tuple[Cluster, ...],
        endpoints: tuple[ClusterLoadAssignment, ...],
        directory: BackendDirectory,
    ) -> None:
        self.clusters = {c.name: c for c in clusters}
        self.assignments = {e.cluster_name: e for e in endpoints}
        self.directory = directory
        self._cache: dict[str, ClusterTarget] = {}

    def target(self, name: str) -> ClusterTarget:
        found = self._cache.get(name)
        if found is None:
            found = self._cache[name] = self._resolve(name)
        return found

    def _resolve(self, name: str) -> ClusterTarget:
        cluster = self.clusters.get(name)
        if cluster is None:
            return ClusterTarget(None, notes=(f"cluster {name!r} does not exist",))
        kind, _ = read.one_of(cluster, "cluster_discovery_type")
        dns = False
        modelled = True  # whether "no endpoint" means no host to send to
        notes: list[str] = []
        if kind == "cluster_type":
            ext = cluster.cluster_type.name if cluster.cluster_type else ""
            dns = ext == DNS_EXTENSION
            if not dns:
                modelled = False
                notes.append(f"cluster type extension {ext!r} not modelled")
            assignment = cluster.load_assignment
        else:
            ctype = cluster.type if cluster.type is not None else ClusterDiscoveryType.STATIC
            dns = ctype in DNS_TYPES
            if ctype == ClusterDiscoveryType.EDS:
                eds = cluster.eds_cluster_config
                service = (eds.service_name if eds else "") or name
                assignment = self.assignments.get(service) or cluster.load_assignment
            elif ctype == ClusterDiscoveryType.ORIGINAL_DST:
                notes.append("ORIGINAL_DST cluster: the destination is the client's choice")
                modelled = False
                assignment = None
            else:
                assignment = cluster.load_assignment
        targets = _targets(assignment)
        ns, sni = _identity_and_sni(cluster)
        res = self.directory.resolve(
            [(h, p) for h, p, _ in targets], dns=dns, identity_namespace=ns, sni=sni
        )
        notes += [f"cluster {name!r}: {n}" for n in res.notes]
        dns_host = None
        if targets:
            # auto_host_rewrite: "the host header will be swapped with the hostname of
            # the upstream host": the endpoint's hostname, else (DNS) the DNS name.
            host, _port, hostname = targets[0]
            dns_host = hostname or (host if dns else None)
        unavailable = not targets and modelled
        if res.target is None:
            backend = Backend("", name, 0)
        else:
            t = res.target
            aliases = tuple((c.namespace, c.service, c.port) for c in res.candidates if c != t)
            backend = Backend(t.namespace, t.service, t.port, aliases=aliases)
            if not self.directory.ready(t.namespace, t.service):
                unavailable = True
                notes.append(f"cluster {name!r}: {t.namespace}/{t.service} has no ready endpoint")
        return ClusterTarget(backend, dns_host, tuple(notes), unavailable)
