"""Every Service an HTTPRoute sends traffic to selects some pod of the input.

Why it matters: "When a HTTPBackendRef refers to a Service that has no ready
endpoints, implementations SHOULD return a 503 for requests to that backend"
(HTTPRouteRule.backendRefs). A Service whose selector matches no pod has none, so
its share of the requests is answered 503, and a correct translation does exactly
that: the models agree, and only a case that draws that share would notice. The
usual cause is a selector typed by hand (``app: order-v2`` for pods labelled
``orders-v2``). This rule reports it at the backendRef that sends the traffic
(EV913, a warning), with the Service's selector as related and, when a workload's pod
labels are close, "did you mean" them; a mesh route's backendRefs alike.

Judged only where the input says which pods run: the Service's namespace holds a
workload (Deployment, StatefulSet, DaemonSet) or an EndpointSlice. A manifest set
of Services and routes alone does not show that pods are missing, and says nothing.
A selector that matches a workload scaled to ``replicas: 0`` is not this mistake:
scaling to zero can be deliberate. A Service whose EndpointSlices list a ready
address has pods (perhaps of a kind the input does not hold); weight-0 backendRefs
send nothing. Selection is the EndpointSlice controller's
(``verifier.gatewayapi.workloads``).

Example: ``selector: {app: order-v2}`` on Service ``shop/orders-v2`` beside
Deployment ``orders-v2`` whose pods are labelled ``app: orders-v2``: EV913 at the
backendRef to ``orders-v2``, "did you mean selector app=orders-v2?", related: the
selector's line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from verifier.rules.support.mistakes import at, with_mesh_routes
from verifier.rules.support.pods import Pods, judged, labels

from verifier.check import Context
from verifier.findings import Finding, Related, hint
from verifier.gatewayapi import model as m
from verifier.gatewayapi.resources import Resources
from verifier.registry import Rule
from verifier.semantics.spec.backends import resolve_ref
from verifier.semantics.spec.status import backend_refs
from verifier.suggest import closest

NAME = "httproute-backend-endpoints"
CODE = "EV913"


def without_pods(res: Resources, pods: Pods, svc: m.Service) -> bool:
    """The Service selects no pod of an input that shows its namespace's pods, and
    no EndpointSlice gives it a ready address."""
    ns = svc.meta.namespace
    if not judged(svc) or not res.knows(ns) or pods.selected(svc) or pods.ready(svc):
        return False
    return pods.shown(ns)


def _near(svc: m.Service, workloads: list[m.Workload]) -> str | None:
    """The pod labels, for the selector's keys, of the workload closest to what the
    selector says: ``app=orders-v2`` for ``app=order-v2``."""
    options = []
    for wl in workloads:
        pods = dict(wl.pod_labels)
        pairs = []
        for key, _value in svc.selector:
            near = key if key in pods else closest(key, pods)
            if near is None:
                break
            pairs.append((near, pods[near]))
        else:
            options.append(labels(tuple(pairs)))
    return closest(labels(svc.selector), options)


def _fix(svc: m.Service, workloads: list[m.Workload]) -> tuple[str, str | None]:
    ns = svc.meta.namespace
    near = _near(svc, workloads)
    if near is not None:
        return hint("did-you-mean", name=f"selector {near}"), near
    if not workloads:
        return hint("no-workloads", namespace=ns), None
    shown = sorted({labels(wl.pod_labels) for wl in workloads})
    return hint("pods-labelled", namespace=ns, labels="; ".join(shown)), None


def _sending(route: m.HTTPRoute) -> list[m.ObjectRef]:
    """The route's backendRefs that carry traffic: not those of weight 0 ("no traffic
    should be forwarded for this entry"); mirrors carry a copy."""
    silent = {id(b.ref) for rule in route.rules for b in rule.backend_refs if b.weight <= 0}
    return [ref for ref in backend_refs(route) if id(ref) not in silent]


def _route(ctx: Context, pods: Pods, route: m.HTTPRoute) -> Iterator[Finding]:
    res = ctx.res
    for ref in _sending(route):
        backend = resolve_ref(res, route, ref, 1).backend
        if backend is None:
            continue  # httproute-backend-refs says why
        svc = res.services[(backend.namespace, backend.name)]
        if not without_pods(res, pods, svc):
            continue
        fix, near = _fix(svc, pods.workloads_in(svc.meta.namespace))
        selector = svc.meta.where("spec.selector")
        service = f"{backend.namespace}/{backend.name}"
        yield at(
            CODE,
            NAME,
            route.meta,
            f"{ref.path}.name",
            actual={"service": service, "selector": labels(svc.selector)},
            expected={"did_you_mean": near} if near else None,
            related=(Related(selector.file, selector.line, f"Service {service} selector"),),
            service=service,
            selector=labels(svc.selector),
            fix=fix,
        )


def check(ctx: Context) -> Iterable[Finding]:
    pods = Pods(ctx.res)
    for route in with_mesh_routes(ctx.res, ctx.controller_name):
        yield from _route(ctx, pods, route)


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("HTTPRoute",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httprouterule",
    doc=(__doc__ or "").strip(),
    check=check,
)
