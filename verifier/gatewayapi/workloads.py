"""The EndpointSlices a cluster's EndpointSlice controller would publish, for Services
given without any.

Manifests written like the Gateway API conformance suite's hold Deployments and
Services but no EndpointSlices: a cluster makes those. Read literally, such a
Service has no endpoint, so the translator's EDS would be empty and the live
pass would start no backend, while the manifests mean pods that answer. So,
once at load time, every Service that has a selector and no EndpointSlice in
the input gets the slices the controller would write, as ordinary
``EndpointSlice`` objects: the spec model, the Envoy model's backend
directory, the translator and the live harness all read the same endpoints
and none of them knows they were derived (the notes on the input say so).

What the controller would do, and what is assumed here:

* Pods: those of the Deployments, StatefulSets and DaemonSets in the Service's
  namespace whose pod template labels carry every ``key: value`` of the
  Service's selector. A Deployment or StatefulSet runs ``spec.replicas`` pods
  (default 1); a DaemonSet runs one pod, as on a one-node cluster (the node
  count is not in the manifests). Every pod is taken as ready.
* Pod names: a StatefulSet's pods are ``<name>-<ordinal>``; a Deployment's
  ``<name>-<template hash>-<suffix>`` and a DaemonSet's ``<name>-<suffix>``,
  the hash and suffix drawn from the names (not random), in Kubernetes'
  consonant-and-digit alphabet.
* Pod IPs: in ``POD_RANGE`` (10.252.0.0/14: private, apart from the fixtures'
  10.244.0.0/16 pods and 10.96.0.0/12 Services, far from the Gateway addresses
  of 192.0.2.0/24), drawn from a hash of ``<namespace>/<pod>`` so they stay
  put when other workloads come and go; a taken address (any given endpoint,
  clusterIP or earlier derived pod) moves to the next free one.
* Ports: one slice port per Service port, named as the Service port, whose
  number is the targetPort: a number as written, the Service port when
  unset, or the number of the pod's container port of that name and
  protocol. A pod that has no container port of that name is published
  without that port (as the controller does), so pods with different port
  sets make separate slices.
* A Service whose selector matches no pod (no workload, or ``replicas: 0``)
  gets one slice with no endpoint: it has no ready endpoint, and requests to
  it get the 503 the spec asks for.

More than ``MAX_DERIVED_PODS`` pods to derive is an input error (exit 2), not a
long wait: ``replicas`` is a number anyone can make large.

A Service with any EndpointSlice given keeps only those (they win; nothing is
merged), and a Service without a selector is left alone, as the controller
leaves it: its endpoints are whatever slices the input brings.

The mesh's deployment facts are input data too, read here by the spec model and
the translator alike (docs/mesh.md, "Which traffic the sidecar sees"): which
namespaces and Services are mesh-registered (``mesh_namespace``,
``mesh_service``), which workloads run a sidecar (``has_sidecar``), its capture
scope (``captures_all``: the pod-template annotation
``capture.aether.io/redirect-all``), and a workload's ServiceAccount
(``Workload.service_account``: ``serviceAccountName``, else ``default``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from verifier.errors import InputError, InputErrors
from verifier.gatewayapi import model as m
from verifier.suggest import missing

if TYPE_CHECKING:
    from verifier.gatewayapi.resources import Resources

POD_RANGE = ipaddress.IPv4Network("10.252.0.0/14")
# Kubernetes' rand.SafeEncodeString alphabet: no vowels, no look-alike characters.
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY = ("endpointslice.kubernetes.io/managed-by", "edge-verify")
# aether registers a namespace's workloads in the mesh with this label.
MESH_LABEL = ("aether.io/managed", "true")
# A pod-template annotation: with "true", the sidecar captures all outbound TCP;
# without it, only connections to the ClusterIP of a mesh-registered Service.
REDIRECT_ALL = "capture.aether.io/redirect-all"
# Where the capture sends a sidecar's outbound TCP: the proxy's port 15001 on the pod's
# loopback (nftables REDIRECT; docs/mesh.md, "Which traffic the sidecar sees").
CAPTURE_PORT = 15001
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet")
# Past this many derived pods the input is refused (exit 2) rather than read for
# minutes: `replicas` is a number anyone can make large.
MAX_DERIVED_PODS = 10_000


def _encode(text: str, length: int) -> str:
    digest = int.from_bytes(hashlib.sha256(text.encode()).digest(), "big")
    out = []
    for _ in range(length):
        digest, i = divmod(digest, len(NAME_ALPHABET))
        out.append(NAME_ALPHABET[i])
    return "".join(out)


def pod_names(wl: m.Workload) -> list[str]:
    """The names of the workload's pods, stable from run to run: cases name pods by
    prefix (``backend: infra-backend-v1``), and goldens must not churn."""
    ns, name, kind = wl.meta.namespace, wl.meta.name, wl.meta.kind
    if kind == "StatefulSet":
        return [f"{name}-{i}" for i in range(wl.replicas)]
    if kind == "DaemonSet":
        return [f"{name}-{_encode(f'{ns}/{name}/0', 5)}"]
    template = _encode(f"{ns}/{name}/{wl.pod_labels}/{wl.container_ports}", 10)
    return [f"{name}-{template}-{_encode(f'{ns}/{name}/{i}', 5)}" for i in range(wl.replicas)]


def _pod_ip(namespace: str, pod: str, taken: set[str]) -> str:
    size = POD_RANGE.num_addresses
    start = int.from_bytes(hashlib.sha256(f"{namespace}/{pod}".encode()).digest()[:8], "big")
    for step in range(size):
        address = POD_RANGE[(start + step) % size]
        # .0 and .255 look like network and broadcast addresses to people reading a dump.
        if str(address) not in taken and int(address) & 0xFF not in (0, 255):
            taken.add(str(address))
            return str(address)
    raise ValueError(f"no free pod address left in {POD_RANGE}")  # 260,000 pods


def selects(selector: Iterable[tuple[str, str]], labels: Mapping[str, str]) -> bool:
    """A Service selector is equality on every key it names (no expressions)."""
    return all(labels.get(k) == v for k, v in selector)


def target_port(port: m.ServicePort, wl: m.Workload) -> int | None:
    """The pod port a Service port reaches: a number as written (the Service port when
    unset), or the container port named so, with the same protocol."""
    if port.target_port.isdigit():
        return int(port.target_port)
    found = next(
        (
            c.port
            for c in wl.container_ports
            if c.name == port.target_port and c.protocol == port.protocol
        ),
        None,
    )
    return found


def _slice(
    svc: m.Service,
    suffix: str,
    addresses: Iterable[str],
    ports: tuple[tuple[str, int], ...],
) -> m.EndpointSlice:
    ns, name = svc.meta.key
    labels = tuple(sorted(((SERVICE_NAME_LABEL, name), MANAGED_BY)))
    # The Service's own YAML stands for the slice: a finding about these endpoints
    # points at the object a person would edit.
    meta = m.Meta("EndpointSlice", ns, f"{name}-{suffix}", labels, "", svc.meta.raw)
    return m.EndpointSlice(meta, name, tuple(addresses), ports)


class PodAddresses:
    """Each workload's pod IPs, worked out the first time a Service selects it: a pod
    that several Services select is one endpoint of each, on the same IP, and a
    workload nothing selects costs nothing however many replicas it says."""

    def __init__(self, taken: set[str]) -> None:
        self.taken = taken
        self.count = 0
        self._known: dict[tuple[str, str, str], list[str]] = {}

    def of(self, wl: m.Workload) -> list[str]:
        key = (wl.meta.kind, *wl.meta.key)
        known = self._known.get(key)
        if known is None:
            self.count += wl.replicas
            if self.count > MAX_DERIVED_PODS:
                where = wl.meta.where("spec.replicas")
                raise InputErrors(
                    [
                        InputError(
                            where.file,
                            where.line,
                            "spec.replicas",
                            "too-many-pods",
                            f"deriving endpoints for more than {MAX_DERIVED_PODS} pods; give "
                            "the Services' EndpointSlices instead",
                        )
                    ]
                )
            names = pod_names(wl)
            known = self._known[key] = [_pod_ip(wl.meta.namespace, n, self.taken) for n in names]
        return known

    def owners(self) -> dict[str, tuple[str, str, str]]:
        """Each address worked out so far -> its workload (kind, namespace, name)."""
        return {ip: key for key, ips in self._known.items() for ip in ips}


def derive_for(
    svc: m.Service, workloads: Iterable[m.Workload], pods: PodAddresses
) -> tuple[list[m.EndpointSlice], str]:
    """The slices the controller would publish for ``svc``, and the note that says so."""
    ns, name = svc.meta.key
    groups: dict[tuple[tuple[str, int], ...], list[str]] = {}
    owners: list[str] = []
    count = 0
    for wl in workloads:
        if wl.meta.namespace != ns or not selects(svc.selector, dict(wl.pod_labels)):
            continue
        owners.append(
            f"{wl.meta.kind} {wl.meta.name} ({wl.replicas} pod{'s' if wl.replicas != 1 else ''})"
        )
        ports = tuple(
            (p.name, number) for p in svc.ports if (number := target_port(p, wl)) is not None
        )
        addresses = pods.of(wl)
        if addresses:
            groups.setdefault(ports, []).extend(addresses)
            count += len(addresses)
    where = svc.meta.where()
    if not groups:
        why = (
            f"{', '.join(owners)} selected"
            if owners
            else "no Deployment, StatefulSet or DaemonSet in the input matches its selector"
        )
        note = (
            f"{where}: Service {ns}/{name} has no EndpointSlice and no ready endpoint: {why}; "
            "requests to it get 503"
        )
        return [_slice(svc, _encode(f"{ns}/{name}", 5), (), ())], note
    slices = [
        _slice(svc, _encode(f"{ns}/{name}/{i}", 5), pods_of, ports)
        for i, (ports, pods_of) in enumerate(sorted(groups.items()))
    ]
    note = (
        f"{where}: Service {ns}/{name} has no EndpointSlice: derived {count} ready "
        f"endpoint{'s' if count != 1 else ''} from {', '.join(owners)}, as the EndpointSlice "
        "controller would"
    )
    return slices, note


def _renamed(sl: m.EndpointSlice, taken: set[tuple[str, str]]) -> m.EndpointSlice:
    """A derived slice never shadows a given one: the controller's generated names
    would not clash either."""
    meta = sl.meta
    while meta.key in taken:
        meta = dataclasses.replace(meta, name=f"{meta.name}-{_encode(meta.name, 5)}")
    taken.add(meta.key)
    return dataclasses.replace(sl, meta=meta)


def derive_endpoint_slices(
    services: Mapping[tuple[str, str], m.Service],
    slices: Mapping[tuple[str, str], m.EndpointSlice],
    workloads: Mapping[tuple[str, str, str], m.Workload],
) -> tuple[list[m.EndpointSlice], list[str], dict[str, tuple[str, str, str]]]:
    """Slices for every selecting Service that has none, one note per Service, and the
    workload each derived address is a pod of."""
    given = {(s.meta.namespace, s.service_name) for s in slices.values()}
    taken = {a for s in slices.values() for a in s.addresses}
    taken |= {s.cluster_ip for s in services.values() if s.cluster_ip}
    ordered = [wl for _key, wl in sorted(workloads.items())]
    pods = PodAddresses(taken)
    out: list[m.EndpointSlice] = []
    notes: list[str] = []
    for key, svc in sorted(services.items()):
        if key in given or not svc.selector or svc.type == "ExternalName":
            continue
        derived, note = derive_for(svc, ordered, pods)
        names = {s.meta.key for s in out} | set(slices)
        out.extend(_renamed(s, names) for s in derived)
        notes.append(note)
    return out, notes, pods.owners()


def address_owners(res: Resources) -> dict[str, set[tuple[str, str, str]]]:
    """Each ready endpoint address -> the workloads (kind, namespace, name) that may run
    the pod there: the one it was derived from (``Resources.derived_pods``), else those
    every Service listing the address selects. One: the pod is that workload's (its
    ServiceAccount is the identity its sidecar presents); none: no workload of the
    input runs it; several: the input does not say which."""
    found: dict[str, set[tuple[str, str, str]]] = {
        ip: {key} for ip, key in res.derived_pods.items()
    }
    for key, svc in res.services.items():
        selected = {
            wkey
            for wkey, wl in res.workloads.items()
            if svc.selector and wkey[1] == key[0] and selects(svc.selector, dict(wl.pod_labels))
        }
        for sl in res.endpoint_slices.values():
            if (sl.meta.namespace, sl.service_name) != key:
                continue
            for address in sl.addresses:
                if address in res.derived_pods:
                    continue
                known = found.get(address)
                found[address] = set(selected) if known is None else known & selected
    return found


# ---------------------------------------------------------------- the mesh's deployment facts


def selected_workloads(res: Resources, namespace: str, service: str) -> list[m.Workload]:
    """The workloads whose pods the Service selects, by (kind, namespace, name): the
    translator, both models' directory and the live pods must name the same identities,
    so this is the one place that says which pods a Service's identity comes from."""
    svc = res.services.get((namespace, service))
    if svc is None or not svc.selector:
        return []
    return [
        wl
        for key, wl in sorted(res.workloads.items())
        if key[1] == namespace and selects(svc.selector, dict(wl.pod_labels))
    ]


