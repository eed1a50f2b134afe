"""Who is behind an address: from what a cluster dials to a Kubernetes Service port.

The Envoy model speaks of Services (as the spec model does), while xDS speaks of
hostnames and IPs. This directory is the Kubernetes side of that translation and
knows nothing of xDS or of any translator's naming: a DNS name
``<svc>.<ns>.svc.cluster.local`` (or ``<svc>.<ns>.svc``, ``<svc>.<ns>``) is the
Service's port; an IP is a Service's clusterIP or a ready endpoint of one of its
EndpointSlices (dialled on the targetPort, or on the mesh port 15008 when the
workload is reached through its mesh tunnel).

It also says what answers there (``peer``), which is what an upstream TLS handshake
needs: aether gives every pod of a mesh-registered workload (namespace label
``aether.io/managed: "true"``, or a Service in the mesh registry) a sidecar whose
port 15008 speaks mutual TLS only, presenting the SPIFFE identity of the pod's
ServiceAccount, ``spiffe://<trust domain>/ns/<namespace>/sa/<serviceaccount>``, and
requiring a client certificate; the application ports answer cleartext HTTP as
before. A pod without a sidecar has nothing on 15008.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from verifier.gatewayapi.resources import Resources
from verifier.gatewayapi.workloads import address_owners, service_account

MESH_PORT = 15008
CLUSTER_DOMAIN_SUFFIXES = (".svc.cluster.local", ".svc", "")
MESH_LABEL = ("aether.io/managed", "true")
DEFAULT_TRUST_DOMAIN = "cluster.local"


@dataclass(frozen=True, order=True)
class ServicePortRef:
    namespace: str
    service: str
    port: int


@dataclass(frozen=True)
class PortSpec:
    port: int
    target_port: str  # a number or a container port name
    name: str = ""


@dataclass(frozen=True)
class ServiceSpec:
    namespace: str
    name: str
    cluster_ip: str | None
    ports: tuple[PortSpec, ...]


@dataclass(frozen=True)
class SliceSpec:
    namespace: str
    service: str
    addresses: tuple[str, ...]
    ports: tuple[tuple[str, int], ...]  # (name, port)
    # The ServiceAccount each address's pod runs as (aligned with ``addresses``;
    # empty: unknown), and whether those pods have the mesh sidecar.
    accounts: tuple[str, ...] = ()
    meshed: bool = False


@dataclass(frozen=True)
class Peer:
    """What answers a connection to an address and port, as far as a handshake goes.

    ``identity`` is the URI SAN of the certificate a TLS-only peer presents (None:
    it speaks cleartext); such a peer also demands a client certificate.
    ``answers`` False: nothing accepts the connection (it is refused).
    """

    answers: bool
    identity: str | None = None
    why: str = ""

    @property
    def tls(self) -> bool:
        return self.identity is not None


@dataclass(frozen=True)
class Resolution:
    """The Service port behind a cluster's targets, or why there is none."""

    target: ServicePortRef | None
    notes: tuple[str, ...] = ()
    # Every Service port the targets fit, ``target`` first: pods shared by several
    # Services (or ports with one targetPort) are all of them at once.
    candidates: tuple[ServicePortRef, ...] = ()


