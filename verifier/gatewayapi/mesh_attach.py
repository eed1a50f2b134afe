"""Mesh (GAMMA) attachment, as the aether mesh controller decides it.

The controller half for routes whose parent is a Service, as ``attach`` is for
Gateways: which Service ports each mesh route attaches to, producer or consumer,
which routes apply to one client workload's traffic, which workloads have a
sidecar and what their sidecar captures. The sidecar translator
(``verifier.translate.sidecar``) reads the result. The spec model must not
import these decisions (it would then agree with their bugs): it reads the same
resources and docs/mesh.md, independently.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verifier.errors import InputError, InputErrors
from verifier.gatewayapi import model as m
from verifier.gatewayapi.attach import (
    SERVICE_APP_PROTOCOLS,
    BackendTable,
    MirrorTable,
    ResolvedBackend,
    resolve_rules,
    unsupported_feature,
)
from verifier.gatewayapi.resources import Resources
from verifier.gatewayapi.workloads import pod_names, selects
from verifier.suggest import closest, missing

MESH_LABEL = ("aether.io/managed", "true")
# Pod template annotation: the sidecar captures all outbound TCP, not only the
# ClusterIPs of mesh-registered Services (docs/mesh.md).
REDIRECT_ALL = "capture.aether.io/redirect-all"
NO_CLUSTER_IP = ("", "None")  # unset, or a headless Service

ServicePortKey = tuple[str, str, int]  # (namespace, Service, port)


@dataclass(frozen=True)
class MeshAttachment:
    """A mesh route attached to one Service port. ``consumer``: the route is in
    another namespace than the Service, and applies only to clients in its own."""

    route: m.HTTPRoute
    service: m.Service
    port: m.ServicePort

    @property
    def consumer(self) -> bool:
        return self.route.meta.namespace != self.service.meta.namespace

    @property
    def key(self) -> ServicePortKey:
        return (*self.service.meta.key, self.port.port)


@dataclass(frozen=True)
class Refusal:
    """A Service parentRef the controller did not attach, with the spec's reason."""

    route: tuple[str, str]
    parent: m.ParentRef
    reason: str
    message: str


@dataclass
class MeshGraph:
    """Every mesh decision the sidecar translator needs, made once for the input."""

    attached: list[MeshAttachment] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    backends: BackendTable = field(default_factory=dict)
    mirrors: MirrorTable = field(default_factory=dict)


def service_parents(route: m.HTTPRoute) -> tuple[m.ParentRef, ...]:
    """The route's GAMMA parentRefs (group "", kind Service). The loader's ParentRef
    keeps group, kind, namespace and port as written, which is all this needs; when
    the spec model's reading of GAMMA parentRefs lands, this is the one place to
    switch to it."""
    return tuple(p for p in route.parent_refs if p.group == "" and p.kind == "Service")


def is_mesh_route(route: m.HTTPRoute) -> bool:
    return bool(service_parents(route))


def _attach(res: Resources, route: m.HTTPRoute, ref: m.ParentRef, graph: MeshGraph) -> None:
    def refuse(reason: str, message: str) -> None:
        graph.refused.append(Refusal(route.meta.key, ref, reason, message))

    svc = res.services.get((ref.namespace, ref.name))
    if svc is None:
        refuse("BackendNotFound", f"Service {ref.namespace}/{ref.name} not found")
        return
    # "Service: Port name" (sectionName) narrows the parent as ``port`` does; with both,
    # the port must have that number and that name (docs/mesh.md).
    ports = [
        p
        for p in svc.ports
        if (ref.port is None or p.port == ref.port)
        and (ref.section_name is None or p.name == ref.section_name)
    ]
    if not ports:
        named = [f"port {ref.port}"] if ref.port is not None else []
        named += [f"port named {ref.section_name}"] if ref.section_name is not None else []
        message = f"Service {ref.namespace}/{ref.name} has no {' and '.join(named)}"
        refuse("NoMatchingParent", message)
        return
    problem = unsupported_feature(route)
    if problem is not None:
        refuse("UnsupportedValue", problem)
        return
    graph.attached.extend(MeshAttachment(route, svc, p) for p in ports)


def build_mesh(res: Resources) -> MeshGraph:
    """Attach every mesh route to the Service ports its parentRefs name, and resolve
    its backends as a Gateway route's are (ReferenceGrant included)."""
    graph = MeshGraph()
    for key in sorted(res.httproutes):
        route = res.httproutes[key]
        parents = service_parents(route)
        if not parents:
            continue
        resolve_rules(res, route, graph.backends, graph.mirrors)
        for ref in parents:
            _attach(res, route, ref, graph)
    # One attachment per (route, Service port), even when two parentRefs name it.
    unique = {(a.route.meta.key, a.key): a for a in graph.attached}
    graph.attached = [unique[k] for k in sorted(unique)]
    return graph


def routes_for(
    graph: MeshGraph, client_namespace: str, key: ServicePortKey
) -> list[MeshAttachment]:
    """The mesh routes that apply to a client's traffic to one Service port: the
    consumer routes of the client's namespace when there are any (they replace the
    producer routes, for that port: MeshConsumerRoute), else the producer routes.
    Consumer routes of other namespaces never apply."""
    on_port = [a for a in graph.attached if a.key == key]
    consumer = [a for a in on_port if a.consumer and a.route.meta.namespace == client_namespace]
    return consumer or [a for a in on_port if not a.consumer]


# ---------------------------------------------------------------- workloads and capture


def namespace_in_mesh(res: Resources, namespace: str) -> bool:
    return res.namespace_labels(namespace).get(MESH_LABEL[0]) == MESH_LABEL[1]


