"""The spec model for mesh requests: what GAMMA requires when a mesh client calls a
Service (docs/mesh.md, "Which routes apply" and "Which traffic the sidecar sees").

For a request with a ``source`` (the client workload) sent to ``address``:``port``:

1. the frontend: the Service whose ClusterIP is the address and that has the port
   ("The Service frontend is its name and cluster IP"; MeshClusterIPMatching: the
   Host header does not choose it); none: nothing answers;
2. whether the client's sidecar sees the request (aether's capture scope, input
   data read through ``verifier.gatewayapi.workloads``); if not, kube-proxy sends it
   to one of the Service's ready endpoints and no mesh route applies;
3. the mesh routes that apply: producer routes (in the Service's namespace) for
   every client, replaced by the consumer routes of the client's own namespace when
   it has any for this frontend (MeshConsumerRoute); a parentRef with ``port`` (or
   ``sectionName``, the Service port's name) covers that port only;
4. no route: kube-proxy's answer, as above; routes: the same rule evaluation as a
   Gateway listener's (``spec.decide``), the Service port as the parent's port.

Written from the spec text (GEP-1426, GEP-1294, ParentReference) and docs/mesh.md,
never from the translator or ``verifier.gatewayapi.attach``. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verifier.gatewayapi import model as m
from verifier.gatewayapi import workloads as wl
from verifier.gatewayapi.resources import Resources
from verifier.semantics.request import Backend, Evaluation, Forwarded, Outcome, Request, Source
from verifier.semantics.spec.attach import unsupported_features
from verifier.semantics.spec.backends import has_ready_endpoint
from verifier.semantics.spec.decide import Decision, answer, decide_rule
from verifier.semantics.spec.match import Candidate, match_accepts, rule_problem
from verifier.semantics.spec.per_resources import PerResources

# No HTTP response: no Service answers on the address and port, or kube-proxy has no
# ready endpoint to send the connection to (it rejects it).
NO_RESPONSE = 0
FORWARDED_STATUS = 200
# A captured request the sidecar sends to the Service itself (no route applies)
# when the Service has no ready endpoint: as for any backend without one,
# "implementations SHOULD return a 503" (HTTPRouteRule.backendRefs).
NO_READY_ENDPOINT_STATUS = 503
# A mesh route's hostnames select nothing: the frontend is the ClusterIP and port.
MESH_HOSTNAME_KEY = (0, 0)

PRODUCER = "producer"
CONSUMER = "consumer"

__all__ = [
    "MeshModel",
    "applicable_routes",
    "captures",
    "mesh_index_for",
    "selects_port",
    "service_parent",
    "spec_evaluate_mesh",
]


def service_parent(ref: m.ParentRef) -> bool:
    """ParentReference: group "To set the core API group (such as for a "Service" kind
    referent), Group must be explicitly set to "" (empty string)"; kind Service:
    "Service (Mesh conformance profile, ClusterIP Services only)"."""
    return ref.group == "" and ref.kind == "Service"


def selects_port(ref: m.ParentRef, port: m.ServicePort) -> bool:
    """ParentReference.port: "When the parent resource is a Service, this targets a
    specific port in the Service spec"; sectionName: "Service: Port name. When both
    Port (experimental) and SectionName are specified, the name and port of the
    selected listener must match both specified values." Neither: the whole Service
    ("When unspecified (empty string), this will reference the entire resource")."""
    if ref.port is not None and ref.port != port.port:
        return False
    return ref.section_name is None or ref.section_name == port.name


@dataclass(frozen=True, eq=False)
class MeshRoute:
    """An HTTPRoute with a parentRef to one Service: those parentRefs, and whether it
    is the Service's producer route or a consumer route of its own namespace."""

    order: int  # position in sorted(res.httproutes)
    route: m.HTTPRoute
    refs: tuple[m.ParentRef, ...]
    unsupported: tuple[str, ...]  # features the edge does not implement: not Accepted

    @property
    def name(self) -> str:
        return f"HTTPRoute {self.route.meta.namespace}/{self.route.meta.name}"

    def role(self, service_namespace: str) -> str:
        """ParentReference.namespace: "ParentRefs from a Route to a Service in the same
        namespace are "producer" routes ... in a different namespace are "consumer"
        routes, and these routing rules are only applied to outbound connections
        originating from the same namespace as the Route"."""
        return PRODUCER if self.route.meta.namespace == service_namespace else CONSUMER


