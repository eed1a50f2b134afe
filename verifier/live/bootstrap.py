"""What to stand in for a snapshot's backends, and its bootstrap rewritten for one machine.

The snapshot's routing semantics are never touched. Only what cannot exist on
one machine is rewritten, and every rewrite is recorded:

* listener addresses: a listener the xDS binds to a Gateway's address a.b.c.d
  binds 127.b.c.d:0 instead (a wildcard one 127.0.0.1:0; the kernel picks a
  fresh port; see envoy_process), and ``listener_ports`` keeps the (address,
  port) of the xDS, so each Gateway keeps an address of its own and nothing is
  sent to the real one. Clients still send the Gateway port in Host, so nothing
  that looks at Host (redirect ports, host matching) sees the change.
* DNS: STRICT_DNS clusters keep dialling ``<svc>.<ns>.svc.cluster.local``;
  Envoy's c-ares resolver is pointed at our DNS server (bootstrap
  ``typed_dns_resolver_config``; cluster-level resolver settings dropped), which
  answers with the loopback IP of that Service's echo backend (one 127.x.y.z per
  Service, so every Service keeps its own port numbers).
* EDS: the snapshot's assignments are inlined (STATIC), as in
  ``bootstrap_for_validation``, and each pod IP is replaced by the loopback IP
  of the Service's echo backend; ``endpoint_mappings`` lists each replacement.
* SDS: HTTPS listeners name their certificates (``<namespace>/<name>``) and
  mesh clusters name the secrets ``default`` and ``ROOTCA`` over ADS. The
  references keep their names; only their source changes, to one file-based
  SDS source (``path_config_source``) per secret, a file of mode 0600 in the
  run's private directory holding the listener's certificate and key, or a
  throw-away CA and edge certificate for the mesh. Static bootstrap ``secrets`` would only satisfy
  references *without* an ``sds_config``, and an ADS server is more machinery
  than the oracle needs; a file source is still SDS, so the by-name wiring is
  exercised. Mesh echo backends present SPIFFE certificates for their pods'
  ServiceAccount, read from the Resources (not from the cluster's SAN matcher),
  so a translator pinning the wrong identity fails the handshake.

A translator that matched on the listener's *destination port* (filter chain
``destination_port``) would need that rewritten too; ours does not, and a
rewrite of it would be added here.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifier.gatewayapi.resources import Resources
from verifier.live.echo import EchoBackend
from verifier.xds.codec import to_json_dict
from verifier.xds.snapshot import REDACTED, Snapshot, bootstrap_for_validation

LISTEN_IP = "127.0.0.1"
H2C_APP_PROTOCOL = "kubernetes.io/h2c"
DNS_TYPES = frozenset({"STRICT_DNS", "LOGICAL_DNS"})
SECRET_TYPE = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
CARES = "type.googleapis.com/envoy.extensions.network.dns_resolver.cares.v3.CaresDnsResolverConfig"
FQDN = re.compile(r"^([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.[a-z0-9.-]+$")

ServiceKey = tuple[str, str]  # (namespace, name)


class BootstrapError(ValueError):
    """The snapshot needs something the embedded data plane cannot provide."""


@dataclass(frozen=True)
class EndpointMapping:
    """One machine-local rewrite of a cluster endpoint (pod IP -> echo loopback IP)."""

    cluster: str
    address: str
    port: int
    loopback: str
    loopback_port: int


@dataclass
class BackendPlan:
    """One Service to stand in for: its ports, and how each is spoken."""

    namespace: str
    service: str
    ports: dict[int, tuple[bool, bool]] = field(default_factory=dict)  # port -> (h2c, mesh tls)
    dns_names: set[str] = field(default_factory=set)
    ip_endpoints: list[tuple[str, str, int]] = field(default_factory=list)  # cluster, addr, port
    has_endpoints: bool = True

    @property
    def key(self) -> ServiceKey:
        return (self.namespace, self.service)


@dataclass
class LocalBootstrap:
    config: dict[str, Any]
    # Envoy listener name -> the (address, port) the xDS binds it to
    listener_ports: dict[str, tuple[str, int]]
    endpoint_mappings: list[EndpointMapping]
    notes: list[str]


def walk(node: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object inside ``node``, depth first."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk(item)


def socket_addresses(assignment: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        lb["endpoint"]["address"]["socket_address"]
        for loc in assignment.get("endpoints", [])
        for lb in loc.get("lb_endpoints", [])
        if "socket_address" in lb.get("endpoint", {}).get("address", {})
    ]


# --- planning ---------------------------------------------------------------------------------


@dataclass
class _Planner:
    res: Resources
    plans: dict[ServiceKey, BackendPlan] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def plan(self, key: ServiceKey) -> BackendPlan:
        return self.plans.setdefault(key, BackendPlan(*key))

    def owner_of(self, address: str, sni: str | None, port: int | None = None) -> ServiceKey | None:
        """The Service whose EndpointSlice lists this pod IP (on ``port``, when one does;
        the TLS SNI breaks ties)."""
        listing = [s for s in self.res.endpoint_slices.values() if address in s.addresses]
        on_port = [s for s in listing if any(n == port for _, n in s.ports)]
        owners = sorted({(s.meta.namespace, s.service_name) for s in on_port or listing})
        if len(owners) > 1 and sni and (m := FQDN.match(sni)):
            named = (m.group(2), m.group(1))
            if named in owners:
                return named
        if len(owners) > 1:
            self.notes.append(f"pod IP {address} is behind {owners}; using {owners[0]}")
        return owners[0] if owners else None

    def dns(self, cluster: str, sa: Mapping[str, Any], tls: bool) -> None:
        name = str(sa.get("address", "")).lower()
        m = FQDN.match(name)
        key = (m.group(2), m.group(1)) if m else None
        svc = self.res.services.get(key) if key else None
        if key is None or svc is None:
            self.notes.append(f"{cluster}: {name} is no Service; DNS answers NXDOMAIN")
            return
        plan = self.plan(key)
        port = int(sa.get("port_value", 0))
        app = next((p.app_protocol for p in svc.ports if p.port == port), None)
        plan.ports[port] = (app == H2C_APP_PROTOCOL, tls)
        plan.dns_names.add(name)
        plan.has_endpoints = any(
            (s.meta.namespace, s.service_name) == key and s.addresses
            for s in self.res.endpoint_slices.values()
        )

    def pod_ip(self, cluster: str, sa: Mapping[str, Any], tls: bool, sni: str | None) -> None:
        port = int(sa.get("port_value", 0))
        owner = self.owner_of(str(sa["address"]), sni, port)
        if owner is None:
            self.notes.append(f"{cluster}: no Service owns {sa['address']}")
            return
        plan = self.plan(owner)
        plan.ports[port] = (self.speaks_h2c(owner, port), tls)
        plan.ip_endpoints.append((cluster, str(sa["address"]), port))

    def speaks_h2c(self, key: ServiceKey, target: int) -> bool:
        """A pod port speaks h2c when the Service ports behind it say so (all of them,
        when none names that targetPort: then the ports cannot be told apart)."""
        svc = self.res.services.get(key)
        ports = svc.ports if svc else ()
        named = [p for p in ports if p.target_port == str(target)] or list(ports)
        return bool(named) and all(p.app_protocol == H2C_APP_PROTOCOL for p in named)


def plan_backends(
    res: Resources, snap: Snapshot
) -> tuple[dict[ServiceKey, BackendPlan], list[str]]:
    """The Services the snapshot's clusters reach, by DNS name or by pod IP, and how."""
    planner = _Planner(res)
    assignments = {e.cluster_name: to_json_dict(e) for e in snap.endpoints}
    for cluster in snap.clusters:
        doc = to_json_dict(cluster)
        kind = str(doc.get("type", "STATIC"))
        tls = "transport_socket" in doc
        if kind in DNS_TYPES:
            for sa in socket_addresses(doc.get("load_assignment", {})):
                planner.dns(cluster.name, sa, tls)
        elif kind in ("EDS", "STATIC"):
            service = doc.get("eds_cluster_config", {}).get("service_name") or cluster.name
            assignment = assignments.get(service) if kind == "EDS" else doc.get("load_assignment")
            sni = next((n["sni"] for n in walk(doc) if isinstance(n.get("sni"), str)), None)
            for sa in socket_addresses(assignment or {}):
                planner.pod_ip(cluster.name, sa, tls, sni)
        else:
            planner.notes.append(f"{cluster.name}: cluster type {kind} not emulated")
    return planner.plans, planner.notes