def mesh_registered(
    res: Resources, registry: frozenset[tuple[str, str]], namespace: str, name: str
) -> bool:
    """A Service on the mesh path: its namespace is mesh-registered, or the mesh
    registry names it. Its workloads are dialled over mTLS on :15008."""
    return namespace_in_mesh(res, namespace) or (namespace, name) in registry


def has_sidecar(res: Resources, wl: m.Workload) -> bool:
    """aether injects a sidecar into every workload of a mesh-registered namespace."""
    return namespace_in_mesh(res, wl.meta.namespace)


def pod_annotations(wl: m.Workload) -> dict[str, str]:
    """The pod template's annotations, read from the workload's YAML (the loader does
    not keep them yet; when it does, this is the one place to switch)."""
    raw = wl.meta.raw
    if raw is None:
        return {}
    node: object = raw.data
    for step in ("spec", "template", "metadata", "annotations"):
        node = node.get(step) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        return {}
    return {str(k): str(v) for k, v in node.items()}


def redirects_all(wl: m.Workload) -> bool:
    return pod_annotations(wl).get(REDIRECT_ALL) == "true"


def frontend(svc: m.Service) -> str | None:
    """The Service's ClusterIP, where mesh traffic to it is sent; None when it has none
    (headless, ExternalName, or not given)."""
    if svc.type == "ExternalName" or svc.cluster_ip in (None, *NO_CLUSTER_IP):
        return None
    return svc.cluster_ip


def captured_services(
    res: Resources, registry: frozenset[tuple[str, str]], wl: m.Workload
) -> list[m.Service]:
    """The Services whose ClusterIP the workload's sidecar captures, by namespace and
    name: every Service with a ClusterIP under ``redirect-all``, else the
    mesh-registered ones (namespace label, or the mesh registry)."""
    wide = redirects_all(wl)
    return [
        svc
        for key, svc in sorted(res.services.items())
        if frontend(svc) is not None and (wide or mesh_registered(res, registry, *key))
    ]


def selecting_services(res: Resources, wl: m.Workload) -> list[m.Service]:
    """The Services whose selector picks the workload's pods: those its sidecar's
    inbound listener receives mesh traffic for."""
    labels = dict(wl.pod_labels)
    return [
        svc
        for key, svc in sorted(res.services.items())
        if key[0] == wl.meta.namespace and svc.selector and selects(svc.selector, labels)
    ]


def service_backend(svc: m.Service, port: m.ServicePort) -> ResolvedBackend | None:
    """The Service port itself as a backend: where a client's traffic goes when no mesh
    route applies (kube-proxy's choice, on the mesh path). None for an appProtocol the
    sidecar does not speak HTTP with: such traffic is passed through untouched."""
    protocol = SERVICE_APP_PROTOCOLS.get(port.app_protocol)
    if protocol is None or port.protocol != "TCP":
        return None
    ref = m.ObjectRef("", "Service", svc.meta.name, svc.meta.namespace, port.port)
    return ResolvedBackend(ref, 1, (), svc.meta.namespace, svc, port, protocol)


def _named(res: Resources, namespace: str, name: str) -> list[m.Workload]:
    """The workloads ``namespace/name`` names: a Deployment, StatefulSet or DaemonSet of
    that name, or the one that runs a pod of that name."""
    workloads = sorted(res.workloads.items())
    found = [wl for (_kind, ns, n), wl in workloads if (ns, n) == (namespace, name)]
    return found or [
        wl
        for (_kind, ns, n), wl in workloads
        if ns == namespace and name.startswith(f"{n}-") and name in pod_names(wl)
    ]


def _proxy_error(code: str, message: str) -> InputErrors:
    return InputErrors([InputError("--proxy", 0, "", code, message)])


def _did_you_mean(wanted: str, names: list[str]) -> str:
    near = closest(wanted, names)
    return f"; did you mean {near}?" if near else ""


def sidecar_workload(res: Resources, text: str) -> m.Workload:
    """The workload ``--proxy NS/WORKLOAD`` (or ``NS/POD``, or ``NS/KIND/NAME`` where
    two kinds share a name) names, which must have a sidecar; else a clear input
    error, with the nearest name that would do."""
    parts = text.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise _proxy_error("bad-proxy", f"{text!r}: expected NAMESPACE/WORKLOAD")
    ns, name = parts[0], parts[-1]
    found = _named(res, ns, name)
    if len(parts) == 3:
        found = [wl for wl in found if wl.meta.kind == parts[1]]
    if not found:
        refs = {(wns, n) for (_kind, wns, n) in res.workloads}
        _part, message = missing("Deployment, StatefulSet, DaemonSet or pod", ns, name, refs)
        raise _proxy_error("unknown-proxy", message)
    if len(found) > 1:
        kinds = " and ".join(wl.meta.kind for wl in found)
        message = f"{text} names a {kinds}; say which: {ns}/KIND/{name}"
        raise _proxy_error("ambiguous-proxy", message)
    wl = found[0]
    if not has_sidecar(res, wl):
        meshed = [f"{k[1]}/{k[2]}" for k, w in sorted(res.workloads.items()) if has_sidecar(res, w)]
        message = (
            f"{wl.meta.kind} {wl.meta.namespace}/{wl.meta.name} has no sidecar: namespace "
            f"{wl.meta.namespace} is not mesh-registered (label {MESH_LABEL[0]}: "
            f'"{MESH_LABEL[1]}")'
        )
        raise _proxy_error("no-sidecar", message + _did_you_mean(f"{ns}/{name}", meshed))
    return wl
