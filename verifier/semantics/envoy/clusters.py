"""From a cluster name to the Service it reaches, through what the cluster dials.

Decisions never read a cluster's name or metadata: the endpoints do (DNS names for
STRICT_DNS / LOGICAL_DNS / ``envoy.cluster.dns``; addresses for EDS and STATIC,
EDS taking its ClusterLoadAssignment from the snapshot, named by
``eds_cluster_config.service_name`` or else the cluster name), and for mesh
tunnels the SAN identity and SNI the cluster insists on. The handshake with what
answers there (``upstream_tls``) decides whether a host can be used at all.

An ORIGINAL_DST cluster has no endpoints: its host is chosen per connection
(original_dst_cluster.cc, ``chooseHost``): the address an ``x-envoy-original-dst-host``
style header names when ``use_http_header`` is set and the header parses, else the
downstream connection's local address "if localAddressRestored() returns 'true'" (the
``original_dst`` listener filter restored it), with ``upstream_port_override``
replacing the port; with none of these there is no host ("no healthy upstream").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from verifier.semantics.directory import BackendDirectory
from verifier.semantics.envoy.binding import parse_ip
from verifier.semantics.envoy.downstream import Downstream
from verifier.semantics.envoy.strings import compile_regex
from verifier.semantics.envoy.upstream_tls import Handshake, handshake, transport
from verifier.semantics.request import Backend
from verifier.xds import read
from verifier.xds.enums import ClusterDiscoveryType
from verifier.xds.layout import XdsLoadError

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.cluster.v3 import Cluster
    from envoy_data_plane.envoy.config.endpoint.v3 import ClusterLoadAssignment
    from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import Secret

UPSTREAM_TLS = "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"

DNS_TYPES = frozenset({ClusterDiscoveryType.STRICT_DNS, ClusterDiscoveryType.LOGICAL_DNS})
DNS_EXTENSION = "envoy.cluster.dns"
# SPIFFE IDs of Kubernetes workloads: spiffe://<trust domain>/ns/<namespace>/sa/<sa>
SPIFFE = compile_regex(r"spiffe://[^/]+/ns/([^/]+)/sa/[^/]+")
# Http::Headers::get().EnvoyOriginalDstHost: use_http_header's default header.
ORIGINAL_DST_HEADER = "x-envoy-original-dst-host"


@dataclass(frozen=True)
class OriginalDst:
    """An ORIGINAL_DST cluster's OriginalDstLbConfig: where its host comes from."""

    header: str | None  # use_http_header: the header naming the host
    port_override: int | None


@dataclass(frozen=True)
class ClusterTarget:
    """What a route's cluster reaches; ``backend`` is None when the cluster is absent."""

    backend: Backend | None
    dns_host: str | None = None  # for auto_host_rewrite
    notes: tuple[str, ...] = ()
    # The cluster exists but has no host to send to: Envoy answers 503 ("no healthy
    # upstream", a refused connection to a Service with no ready endpoint, a failed
    # handshake); ``trace`` says why, or how the host is reached (TLS, identity).
    unavailable: bool = False
    trace: tuple[str, ...] = ()
    # Set for an ORIGINAL_DST cluster: the host depends on the connection
    # (``ClusterResolver.target_for``).
    original_dst: OriginalDst | None = None
    # The peer identity the cluster accepted over mTLS (its certificate's URI SAN).
    identity: str | None = None


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


def _original_dst(cluster: Cluster) -> OriginalDst:
    config = cluster.original_dst_lb_config
    if config is None:
        return OriginalDst(None, None)
    header = (config.http_header_name or ORIGINAL_DST_HEADER).lower()
    port = config.upstream_port_override
    return OriginalDst(header if config.use_http_header else None, port)