@dataclass
class MeshIndex:
    """What a mesh request's answer needs that no request changes: each Service by
    ClusterIP, and the mesh routes of each Service, in ``sorted(res.httproutes)`` order.
    Built once per ``Resources`` (``mesh_index_for``)."""

    by_ip: dict[str, m.Service] = field(default_factory=dict)
    routes: dict[tuple[str, str], list[MeshRoute]] = field(default_factory=dict)

    @staticmethod
    def of(res: Resources) -> MeshIndex:
        index = MeshIndex()
        for key in sorted(res.services):
            svc = res.services[key]
            if svc.cluster_ip and svc.cluster_ip != "None":
                index.by_ip.setdefault(svc.cluster_ip, svc)
        for order, key in enumerate(sorted(res.httproutes)):
            route = res.httproutes[key]
            parents: dict[tuple[str, str], list[m.ParentRef]] = {}
            for ref in route.parent_refs:
                if service_parent(ref):
                    parents.setdefault((ref.namespace, ref.name), []).append(ref)
            if not parents:
                continue
            unsupported = tuple(unsupported_features(route))
            for target, refs in parents.items():
                index.routes.setdefault(target, []).append(
                    MeshRoute(order, route, tuple(refs), unsupported)
                )
        return index


_INDEXES = PerResources(MeshIndex.of, lambda res: (res.httproutes, res.services))


def mesh_index_for(res: Resources) -> MeshIndex:
    """The mesh index of ``res``, built once per object (``res`` is not modified once
    evaluated: the loader builds it, checks and rules only read it)."""
    return _INDEXES(res)


def spec_evaluate_mesh(
    res: Resources,
    request: Request,
    *,
    registry: frozenset[tuple[str, str]] = frozenset(),
    trace: bool = True,
) -> Evaluation:
    """The outcome the spec requires for the mesh request ``request`` (its ``source``
    sends it to ``request.address``:``request.port``), and the steps that decided it.
    ``registry``: Services on the mesh path besides labelled namespaces
    (``--mesh-registry``). ``trace=False``: the same outcome, a shorter trace."""
    return _decide(res, mesh_index_for(res), request, registry, trace).evaluation


class MeshModel:
    """The mesh spec model over one ``Resources`` and mesh registry."""

    def __init__(self, res: Resources, registry: frozenset[tuple[str, str]] = frozenset()) -> None:
        self.res = res
        self.registry = registry
        self.index = MeshIndex.of(res)

    def evaluate(self, request: Request, *, trace: bool = True) -> Evaluation:
        return _decide(self.res, self.index, request, self.registry, trace).evaluation


def _decide(
    res: Resources,
    index: MeshIndex,
    request: Request,
    registry: frozenset[tuple[str, str]],
    tracing: bool,
) -> Decision:
    trace = [f"request: {request.line()}"] if tracing else []
    if request.source is None:
        trace.append("not a mesh request (no client workload): no answer here")
        return answer(NO_RESPONSE, trace)
    svc = index.by_ip.get(request.address)
    port = next((p for p in svc.ports if p.port == request.port), None) if svc is not None else None
    if svc is None or port is None:
        what = "no Service has ClusterIP" if svc is None else "the Service has no port"
        trace.append(f"{what} {request.address}:{request.port}: nothing answers")
        return answer(NO_RESPONSE, trace)
    ns, name = svc.meta.key
    if tracing:
        trace.append(
            f"frontend: Service {ns}/{name} port {port.port}"
            + (f" ({port.name})" if port.name else "")
            + " (MeshClusterIPMatching: the ClusterIP and port, whatever the Host)"
        )
    captured, why = captures(res, registry, request.source, svc)
    trace.append(why)
    if not captured:
        return _kube_proxy(res, request, svc, port, trace, NO_RESPONSE)
    routes = _applicable(index, svc, port, request.source.namespace, trace, tracing)
    if not routes:
        trace.append(f"no mesh route applies to Service {ns}/{name} port {port.port}")
        return _kube_proxy(res, request, svc, port, trace, NO_READY_ENDPOINT_STATUS)
    candidates = _candidates(routes, request, trace, tracing)
    return decide_rule(res, candidates, request, port.port, trace, tracing)


def captures(
    res: Resources, registry: frozenset[tuple[str, str]], source: Source, svc: m.Service
) -> tuple[bool, str]:
    """Whether the sidecar of client ``source`` sees its requests to ``svc``, and why
    (docs/mesh.md): a workload of a mesh-registered namespace has a sidecar; it captures
    all outbound TCP with the pod-template annotation ``capture.aether.io/redirect-all:
    "true"``, else only connections to the ClusterIP of a mesh-registered Service. The
    one reading of it: requests, ``explain --from`` and the rule that says which clients
    a mesh route reaches (``mesh-route-clients``) all ask here."""
    client = source.line()
    found = wl.workload(res, source.namespace, source.workload)
    if found is None:
        return False, f"client {client}: no such workload in the input: taken to have no sidecar"
    if not wl.has_sidecar(res, found):
        return False, (
            f"client {client}: no sidecar (namespace {found.meta.namespace} is not "
            "mesh-registered): not captured"
        )
    if wl.captures_all(found):
        return (
            True,
            f"client {client}: its sidecar captures all outbound traffic ({wl.REDIRECT_ALL})",
        )
    ns, name = svc.meta.key
    if wl.mesh_service(res, registry, ns, name):
        return (
            True,
            f"client {client}: its sidecar captures traffic to mesh-registered Service {ns}/{name}",
        )
    return False, (
        f"client {client}: its sidecar captures mesh-registered Services only, and "
        f"{ns}/{name} is not one: not captured"
    )


