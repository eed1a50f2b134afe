"""The configuration mistakes the spec model's answer to a request rests on.

A case that fails because a backendRef names a Service that does not exist, or
because its HTTPRoute attaches to no listener, should say so at that line, not
only "status 500, expected 200" at the case. This asks the spec model's own
decisions (``spec.backends.resolve_ref``, ``spec.attach.attachment_refusal``)
about the answer it gave, after the fact: only for requests whose answer is in
question (a failing case), so the witnesses' hot path pays nothing.

- An answer from a rule (forwarded, or 500 for an invalid share): each of the
  rule's backendRefs with a positive weight that does not resolve, and each
  RequestMirror filter whose backendRef does not ("If the referent cannot be
  found, this BackendRef is invalid and must be dropped").
- A 404 from the listener (no attached rule matches): each HTTPRoute that has a
  rule matching the request but does not serve that listener: it names the
  Gateway and is refused by it (NoMatchingParent, NotAllowedByListeners,
  NoMatchingListenerHostname, UnsupportedValue) while its hostnames cover the
  request's host, or it intersects no listener hostname of the Gateway at all;
  or it names a Gateway that does not exist in the request's namespace reach
  while its hostnames cover the request's host (a parentRef typo).
- A mesh answer (``refused_mesh_parents``): the refused Service parentRefs of the
  mesh routes written for the request, which therefore apply to no one.

Pure, like the rest of the spec model: only ``Resources`` are read.
"""

from __future__ import annotations

from dataclasses import dataclass

from verifier.gatewayapi.model import (
    GATEWAY_GROUP,
    Gateway,
    GatewayListener,
    HTTPRoute,
    ParentRef,
    RouteRule,
    Service,
)
from verifier.gatewayapi.resources import Resources
from verifier.semantics.request import Outcome, Request
from verifier.semantics.spec.attach import attachment_refusal, refers_to_gateway
from verifier.semantics.spec.backends import has_ready_endpoint, resolve_ref
from verifier.semantics.spec.filters import mirror_share_ppm
from verifier.semantics.spec.hostnames import effective_hostnames, route_hostname_key
from verifier.semantics.spec.listeners import select_listener
from verifier.semantics.spec.listenersets import merged_gateway
from verifier.semantics.spec.match import match_accepts, rule_problem
from verifier.semantics.spec.mesh import applicable_routes, mesh_index_for, service_parent
from verifier.semantics.spec.status import service_kind_in_gateway_group, service_parent_refusal
from verifier.suggest import closest

NO_MATCH_STATUS = 404
NO_READY_ENDPOINT = "NoReadyEndpoint"


@dataclass(frozen=True)
class Mistake:
    """One configuration mistake: the status reason a controller would write
    (``reason``), the HTTPRoute and the field it is at, and what is wrong there.
    ``missing_port``: a BackendNotFound for a port the Service lacks."""

    reason: str
    namespace: str
    name: str
    field: str
    problem: str
    missing_port: bool = False
    kind: str = "HTTPRoute"
    mesh_parent: bool = False  # a refused Service parentRef of a mesh route (GAMMA)

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name} {self.field}: {self.problem}"


def mistakes(
    res: Resources, gateway: tuple[str, str], request: Request, outcome: Outcome
) -> tuple[Mistake, ...]:
    """The mistakes the spec model's ``outcome`` for ``request`` to ``gateway`` rests
    on (module docstring); empty when it rests on none this can name."""
    ref = outcome.route
    if ref is not None and ref.httproute and "/" in ref.httproute and ref.rule is not None:
        return rule_mistakes(res, outcome)
    if outcome.status != NO_MATCH_STATUS:
        return ()
    gw = res.gateways.get(gateway)
    if gw is None:
        return ()
    gw = merged_gateway(res, gw)
    lst = select_listener(res, gw, request).listener
    if lst is None:
        return ()
    found: list[Mistake] = []
    for key in sorted(res.httproutes):
        route = res.httproutes[key]
        if not _would_match(route, request):
            continue
        if any(refers_to_gateway(p, gw) for p in route.parent_refs):
            found.extend(_refused(res, gw, lst, route, request))
        else:
            found.extend(_missing_parents(res, route, request))
    return tuple(found)