# --- secrets ----------------------------------------------------------------------------------


def sds_secret_names(snap: Snapshot, *, listeners: bool = False) -> tuple[set[str], set[str]]:
    """(identity secret names, validation secret names) the clusters reference (and the
    listeners, for a sidecar, whose inbound side presents the same identity)."""
    docs = [to_json_dict(c) for c in (*snap.clusters, *(snap.listeners if listeners else ()))]
    identities = {
        s["name"] for n in walk(docs) for s in n.get("tls_certificate_sds_secret_configs", [])
    }
    roots = {
        n["validation_context_sds_secret_config"]["name"]
        for n in walk(docs)
        if "validation_context_sds_secret_config" in n
    }
    return identities, roots


def listener_secrets(snap: Snapshot) -> list[dict[str, Any]]:
    """The snapshot's own SDS secrets (the listeners' certificates), as Envoy is served them.

    A config_dump shows keys as ``[redacted]``; Envoy cannot terminate TLS with that,
    so such a snapshot cannot be run here, and saying so beats a failed handshake.
    """
    out = [to_json_dict(s, with_type=True) for s in snap.secrets]
    for doc in out:
        if REDACTED in json.dumps(doc):
            raise BootstrapError(
                f"SDS secret {doc.get('name')!r} has its key redacted (a config_dump never "
                "shows keys): the live pass needs the xDS the translator makes, keys included"
            )
    return out