@dataclass
class BackendDirectory:
    services: dict[tuple[str, str], ServiceSpec] = field(default_factory=dict)
    _by_ip: dict[tuple[str, int], set[ServicePortRef]] = field(default_factory=dict)
    _pods: dict[str, set[tuple[str, str]]] = field(default_factory=dict)  # ip -> services
    # Services whose EndpointSlices list no ready address: nothing answers behind them.
    _unready: set[tuple[str, str]] = field(default_factory=set)
    trust_domain: str = DEFAULT_TRUST_DOMAIN
    _accounts: dict[str, tuple[str, str]] = field(default_factory=dict)  # ip -> (ns, sa)
    _meshed: set[str] = field(default_factory=set)  # pod IPs with the mesh sidecar
    _cluster_ips: set[str] = field(default_factory=set)

    @classmethod
    def build(
        cls,
        services: Iterable[ServiceSpec],
        slices: Iterable[SliceSpec],
        trust_domain: str = DEFAULT_TRUST_DOMAIN,
    ) -> BackendDirectory:
        d = cls(trust_domain=trust_domain)
        for s in services:
            d.services[(s.namespace, s.name)] = s
            if s.cluster_ip and s.cluster_ip != "None":
                d._cluster_ips.add(s.cluster_ip)
                for p in s.ports:
                    d._by_ip.setdefault((s.cluster_ip, p.port), set()).add(
                        ServicePortRef(s.namespace, s.name, p.port)
                    )
        ready: set[tuple[str, str]] = set()
        for sl in slices:
            svc = d.services.get((sl.namespace, sl.service))
            if svc is None:
                continue
            (ready if sl.addresses else d._unready).add((sl.namespace, sl.service))
            for i, addr in enumerate(sl.addresses):
                d._pods.setdefault(addr, set()).add((sl.namespace, sl.service))
                account = sl.accounts[i] if i < len(sl.accounts) else ""
                if account:
                    d._accounts.setdefault(addr, (sl.namespace, account))
                if sl.meshed:
                    d._meshed.add(addr)
                for p in svc.ports:
                    for name, number in sl.ports:
                        # An EndpointSlice names its ports after the Service's ports,
                        # and only a Service with a single port may leave it unnamed:
                        # the unnamed slice port is that port, whatever its targetPort
                        # (a container port name like 'http-web-svc', resolved per pod).
                        if (
                            p.target_port == str(number)
                            or p.name == name
                            or (p.target_port == name and bool(name))
                        ):
                            d._by_ip.setdefault((addr, number), set()).add(
                                ServicePortRef(sl.namespace, sl.service, p.port)
                            )
        d._unready -= ready
        return d

    def ready(self, namespace: str, service: str) -> bool:
        """False when the Service's EndpointSlices list no ready address: its clusterIP
        refuses connections and its headless name has no address, as in a cluster. A
        Service without any EndpointSlice is taken to answer (nothing says otherwise)."""
        return (namespace, service) not in self._unready

    def unready_names(self) -> frozenset[str]:
        """Every DNS name of the Services with no ready endpoint."""
        return frozenset(
            f"{svc}.{ns}{suffix}" for ns, svc in self._unready for suffix in CLUSTER_DOMAIN_SUFFIXES
        )

    def by_dns(self, host: str, port: int) -> ServicePortRef | None:
        """``<svc>.<ns>[.svc[.cluster.local]]`` on one of the Service's ports."""
        for key in dns_service_keys(host):
            svc = self.services.get(key)
            if svc is not None and any(p.port == port for p in svc.ports):
                return ServicePortRef(svc.namespace, svc.name, port)
        return None

    def by_ip(self, ip: str, port: int) -> set[ServicePortRef]:
        return self._by_ip.get((ip, port), set())

    def mesh_services(self, ip: str) -> set[tuple[str, str]]:
        return self._pods.get(ip, set())

    def identity(self, ip: str) -> str | None:
        """The SPIFFE ID of the pod at ``ip``, when it is known to run as a ServiceAccount."""
        found = self._accounts.get(ip)
        if found is None:
            return None
        return f"spiffe://{self.trust_domain}/ns/{found[0]}/sa/{found[1]}"

    def peer(self, host: str, port: int, *, dns: bool = False) -> Peer | None:
        """What answers ``host``:``port`` (a DNS name when ``dns``), or None when the
        address is nobody this directory knows (the caller assumes it answers)."""
        if dns:
            ref = self.by_dns(host, port)
            return None if ref is None else Peer(True, why=f"{host} is a Service: cleartext")
        if port == MESH_PORT and host in self._pods:
            if host not in self._meshed:
                return Peer(False, why=f"pod {host} has no mesh sidecar: nothing listens on 15008")
            identity = self.identity(host)
            if identity is None:
                return None
            return Peer(True, identity, f"the sidecar of pod {host} presents {identity}")
        if self.by_ip(host, port):
            kind = "a pod" if host in self._pods else "a Service"
            return Peer(True, why=f"{host}:{port} is {kind}: cleartext")
        if host in self._cluster_ips:  # kube-proxy has no rule for that port
            return Peer(False, why=f"clusterIP {host} has no Service port {port}")
        return None

    def resolve(
        self,
        targets: Sequence[tuple[str, int]],
        *,
        dns: bool,
        identity_namespace: str | None = None,
        sni: str | None = None,
    ) -> Resolution:
        """The one Service port that every target belongs to."""
        if not targets:
            return Resolution(None, ("the cluster has no endpoints",))
        found: set[ServicePortRef] | None = None
        notes: list[str] = []
        for host, port in targets:
            refs = self._target(host, port, dns, identity_namespace, sni, notes)
            found = refs if found is None else found & refs
        if not found:
            notes.append("its endpoints are no single Kubernetes Service port")
            return Resolution(None, tuple(notes))
        ordered = sorted(found)
        if len(ordered) > 1:
            notes.append(
                "its endpoints fit several Service ports ("
                + ", ".join(f"{r.namespace}/{r.service}:{r.port}" for r in ordered)
                + f"); taking {ordered[0].namespace}/{ordered[0].service}:{ordered[0].port}"
            )
        return Resolution(ordered[0], tuple(notes), tuple(ordered))

    def _target(
        self,
        host: str,
        port: int,
        dns: bool,
        identity_namespace: str | None,
        sni: str | None,
        notes: list[str],
    ) -> set[ServicePortRef]:
        if dns:
            ref = self.by_dns(host, port)
            if ref is not None:
                return {ref}
        refs = set(self.by_ip(host, port))
        if refs or port != MESH_PORT:
            return refs
        # The mesh port carries every Service port of the workload; which one is meant
        # is the tunnel's business, so narrow by the identities the cluster insists on,
        # then by the SNI, which names the Service port (docs/mesh.md: "a mesh client
        # sends <svc>.<ns>.svc.cluster.local for a Service with one port ... and
        # <port>.<svc>.<ns>.svc.cluster.local for a Service with several").
        services = {
            s
            for s in self.mesh_services(host)
            if identity_namespace is None or s[0] == identity_namespace
        }
        if sni is not None:
            named = {ref for s in services for ref in self._sni_ports(sni, s)}
            if named:
                return named
        out: set[ServicePortRef] = set()
        for ns, name in services:
            ports = self.services[(ns, name)].ports
            if len(ports) > 1:
                notes.append(
                    f"{ns}/{name} has {len(ports)} ports and the mesh port does not say which"
                )
            out |= {ServicePortRef(ns, name, p.port) for p in ports[:1]}
        return out

    def _sni_ports(self, sni: str, service: tuple[str, str]) -> set[ServicePortRef]:
        """The port of ``service`` a mesh tunnel's SNI names: ``<svc>.<ns>[.svc[.cluster.
        local]]`` for a Service with one port, ``<port>.<svc>.<ns>...`` for any."""
        ns, name = service
        ports = self.services[service].ports
        stem = f"{name}.{ns}"
        wanted = sni.lower().rstrip(".")
        for suffix in CLUSTER_DOMAIN_SUFFIXES:
            if wanted == stem + suffix and len(ports) == 1:
                return {ServicePortRef(ns, name, ports[0].port)}
            head, dot, rest = wanted.partition(".")
            if dot and rest == stem + suffix and head.isdigit():
                return {ServicePortRef(ns, name, p.port) for p in ports if p.port == int(head)}
        return set()