def rule_mistakes(res: Resources, outcome: Outcome) -> tuple[Mistake, ...]:
    """The mistakes of the HTTPRoute rule ``outcome`` came from (none when no rule's
    did): all a mesh answer can rest on, since no listener answers it."""
    rule = answering_rule(res, outcome)
    return () if rule is None else _in_rule(res, *rule)


def refused_mesh_parents(res: Resources, request: Request, outcome: Outcome) -> tuple[Mistake, ...]:
    """The refused Service parentRefs (NoMatchingParent: a Service that does not exist,
    a port it lacks; or ``kind: Service`` left in the Gateway API group) of the mesh
    routes written for mesh request ``request``, which the spec model's ``outcome`` is
    without: routes of the Service's namespace (producer) or the client's (consumer)
    that no accepted parentRef applies here, whose refused parentRef names the
    request's Service, or a missing one named like it (a typo, a namespace left out),
    and that would have changed the answer: a rule of theirs matches the request, or
    it is a consumer route (it replaces the producer routes whatever it matches), or
    no route answered at all (kube-proxy's answer)."""
    source = request.source
    svc = mesh_index_for(res).by_ip.get(request.address)
    port = next((p for p in svc.ports if p.port == request.port), None) if svc else None
    if source is None or svc is None or port is None:
        return ()
    applied = {r.meta.key for r in applicable_routes(res, svc, port, source.namespace)}
    routed = answering_rule(res, outcome) is not None
    found: list[Mistake] = []
    for key in sorted(res.httproutes):
        route = res.httproutes[key]
        ns = route.meta.namespace
        if key in applied or ns not in (svc.meta.namespace, source.namespace):
            continue
        consumer = ns == source.namespace and ns != svc.meta.namespace
        if routed and not consumer and not _would_match(route, request):
            continue
        for ref in route.parent_refs:
            mistake = _refused_parent(res, route, ref, svc)
            if mistake is not None:
                found.append(mistake)
    return tuple(found)


def _refused_parent(
    res: Resources, route: HTTPRoute, ref: ParentRef, svc: Service
) -> Mistake | None:
    """``ref`` as a mistake, when it is refused and meant ``svc`` (module docstring)."""
    key = svc.meta.key
    if service_kind_in_gateway_group(ref):
        if (ref.namespace, ref.name) != key:
            return None
        problem = f'kind Service in group {GATEWAY_GROUP} names no Service (group must be "")'
        return _of(route, "NoMatchingParent", f"{ref.path}.kind", problem, mesh_parent=True)
    if not service_parent(ref):
        return None
    refusal = service_parent_refusal(res, ref)
    if refusal is None:
        return None
    if refusal.missing is None:
        if (ref.namespace, ref.name) != key:
            return None
    elif ref.name != svc.meta.name and closest(ref.name, [svc.meta.name]) is None:
        return None
    return _of(route, refusal.reason, refusal.path, refusal.detail, mesh_parent=True)


def answering_rule(res: Resources, outcome: Outcome) -> tuple[HTTPRoute, RouteRule] | None:
    """The HTTPRoute rule the spec model's ``outcome`` came from, if a rule's did."""
    ref = outcome.route
    if ref is None or not ref.httproute or "/" not in ref.httproute or ref.rule is None:
        return None
    ns, name = ref.httproute.split("/", 1)
    route = res.httproutes.get((ns, name))
    if route is None or ref.rule >= len(route.rules):
        return None
    return route, route.rules[ref.rule]