def sds_secrets(
    snap: Snapshot, cert_pem: str, key_pem: str, ca_pem: str, *, listeners: bool = False
) -> list[dict[str, Any]]:
    """Secret resources for every name the clusters (and ``listeners``) use: the proxy's
    identity and the trust bundle."""
    identities, roots = sds_secret_names(snap, listeners=listeners)
    out: list[dict[str, Any]] = [
        {
            "@type": SECRET_TYPE,
            "name": name,
            "tls_certificate": {
                "certificate_chain": {"inline_string": cert_pem},
                "private_key": {"inline_string": key_pem},
            },
        }
        for name in sorted(identities)
    ]
    out += [
        {
            "@type": SECRET_TYPE,
            "name": name,
            "validation_context": {"trusted_ca": {"inline_string": ca_pem}},
        }
        for name in sorted(roots)
    ]
    return out


# --- the bootstrap ----------------------------------------------------------------------------


def loopback_for(address: str) -> str:
    """Where a listener the xDS binds to ``address`` really listens: a Gateway's own
    IPv4 address a.b.c.d becomes the loopback address 127.b.c.d, so each Gateway
    keeps an address of its own on this machine and nothing is ever sent to its
    real one; wildcard and IPv6 listeners take ``LISTEN_IP``."""
    parts = address.split(".")
    if address in ("0.0.0.0", "") or len(parts) != 4 or not all(p.isdigit() for p in parts):
        return LISTEN_IP
    return ".".join(["127", *parts[1:]])