def dns_service_keys(host: str) -> list[tuple[str, str]]:
    """The (namespace, name) of each Service ``host`` may be a DNS name of
    (``<svc>.<ns>[.svc[.cluster.local]]``), in the order ``by_dns`` tries them."""
    h = host.lower().rstrip(".")
    out = []
    for suffix in CLUSTER_DOMAIN_SUFFIXES:
        if suffix and not h.endswith(suffix):
            continue
        parts = (h[: len(h) - len(suffix)] if suffix else h).split(".")
        if len(parts) == 2:
            out.append((parts[1], parts[0]))
    return out


def _pod_account(res: Resources, owners: set[tuple[str, str, str]], otherwise: str) -> str:
    """The ServiceAccount of the pod at an address: its workload's, when one workload
    runs it (a pod two Services select, each by another label, is one workload's, and
    presents that identity whichever Service's slice lists it first); ``otherwise``
    the Service's."""
    if len(owners) == 1:
        return res.workloads[next(iter(owners))].service_account
    return otherwise


def backend_directory_from(
    res: Resources,
    *,
    trust_domain: str = DEFAULT_TRUST_DOMAIN,
    registry: frozenset[tuple[str, str]] = frozenset(),
) -> BackendDirectory:
    """Services and EndpointSlices of ``res``, as the cluster's DNS and kube-proxy see
    them, with each pod's identity and mesh membership (``registry``: (namespace,
    Service) pairs registered in the mesh besides labelled namespaces)."""
    services = [
        ServiceSpec(
            s.meta.namespace,
            s.meta.name,
            s.cluster_ip,
            tuple(PortSpec(p.port, p.target_port, p.name) for p in s.ports),
        )
        for s in res.services.values()
    ]
    slices = []
    owners = address_owners(res)
    for s in res.endpoint_slices.values():
        ns, svc = s.meta.namespace, s.service_name
        account = service_account(res, ns, svc)
        meshed = res.namespace_labels(ns).get(MESH_LABEL[0]) == MESH_LABEL[1] or (
            (ns, svc) in registry
        )
        accounts = tuple(_pod_account(res, owners.get(a, set()), account) for a in s.addresses)
        slices.append(SliceSpec(ns, svc, s.addresses, s.ports, accounts, meshed))
    return BackendDirectory.build(services, slices, trust_domain)