def unready_backends(res: Resources, outcome: Outcome) -> tuple[Mistake, ...]:
    """The backendRefs of the rule behind ``outcome`` whose Service has no ready
    endpoint, so that their share is answered 503 (HTTPRouteRule.backendRefs). No
    condition says so (ResolvedRefs stays True): ``reason`` is ``NoReadyEndpoint``,
    the spec's own words, and a case failing on it is not ``doomed``."""
    found = answering_rule(res, outcome)
    if found is None or not outcome.unavailable_weight:
        return ()
    route, rule = found
    out = []
    for b in rule.backend_refs:
        resolved = resolve_ref(res, route, b.ref, b.weight)
        if b.weight > 0 and resolved.backend is not None:
            be = resolved.backend
            if not has_ready_endpoint(res, be):
                problem = (
                    f"Service {be.namespace}/{be.name} has no ready endpoint: its share "
                    f"(weight {b.weight}) is answered 503"
                )
                where = _at(b.ref.path or b.path, "name")
                out.append(_of(route, NO_READY_ENDPOINT, where, problem))
    return tuple(out)


def _in_rule(res: Resources, route: HTTPRoute, rule: RouteRule) -> tuple[Mistake, ...]:
    found: list[Mistake] = []
    for b in rule.backend_refs:
        if b.weight <= 0:
            continue  # "no traffic should be forwarded for this entry": no request fails on it
        resolved = resolve_ref(res, route, b.ref, b.weight)
        if resolved.backend is None:
            where = _at(b.ref.path or b.path, resolved.field)
            problem = resolved.problem or ""
            found.append(_of(route, resolved.reason, where, problem, resolved.missing_port))
    for f in rule.filters:
        mirror = f.request_mirror
        if mirror is None or not mirror_share_ppm(mirror):
            continue
        resolved = resolve_ref(res, route, mirror.backend, 1)
        if resolved.backend is None:
            where = _at(mirror.backend.path or f.path, resolved.field)
            found.append(_of(route, resolved.reason, where, resolved.problem or ""))
    return tuple(found)


def _at(path: str, field: str) -> str:
    """The backendRef field at fault (its name, port, kind, namespace), where a
    configuration finding would place the same mistake."""
    return f"{path}.{field}" if field and path else path


def _of(
    route: HTTPRoute,
    reason: str,
    field: str,
    problem: str,
    missing_port: bool = False,
    *,
    mesh_parent: bool = False,
) -> Mistake:
    meta = route.meta
    return Mistake(
        reason, meta.namespace, meta.name, field, problem, missing_port, mesh_parent=mesh_parent
    )


def _would_match(route: HTTPRoute, request: Request) -> bool:
    """A valid rule of ``route`` has a match that accepts the request."""
    return any(
        match_accepts(match, request)
        for rule in route.rules
        if rule_problem(rule) is None
        for match in rule.matches
    )


def _covers_host(route: HTTPRoute, request: Request) -> bool:
    return (
        route_hostname_key(effective_hostnames(None, route.hostnames), request.hostname) is not None
    )


def _refused(
    res: Resources, gw: Gateway, lst: GatewayListener, route: HTTPRoute, request: Request
) -> list[Mistake]:
    refusal = attachment_refusal(res, gw, lst, route)
    if refusal is None:
        return []
    nowhere = refusal.reason == "NoMatchingListenerHostname" and not any(
        effective_hostnames(other.hostname, route.hostnames) for other in gw.listeners
    )
    if not (_covers_host(route, request) or nowhere):
        return []
    return [_of(route, refusal.reason, refusal.path, refusal.detail)]


def _missing_parents(res: Resources, route: HTTPRoute, request: Request) -> list[Mistake]:
    """parentRefs naming a Gateway that does not exist, on a route for the request's host."""
    if not _covers_host(route, request):
        return []
    return [
        _of(
            route,
            "NoMatchingParent",
            _at(p.path, "name"),
            f"parentRef names Gateway {p.namespace}/{p.name}, which does not exist",
        )
        for p in route.parent_refs
        if p.group == GATEWAY_GROUP
        and p.kind == "Gateway"
        and (p.namespace, p.name) not in res.gateways
    ]