def local_bootstrap(
    snap: Snapshot,
    plans: Mapping[ServiceKey, BackendPlan],
    backends: Mapping[ServiceKey, EchoBackend],
    dns: tuple[str, int],
    secrets: list[dict[str, Any]],
    workdir: Path,
) -> LocalBootstrap:
    """``bootstrap_for_validation`` plus the machine-local rewrites of the module docstring."""
    boot: dict[str, Any] = bootstrap_for_validation(
        snap, secrets_path=os.devnull, inline_secrets=False
    )
    out = LocalBootstrap(boot, {}, [], [])
    _sds_files(boot, secrets, workdir)
    static = boot["static_resources"]
    for li in static.get("listeners", []):
        sock = li["address"]["socket_address"]
        bound = str(sock.get("address") or "0.0.0.0")
        out.listener_ports[li["name"]] = (bound, int(sock.get("port_value", 0)))
        li["address"] = {"socket_address": {"address": loopback_for(bound), "port_value": 0}}
    owners = {(c, a, p): k for k, pl in plans.items() for c, a, p in pl.ip_endpoints}
    for cluster in static.get("clusters", []):
        if cluster.get("type") in DNS_TYPES:
            for key in ("dns_resolvers", "typed_dns_resolver_config", "dns_resolution_config"):
                cluster.pop(key, None)
            _remap_dns_ports(cluster, backends, out.notes)
            continue
        for sa in socket_addresses(cluster.get("load_assignment", {})):
            port = int(sa.get("port_value", 0))
            owner = owners.get((cluster["name"], sa["address"], port))
            backend = backends.get(owner) if owner else None
            if backend is None:
                continue
            mapping = EndpointMapping(
                cluster["name"], sa["address"], port, backend.ip, backend.bound.get(port, port)
            )
            out.endpoint_mappings.append(mapping)
            sa["address"], sa["port_value"] = mapping.loopback, mapping.loopback_port
    boot["typed_dns_resolver_config"] = cares_resolver(dns)
    boot["admin"] = {"address": {"socket_address": {"address": LISTEN_IP, "port_value": 0}}}
    boot.setdefault("node", {"id": "edge-verifier-live", "cluster": "edge-verifier"})
    return out


def cares_resolver(dns: tuple[str, int]) -> dict[str, Any]:
    """Bootstrap ``typed_dns_resolver_config``: only our DNS server, names as written
    (no fallback to the host's resolvers, no search domains)."""
    return {
        "name": "envoy.network.dns_resolver.cares",
        "typed_config": {
            "@type": CARES,
            "resolvers": [{"socket_address": {"address": dns[0], "port_value": dns[1]}}],
            "use_resolvers_as_fallback": False,
            "dns_resolver_options": {"no_default_search_domain": True},
        },
    }


def _sds_files(boot: dict[str, Any], secrets: list[dict[str, Any]], workdir: Path) -> None:
    """One file-based SDS source per secret name: Envoy expects exactly one secret per file."""
    by_name = {s["name"]: s for s in secrets}
    for node in walk(boot):
        source = node.get("sds_config")
        if not isinstance(source, dict) or "path_config_source" not in source:
            continue
        name = str(node.get("name", ""))
        if name not in by_name:
            raise BootstrapError(f"no local material for SDS secret {name!r}")
        path = workdir / f"sds-{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.json"
        # Key material: readable by us (and the Envoy we run) only.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(json.dumps({"resources": [by_name[name]]}))
        source["path_config_source"] = {"path": str(path)}


def _remap_dns_ports(
    cluster: dict[str, Any], backends: Mapping[ServiceKey, EchoBackend], notes: list[str]
) -> None:
    """Only if an echo could not bind a privileged Service port (unprivileged runs)."""
    for sa in socket_addresses(cluster.get("load_assignment", {})):
        m = FQDN.match(str(sa.get("address", "")).lower())
        backend = backends.get((m.group(2), m.group(1))) if m else None
        port = int(sa.get("port_value", 0))
        if backend is not None and backend.bound.get(port, port) != port:
            sa["port_value"] = backend.bound[port]
            notes.append(f"{cluster['name']}: port {port} served on {backend.bound[port]}")