def _host_port(text: str) -> tuple[str, int] | None:
    """``10.0.0.1:80`` or ``[::1]:80`` (parseInternetAddressAndPortNoThrow), else None."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not port.isdigit() or parse_ip(host) is None or int(port) > 65535:
        return None
    return str(parse_ip(host)), int(port)


class ClusterResolver:
    def __init__(
        self,
        clusters: tuple[Cluster, ...],
        endpoints: tuple[ClusterLoadAssignment, ...],
        directory: BackendDirectory,
        secrets: tuple[Secret, ...] = (),
    ) -> None:
        self.clusters = {c.name: c for c in clusters}
        self.assignments = {e.cluster_name: e for e in endpoints}
        self.directory = directory
        self.secrets = {s.name: s for s in secrets}
        self._cache: dict[str, ClusterTarget] = {}
        self._dialled: dict[tuple[str, str, int], ClusterTarget] = {}

    def target(self, name: str) -> ClusterTarget:
        found = self._cache.get(name)
        if found is None:
            found = self._cache[name] = self._resolve(name)
        return found

    def depends_on_connection(self, name: str) -> bool:
        """Whether what ``name`` reaches depends on the connection (ORIGINAL_DST)."""
        return self.target(name).original_dst is not None

    def target_for(
        self, name: str, conn: Downstream | None, headers: dict[str, str] | None = None
    ) -> ClusterTarget:
        """``target``, with an ORIGINAL_DST cluster's host chosen for ``conn`` (and, with
        use_http_header, the request's ``headers``)."""
        found = self.target(name)
        config = found.original_dst
        if config is None:
            return found
        dest: tuple[str, int] | None = None
        how = ""
        if config.header is not None and headers and config.header in headers:
            dest = _host_port(headers[config.header].split(",")[0].strip())
            how = f"header {config.header}" if dest else ""
        if dest is None and conn is not None and conn.restored:
            dest, how = (conn.address, conn.port), "the connection's original destination"
        if dest is None:
            why = (
                f"ORIGINAL_DST cluster {name!r}: the connection's destination was not "
                "restored (no original_dst listener filter saw a redirected connection): "
                "no host"
            )
            return ClusterTarget(Backend("", name, 0), unavailable=True, trace=(why,))
        if config.port_override:
            dest = (dest[0], config.port_override)
        key = (name, *dest)
        known = self._dialled.get(key)
        if known is None:
            reached = self._hosts(name, self.clusters[name], [(*dest, "")], False, [])
            first = f"ORIGINAL_DST cluster {name!r} dials {how}, {dest[0]}:{dest[1]}"
            outside = reached.backend is None or not reached.backend.namespace
            known = self._dialled[key] = dataclasses.replace(
                reached,
                # An address no Service or pod of the directory owns: named as dialled.
                backend=Backend("", dest[0], dest[1]) if outside else reached.backend,
                notes=() if outside else reached.notes,
                trace=(first, *reached.trace),
            )
        return known

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
                return ClusterTarget(Backend("", name, 0), original_dst=_original_dst(cluster))
            else:
                assignment = cluster.load_assignment
        return self._hosts(name, cluster, _targets(assignment), dns, notes, modelled)

    def _hosts(
        self,
        name: str,
        cluster: Cluster,
        targets: list[tuple[str, int, str]],
        dns: bool,
        notes: list[str],
        modelled: bool = True,
    ) -> ClusterTarget:
        """What the cluster reaches through ``targets`` (host, port, hostname)."""
        ns, sni = _identity_and_sni(cluster)
        hosts = [(h, p) for h, p, _ in targets]
        res = self.directory.resolve(hosts, dns=dns, identity_namespace=ns, sni=sni)
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
        shake, more = self._handshakes(name, cluster, hosts, dns)
        notes += more
        said = shake.failure or shake.line
        return ClusterTarget(
            backend,
            dns_host,
            tuple(notes),
            unavailable or shake.failure is not None,
            (f"cluster {name!r}: {said}",) if said else (),
            identity=shake.identity,
        )

    def _handshakes(
        self, name: str, cluster: Cluster, hosts: list[tuple[str, int]], dns: bool
    ) -> tuple[Handshake, list[str]]:
        """How connecting to the cluster's hosts goes: the first failure when every host
        fails, else the first host that works; and notes. Hosts that disagree are
        noted: which one the load balancer picks is not modelled."""
        how = transport(cluster, self.secrets)
        notes = [f"cluster {name!r}: {n}" for n in how.notes]
        results = [
            handshake(how, self.directory.peer(host, port, dns=dns), f"{host}:{port}")
            for host, port in hosts
        ]
        failed = [r for r in results if r.failure is not None]
        if failed and len(failed) == len(results):
            return failed[0], notes
        if failed:
            notes.append(f"cluster {name!r}: some hosts fail the handshake ({failed[0].failure})")
        return next((r for r in results if r.failure is None), Handshake(None)), notes