def service_accounts(res: Resources, namespace: str, service: str) -> list[str]:
    """Every identity the Service's pods may present (a Service over two Deployments may
    run as two ServiceAccounts): what an mTLS client must accept; ``default`` when no
    workload of the input is selected, as Kubernetes assigns."""
    return sorted({wl.service_account for wl in selected_workloads(res, namespace, service)}) or [
        "default"
    ]


def service_account(res: Resources, namespace: str, service: str) -> str:
    """The one identity that stands for a Service's pods where the pod itself is not
    known (a given EndpointSlice does not say whose pod an address is): the first
    selected workload's, else ``default``."""
    found = selected_workloads(res, namespace, service)
    return found[0].service_account if found else "default"


def mesh_namespace(res: Resources, namespace: str) -> bool:
    """The namespace carries ``aether.io/managed: "true"``: its workloads are in the mesh."""
    return res.namespace_labels(namespace).get(MESH_LABEL[0]) == MESH_LABEL[1]


def mesh_service(
    res: Resources, registry: frozenset[tuple[str, str]], namespace: str, name: str
) -> bool:
    """A mesh-registered Service: in a mesh namespace, or named by the mesh registry
    file (``--mesh-registry``; ``verifier.gatewayapi.mesh_registry``)."""
    return mesh_namespace(res, namespace) or (namespace, name) in registry


