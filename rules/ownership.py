"""Which rule owns a disagreement between the spec model and the Envoy model.

One wrong behaviour should produce one finding, from the rule of the feature
it breaks: a wrong Location port is HTTPRoutePortRedirect's, not the generic
equivalence rule's. Attribution looks at which outcome fields differ and at
the feature the witness request was generated to probe; whatever no feature
rule owns falls to `whole-config-equivalence`.
"""

from __future__ import annotations

from verifier.rules.support import mesh

from verifier.check import Comparison, Context, connection_level
from verifier.mesh_compare import CAPTURED, KUBE_PROXY
from verifier.semantics import witness as wt
from verifier.semantics.spec.mesh import applicable_routes, selects_port, service_parent
from verifier.semantics.witness_mesh import CLUSTER_IP

REDIRECT_FIELDS = {"redirect", "redirect.scheme", "redirect.host", "redirect.port", "redirect.path"}
ROUTING_FIELDS = {
    "status",
    "backends",
    "invalid_weight",
    "unavailable_weight",
    "forwarded",
    "redirect",
}
# Redirect field -> owning rule, most specific first.
REDIRECT_OWNERS = (
    ("redirect.scheme", "httproute-scheme-redirect"),
    ("redirect.port", "httproute-port-redirect"),
    ("redirect.path", "httproute-path-redirect"),
    ("redirect.host", "httproute-request-redirect"),
)
# Witness feature -> owning rule for routing-decision disagreements.
FEATURE_OWNERS = {
    wt.HEADER: "httproute-header-matching",
    wt.QUERY: "httproute-query-param-matching",
    wt.METHOD: "httproute-method-matching",
    wt.HOST: "httproute-hostnames",
    wt.PRECEDENCE: "httproute-precedence",
    wt.MISDIRECTED: "gateway-https-misdirected-requests",
    wt.FRONTEND: "gateway-frontend-client-certificate-validation",
    wt.LISTENER_SET: "listener-set",
}
BASE_NOTES = {"exact", "prefix itself", "root", "regex sample"}
# When several witnesses of one HTTPRoute match disagree, the most specific
# owner reports it (the order of this tuple); the generic rules come last.
OWNER_PRIORITY = (
    mesh.MTLS,
    mesh.IDENTITY,
    "mesh-consumer-route",
    "mesh-cluster-ip-matching",
    "httproute-header-matching",
    "httproute-query-param-matching",
    "httproute-method-matching",
    "httproute-cors",
    "gateway-frontend-client-certificate-validation",
    "listener-set",
    "gateway-https-misdirected-requests",
    "httproute-scheme-redirect",
    "httproute-port-redirect",
    "httproute-path-redirect",
    "httproute-redirect-status-code",
    "httproute-request-redirect",
    "httproute-host-rewrite",
    "httproute-path-rewrite",
    "httproute-request-mirror",
    "httproute-timeouts",
    "httproute-backend-request-header-modification",
    "httproute-request-header-modifier",
    "httproute-response-header-modification",
    "httproute-backend-weights",
    "httproute-parent-ref-port",
    "attached-rules-rendered",
    "httproute-path-matching",
    "httproute-precedence",
    "httproute-hostnames",
    "mesh-no-route-kube-proxy",
    "no-route-default-404",
    "whole-config-equivalence",
)
# What a disagreement is about, when it is not the witness's HTTPRoute match
# (check._culprit): an HTTPRoute match ((namespace, name), rule, match), or a Service
# frontend ((namespace, name), port, what).
Culprit = tuple[object, ...]


def _same_route(c: Comparison) -> bool:
    s, e = c.spec.outcome.route, c.envoy.outcome.route
    if s is None or e is None or e.httproute is None:
        return False
    return (s.httproute, s.rule) == (e.httproute, e.rule)


def _redirect_owner(c: Comparison, diffs: set[str]) -> str | None:
    s, e = c.spec.outcome, c.envoy.outcome
    if s.redirect is not None and e.redirect is not None:
        for fld, rule in REDIRECT_OWNERS:
            if fld in diffs:
                return rule
        if diffs == {"status"}:
            return "httproute-redirect-status-code"
    return None


def _modification_owner(c: Comparison, ctx: Context, diffs: set[str]) -> str | None:
    rule = ctx.rule_of(c)
    if diffs <= {"mirrors"}:
        return "httproute-request-mirror"
    if diffs <= {"timeouts"}:
        return "httproute-timeouts"
    if diffs <= {"response_headers", "response_headers_removed"}:
        if rule is not None and any(f.cors is not None for f in rule.filters):
            return "httproute-cors"
        return "httproute-response-header-modification"
    if diffs <= {"request.headers"}:
        if rule is not None and any(b.filters for b in rule.backend_refs):
            return "httproute-backend-request-header-modification"
        return "httproute-request-header-modifier"
    if diffs <= {"request.host"}:
        return "httproute-host-rewrite"
    if diffs <= {"request.path"}:
        return "httproute-path-rewrite"
    if diffs <= {"backends", "invalid_weight", "unavailable_weight", "status"} and _same_route(c):
        return "httproute-backend-weights"
    return None


