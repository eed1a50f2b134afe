"""The pods a mesh of the input runs, and what the node knows of them: a live mesh's plan.

Read from the resources as the cluster would run them, and from nothing the
translator decides (``verifier.gatewayapi.workloads`` holds the deployment facts
both sides read):

- **pods**: one per ready address of the EndpointSlices (given, or derived as the
  EndpointSlice controller would), each owned by the workload it was derived from,
  or (given) by the one workload every Service listing the address selects; and,
  for a workload no Service selects (a client), as many addresses as it has
  replicas, derived as the controller derives them (``workloads.PodAddresses``),
  apart from every address the input uses. An address no workload owns is a pod of
  its Service, without a sidecar. Two workloads that could own one address are
  refused: which identity answers there would be a guess.
- **ports** a pod answers on: the target ports the slices publish for it and its
  containers' ports.
- **sidecar** and **capture scope** (docs/mesh.md, "Which traffic the sidecar
  sees"): a pod of a workload in a mesh-registered namespace has a sidecar; it
  captures all outbound TCP with ``capture.aether.io/redirect-all: "true"``, else
  only connections to the ClusterIPs of mesh-registered Services.
- **kube-proxy** (``service_rules``): each TCP port of each Service with a ClusterIP,
  DNATed to its ready endpoints on the slice's port of the same name.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from verifier.gatewayapi import model as m
from verifier.gatewayapi import workloads
from verifier.gatewayapi.resources import Resources
from verifier.live.podnet import ServiceRule
from verifier.semantics.directory import DEFAULT_TRUST_DOMAIN


class MeshPlanError(ValueError):
    """The input does not say which pod is which (the message names the address)."""


@dataclass(frozen=True)
class MeshPod:
    """One pod: its workload (``workload`` empty: an endpoint no workload owns)."""

    namespace: str
    workload: str
    name: str
    ip: str
    service_account: str
    sidecar: bool
    captures_all: bool
    ports: tuple[int, ...]

    @property
    def client(self) -> tuple[str, str]:
        return (self.namespace, self.workload)

    def identity(self, trust_domain: str = DEFAULT_TRUST_DOMAIN) -> str:
        return f"spiffe://{trust_domain}/ns/{self.namespace}/sa/{self.service_account}"


def _clusterip(svc: m.Service) -> str | None:
    ip = svc.cluster_ip
    return ip if ip and ip != "None" and svc.type != "ExternalName" else None


def _slices(res: Resources, svc: m.Service) -> Iterator[m.EndpointSlice]:
    key = svc.meta.key
    for sl in res.endpoint_slices.values():
        if (sl.meta.namespace, sl.service_name) == key:
            yield sl


def _slice_ports(res: Resources) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for sl in res.endpoint_slices.values():
        for address in sl.addresses:
            out.setdefault(address, set()).update(number for _name, number in sl.ports)
    return out


def mesh_pods(res: Resources) -> list[MeshPod]:
    """Every pod of the input (module docstring), by namespace, workload and name."""
    owners, ports = workloads.address_owners(res), _slice_ports(res)
    spaces = {a: sl.meta.namespace for sl in res.endpoint_slices.values() for a in sl.addresses}
    by_workload: dict[tuple[str, str, str], list[str]] = {}
    loose: list[tuple[str, str]] = []
    for address, found in sorted(owners.items()):
        if len(found) > 1:
            listed = ", ".join(f"{k[0]} {k[1]}/{k[2]}" for k in sorted(found))
            raise MeshPlanError(f"pod address {address}: which workload runs it? ({listed})")
        if found:
            by_workload.setdefault(next(iter(found)), []).append(address)
        else:
            loose.append((spaces[address], address))
    taken = set(owners) | {ip for s in res.services.values() if (ip := _clusterip(s))}
    derive = workloads.PodAddresses(taken)
    pods = []
    for key, wl in sorted(res.workloads.items()):
        addresses = by_workload.get(key) or derive.of(wl)
        names = workloads.pod_names(wl)
        sidecar = workloads.has_sidecar(res, wl)
        capture = workloads.captures_all(wl)
        own = {c.port for c in wl.container_ports}
        for i, address in enumerate(addresses):
            name = names[i] if i < len(names) else f"{names[0]}-{i}"
            served = tuple(sorted(own | ports.get(address, set())))
            pods.append(
                MeshPod(key[1], key[2], name, address, wl.service_account, sidecar, capture, served)
            )
    for ns, address in loose:
        served = tuple(sorted(ports.get(address, set())))
        name = f"endpoint-{address}"
        pods.append(MeshPod(ns, "", name, address, "default", False, False, served))
    return pods


def capture_scope(res: Resources, registry: frozenset[tuple[str, str]], pod: MeshPod) -> list[str]:
    """The ClusterIPs the pod's sidecar captures connections to (every Service's under
    redirect-all; callers capture every address then, ``captured``)."""
    return sorted(
        ip
        for svc in res.services.values()
        if (ip := _clusterip(svc))
        and (pod.captures_all or workloads.mesh_service(res, registry, *svc.meta.key))
    )


def captured(
    res: Resources, registry: frozenset[tuple[str, str]], pod: MeshPod, address: str
) -> bool:
    """Whether the pod's sidecar captures a connection to ``address``."""
    return pod.sidecar and (pod.captures_all or address in capture_scope(res, registry, pod))


def _endpoints(res: Resources, svc: m.Service, port: m.ServicePort) -> list[tuple[str, int]]:
    """The ready (address, port) pairs kube-proxy sends the Service port to: the slice
    port named as the Service port (a slice of a one-port Service may leave it unnamed)."""
    out = []
    for sl in _slices(res, svc):
        numbers = [n for name, n in sl.ports if name == port.name]
        if not numbers and len(svc.ports) == 1 and len(sl.ports) == 1:
            numbers = [sl.ports[0][1]]
        out += [(address, numbers[0]) for address in sl.addresses if numbers]
    return out


def service_rules(res: Resources) -> list[ServiceRule]:
    """kube-proxy's rules: every TCP port of every Service with a ClusterIP."""
    rules = []
    for _key, svc in sorted(res.services.items()):
        ip = _clusterip(svc)
        if ip is None:
            continue
        for port in svc.ports:
            if port.protocol.upper() == "TCP":
                rules.append(ServiceRule(ip, port.port, tuple(_endpoints(res, svc, port))))
    return rules


def service_names(res: Resources) -> dict[str, str]:
    """The cluster DNS: each Service's name -> its ClusterIP."""
    return {
        f"{svc.meta.name}.{svc.meta.namespace}.svc.cluster.local": ip
        for svc in res.services.values()
        if (ip := _clusterip(svc))
    }


def pods_of(pods: list[MeshPod], addresses: set[str]) -> set[str]:
    """The names of the pods at ``addresses``."""
    return {p.name for p in pods if p.ip in addresses}


def service_endpoints(res: Resources) -> dict[tuple[str, str], set[str]]:
    """Each Service's ready addresses (which pods may answer for it)."""
    out: dict[tuple[str, str], set[str]] = {}
    for sl in res.endpoint_slices.values():
        out.setdefault((sl.meta.namespace, sl.service_name), set()).update(sl.addresses)
    return out