def workload(res: Resources, namespace: str, name: str) -> m.Workload | None:
    """The Deployment, StatefulSet or DaemonSet ``namespace/name`` (in that order when
    several kinds share the name): the client a mesh request names."""
    for kind in WORKLOAD_KINDS:
        found = res.workloads.get((kind, namespace, name))
        if found is not None:
            return found
    return None


def workload_missing(res: Resources, namespace: str, name: str) -> tuple[str, str]:
    """Why ``namespace/name`` names no workload of the input: the part that is wrong
    ("namespace" or "name") and the message, with the did-you-mean. The one lookup of
    a client workload's name, for a case's ``from:``, ``explain --from`` and ``--proxy``."""
    refs = {(ns, n) for (_kind, ns, n) in res.workloads}
    return missing("Deployment, StatefulSet or DaemonSet", namespace, name, refs)


def has_sidecar(res: Resources, wl: m.Workload) -> bool:
    """A workload of a mesh-registered namespace runs the aether sidecar."""
    return mesh_namespace(res, wl.meta.namespace)


def captures_all(wl: m.Workload) -> bool:
    """The pod template's ``capture.aether.io/redirect-all: "true"``: the sidecar
    captures all outbound TCP (else only traffic to mesh-registered ClusterIPs)."""
    return dict(wl.pod_annotations).get(REDIRECT_ALL) == "true"