def _kube_proxy(
    res: Resources,
    request: Request,
    svc: m.Service,
    port: m.ServicePort,
    trace: list[str],
    unready_status: int,
) -> Decision:
    """The request goes to one of the Service's ready endpoints, unchanged (kube-proxy,
    or the sidecar sending it on to the Service). Without a ready endpoint: kube-proxy
    rejects the connection (no response); a sidecar answers ``unready_status`` (503)."""
    backend = Backend(svc.meta.namespace, svc.meta.name, port.port)
    if not has_ready_endpoint(res, backend):
        how = "no response" if unready_status == NO_RESPONSE else str(unready_status)
        trace.append(f"Service {backend.namespace}/{backend.name} has no ready endpoint: {how}")
        outcome = Outcome(unready_status, unavailable_weight=1 if unready_status else 0)
        return Decision(Evaluation(outcome, tuple(trace)), answer(0, []).response_plan)
    headers = tuple((k, v) for k, v in request.headers if k != "host")
    forwarded = Forwarded(request.method, request.host, request.path, headers)
    trace.append(
        f"to a ready endpoint of Service {backend.namespace}/{backend.name}:{port.port}, "
        "unchanged (as kube-proxy sends it)"
    )
    outcome = Outcome(FORWARDED_STATUS, backends=(backend,), request=forwarded)
    return Decision(Evaluation(outcome, tuple(trace)), answer(0, []).response_plan)


def _applicable(
    index: MeshIndex,
    svc: m.Service,
    port: m.ServicePort,
    client_namespace: str,
    trace: list[str],
    tracing: bool,
) -> list[MeshRoute]:
    """The mesh routes that apply to this client on this frontend: its namespace's
    consumer routes when it has any here, else the producer routes (MeshConsumerRoute:
    "consumer" routes take precedence over "producer" routes for their namespace)."""
    ns = svc.meta.namespace
    producers: list[MeshRoute] = []
    consumers: list[MeshRoute] = []
    for mr in index.routes.get(svc.meta.key, ()):
        role = mr.role(ns)
        if role == CONSUMER and mr.route.meta.namespace != client_namespace:
            if tracing:
                trace.append(
                    f"{mr.name}: consumer route of namespace {mr.route.meta.namespace}, "
                    f"not the client's ({client_namespace})"
                )
            continue
        if not any(selects_port(ref, port) for ref in mr.refs):
            if tracing:
                trace.append(f"{mr.name}: its parentRef selects another port of the Service")
            continue
        if mr.unsupported:
            if tracing:
                features = ", ".join(mr.unsupported)
                trace.append(f"{mr.name}: not Accepted (UnsupportedValue): {features}")
            continue
        (consumers if role == CONSUMER else producers).append(mr)
    if consumers:
        if tracing:
            names = ", ".join(mr.name for mr in consumers)
            replaced = (
                f"; they replace the producer route(s) {', '.join(mr.name for mr in producers)}"
            )
            trace.append(
                f"consumer route(s) of namespace {client_namespace}: {names}"
                + (replaced if producers else "")
            )
        return consumers
    if producers and tracing:
        trace.append(f"producer route(s): {', '.join(mr.name for mr in producers)}")
    return producers


def applicable_routes(
    res: Resources, svc: m.Service, port: m.ServicePort, client_namespace: str
) -> list[m.HTTPRoute]:
    """The mesh routes that apply to a client of ``client_namespace`` calling ``svc`` on
    ``port`` (its consumer routes there, else the producer routes; Accepted ones only),
    as this model reads them: what rules compare a sidecar's route table with."""
    found = _applicable(mesh_index_for(res), svc, port, client_namespace, [], False)
    return [mr.route for mr in found]


def _candidates(
    routes: list[MeshRoute], request: Request, trace: list[str], tracing: bool
) -> list[Candidate]:
    """Every (route, rule, match) of the applicable routes that accepts the request; a
    rule RE2 cannot compile is dropped, as on a Gateway."""
    found: list[Candidate] = []
    for mr in routes:
        accepted = 0
        for rule in mr.route.rules:
            problem = rule_problem(rule)
            if problem:
                if tracing:
                    trace.append(f"{mr.name} rule {rule.index} dropped: {problem}")
                continue
            for i, match in enumerate(rule.matches):
                if match_accepts(match, request):
                    found.append(Candidate(mr.route, rule, i, match, MESH_HOSTNAME_KEY))
                    accepted += 1
        if tracing:
            trace.append(f"{mr.name}: {accepted} matching match(es)")
    return found