def _listener_set_port(c: Comparison, ctx: Context) -> bool:
    """Only ListenerSet listeners (admitted or not) are on the request's port."""
    gw = ctx.res.gateways.get(c.witness.gateway)
    port = c.request.port
    if gw is None or any(lst.port == port for lst in gw.listeners):
        return False
    return any(
        lst.port == port
        for ls in ctx.res.listener_sets.values()
        if (ls.parent_namespace, ls.parent_name) == gw.meta.key
        for lst in ls.listeners
    )


def owner(c: Comparison, ctx: Context) -> str:
    return attribute(c, ctx)[0]


def attribute(c: Comparison, ctx: Context) -> tuple[str, Culprit | None]:
    """The owning rule of a disagreement, and what it is about when that is not the
    witness's own match (one finding for every request one mistake breaks)."""
    if c.request.source is not None:
        found = _mesh(c, ctx)
        if found is not None:
            return found
    return _owner(c, ctx), None


def _mesh(c: Comparison, ctx: Context) -> tuple[str, Culprit | None] | None:
    """A mesh request's owner: kube-proxy's answer; a cluster dialling a mesh workload
    wrongly (rules/support/mesh.py); the route table the client's sidecar routes the
    request over, against the mesh routes the spec applies to that client and frontend
    (a route of another Service, another namespace's consumer route, a port its
    parentRef leaves out, a producer route where a consumer route takes precedence);
    a Service no route applies to."""
    assert c.request.source is not None
    if c.answered_by == KUBE_PROXY:
        return "mesh-no-route-kube-proxy", (c.witness.gateway, c.request.port, KUBE_PROXY)
    broken = mesh.broken_by(ctx, c)
    for rule in (mesh.MTLS, mesh.IDENTITY):
        if rule in broken:
            return rule, None
    svc = ctx.res.services.get(c.witness.gateway)
    port = next((p for p in svc.ports if p.port == c.request.port), None) if svc else None
    if svc is None or port is None:
        return None
    client = c.request.source.namespace
    applicable = applicable_routes(ctx.res, svc, port, client)
    found = route_table(c, ctx)
    if found is None:  # no route table routes the frontend's traffic
        if applicable:  # the routes that apply are not applied: at the first of them
            return "mesh-cluster-ip-matching", (applicable[0].meta.key, None, None)
        return "mesh-no-route-kube-proxy", (svc.meta.key, port.port, "default")
    wanted = {r.meta.key for r in applicable}
    consumers = [r for r in applicable if r.meta.namespace != svc.meta.namespace]
    for key, rule, match in found:
        if key in wanted or key not in ctx.res.httproutes:
            continue
        route = ctx.res.httproutes[key]
        parents = [
            p
            for p in route.parent_refs
            if service_parent(p) and (p.namespace, p.name) == svc.meta.key
        ]
        if not parents:
            return "mesh-cluster-ip-matching", (key, rule, match)
        if route.meta.namespace not in (svc.meta.namespace, client):
            return "mesh-consumer-route", (key, rule, match)
        if not any(selects_port(p, port) for p in parents):
            return "httproute-parent-ref-port", (key, rule, match)
        if consumers:  # a producer route where the client's consumer routes take precedence
            return "mesh-consumer-route", (consumers[0].meta.key, None, None)
    present = {key for key, _rule, _match in found}
    if consumers and not present & {r.meta.key for r in consumers}:
        return "mesh-consumer-route", (consumers[0].meta.key, None, None)
    if not applicable and c.spec.outcome.route is None:
        return "mesh-no-route-kube-proxy", (svc.meta.key, port.port, "default")
    if c.witness.feature == CLUSTER_IP:
        return "mesh-cluster-ip-matching", None
    return None


def route_table(
    c: Comparison, ctx: Context
) -> list[tuple[tuple[str, str], int | None, int | None]] | None:
    """The HTTPRoute matches the routes of the client's route table for this request
    were made from (where the xDS says), in order; None when no route table routes it."""
    assert c.request.source is not None
    model = ctx.mesh_plane.model(c.request.source)
    refs = model.routes_for(c.request, CAPTURED) if model is not None else None
    if refs is None:
        return None
    out = []
    for ref in refs:
        if ref.httproute and "/" in ref.httproute:
            ns, name = ref.httproute.split("/", 1)
            out.append(((ns, name), ref.rule, ref.match))
    return out


def _owner(c: Comparison, ctx: Context) -> str:
    if connection_level(c) and c.witness.feature != wt.FRONTEND and _listener_set_port(c, ctx):
        return "listener-set"
    diffs = set(c.diffs)
    found = _redirect_owner(c, diffs) or _modification_owner(c, ctx, diffs)
    if found:
        return found
    w = c.witness
    if w.feature in FEATURE_OWNERS:
        return FEATURE_OWNERS[w.feature]
    mesh_request = c.request.source is not None
    if w.route is None:
        if c.spec.outcome.status == 404:
            return "no-route-default-404"
        return "mesh-no-route-kube-proxy" if mesh_request else "httproute-hostnames"
    route = ctx.route(w.route)
    # A mesh route's parentRef.port is judged on its client's route table (_mesh).
    if (
        not mesh_request
        and route is not None
        and any(p.port is not None for p in route.parent_refs)
    ):
        return "httproute-parent-ref-port"
    if w.feature == wt.PATH:
        if w.note in BASE_NOTES and c.envoy.outcome.status == 404:
            return "attached-rules-rendered"
        return "httproute-path-matching"
    if w.feature == wt.CORS:
        return "httproute-cors"
    return "whole-config-equivalence"
