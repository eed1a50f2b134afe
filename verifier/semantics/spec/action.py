"""What the winning rule does with the request: filters, then backends.

Filters run in the order they are listed (HTTPRouteRule.filters: "Wherever
possible, implementations SHOULD implement filters in the order they are
specified"); backendRef-level filters run after the rule's, and only for the
backend the request goes to (HTTPBackendRef.filters: "Filters defined at this
level should be executed if and only if the request is being forwarded to the
backend defined here").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from verifier.gatewayapi.model import Filter, HTTPRoute
from verifier.gatewayapi.resources import Resources
from verifier.semantics.request import (
    Backend,
    Forwarded,
    Headers,
    Outcome,
    RedirectTarget,
    Request,
    RouteRef,
    evolve,
)
from verifier.semantics.spec.backends import duration_ms, has_ready_endpoint, resolve_ref
from verifier.semantics.spec.cors import PREFLIGHT_STATUS, cors_decision
from verifier.semantics.spec.filters import (
    HeaderOp,
    HeaderPlan,
    apply_header_ops,
    header_ops,
    mirror_share_ppm,
    redirect_target,
    rewritten,
    to_headers,
)
from verifier.semantics.spec.match import Candidate

# HTTPRouteRule.backendRefs: "If *all* entries in BackendRefs are invalid, and
# there are also no filters specified in this route rule, *all* traffic which
# matches this rule MUST receive a 500 status code." "When a HTTPBackendRef is
# invalid, 500 status codes MUST be returned for requests that would have
# otherwise been routed to an invalid backend." BackendRef.weight: "If weight
# is set to 0, no traffic should be forwarded for this entry."
NO_BACKEND_STATUS = 500
FORWARDED_STATUS = 200
# HTTPRouteRule.backendRefs: "When a HTTPBackendRef refers to a Service that has no
# ready endpoints, implementations SHOULD return a 503 for requests to that backend
# instead. If an implementation chooses to do this, all of the above rules for 500
# responses MUST also apply for responses that return a 503." The edge does.
NO_READY_ENDPOINT_STATUS = 503

# Filters a backendRef may carry that the model applies (per chosen backend).
BACKEND_FILTERS_MODELLED = frozenset({"RequestHeaderModifier", "ResponseHeaderModifier"})


@dataclass(frozen=True)
class Action:
    outcome: Outcome
    response_plan: HeaderPlan
    trace: tuple[str, ...]


def _ops_text(ops: tuple[HeaderOp, ...]) -> str:
    return ", ".join(f"{a} {n}" + (f"={v}" if a != "remove" else "") for a, n, v in ops) or "none"


@dataclass
class _Pipeline:
    """The request as the rule's filters transform it, in order."""

    res: Resources
    route: HTTPRoute
    request: Request
    listener_port: int
    matched_prefix: str | None  # the PathPrefix value that matched, for ReplacePrefixMatch
    trace: list[str] = field(default_factory=list)
    req_ops: list[HeaderOp] = field(default_factory=list)
    resp_ops: list[HeaderOp] = field(default_factory=list)
    mirrors: list[Backend] = field(default_factory=list)
    host: str = ""
    path: str = ""
    redirect: tuple[int, RedirectTarget] | None = None
    preflight: bool = False

    def response(self, status: int, ref: RouteRef, **fields: Any) -> Action:
        """The Action answering ``status``; ``fields`` are further Outcome fields."""
        plan = HeaderPlan(tuple(self.resp_ops))
        added, removed = _response_headers(plan)
        outcome = Outcome(
            status,
            response_headers=added,
            response_headers_removed=removed,
            response_header_ops=plan.ops,
            route=ref,
        )
        return Action(evolve(outcome, **fields), plan, tuple(self.trace))


def _request_header_modifier(p: _Pipeline, f: Filter) -> None:
    if f.request_header_modifier:
        ops = header_ops(f.request_header_modifier)
        p.req_ops.extend(ops)
        p.trace.append(f"filter RequestHeaderModifier: {_ops_text(ops)}")


def _response_header_modifier(p: _Pipeline, f: Filter) -> None:
    if f.response_header_modifier:
        ops = header_ops(f.response_header_modifier)
        p.resp_ops.extend(ops)
        p.trace.append(f"filter ResponseHeaderModifier: {_ops_text(ops)}")


def _cors(p: _Pipeline, f: Filter) -> None:
    if f.cors:
        cors = cors_decision(f.cors, p.request)
        p.resp_ops.extend(cors.ops)
        p.preflight = p.preflight or cors.preflight
        p.trace.append(f"filter CORS: {cors.why}")


def _request_redirect(p: _Pipeline, f: Filter) -> None:
    if f.request_redirect:
        target, why = redirect_target(
            f.request_redirect, p.request, p.listener_port, p.matched_prefix
        )
        p.redirect = (f.request_redirect.status_code, target)
        p.trace.append(f"filter RequestRedirect: {f.request_redirect.status_code} to {why}")


def _url_rewrite(p: _Pipeline, f: Filter) -> None:
    if f.url_rewrite:
        p.host, p.path = rewritten(f.url_rewrite, p.request, p.host, p.matched_prefix)
        p.trace.append(f"filter URLRewrite: host {p.host!r}, path {p.path!r}")


def _request_mirror(p: _Pipeline, f: Filter) -> None:
    """HTTPRequestMirrorFilter.backendRef: "If the referent cannot be found, this
    BackendRef is invalid and must be dropped from the Gateway"."""
    if not f.request_mirror:
        return
    mirror = f.request_mirror
    share = mirror_share_ppm(mirror)
    resolved = resolve_ref(p.res, p.route, mirror.backend, share)
    if resolved.backend is None:
        p.trace.append(f"filter RequestMirror: dropped, {resolved.problem}")
    elif share == 0:
        p.trace.append(f"filter RequestMirror: {mirror.backend.name} gets 0% of requests")
    else:
        p.mirrors.append(resolved.backend)
        p.trace.append(f"filter RequestMirror: {mirror.backend.name}, {share} ppm")


# Rule-level filter type -> its effect on the pipeline. ExtensionRef and
# ExternalAuth never get here: a Route using them is not Accepted (spec.attach).
RULE_FILTERS: dict[str, Callable[[_Pipeline, Filter], None]] = {
    "RequestHeaderModifier": _request_header_modifier,
    "ResponseHeaderModifier": _response_header_modifier,
    "CORS": _cors,
    "RequestRedirect": _request_redirect,
    "URLRewrite": _url_rewrite,
    "RequestMirror": _request_mirror,
}


def _response_headers(plan: HeaderPlan) -> tuple[Headers, tuple[str, ...]]:
    """(headers the configuration adds or sets, names it removes)."""
    added = plan.apply(())
    present = {name for name, _ in added}
    removed = tuple(sorted({n for a, n, _ in plan.ops if a == "remove"} - present))
    return added, removed


def _forwarded_headers(
    request: Request, host: str, ops: tuple[HeaderOp, ...]
) -> tuple[str, dict[str, list[str]]]:
    """(Host, other headers) after ``ops``; Host is kept apart as Forwarded.host.

    HTTPRouteSpec.hostnames: "(absent of any applicable header modification
    configuration) MUST forward this header unmodified to the backend"."""
    headers = {name: list(values) for name, values in request.headers if name != "host"}
    for action, name, value in ops:
        if name == "host" and action != "remove":
            host = value
    apply_header_ops(headers, tuple(op for op in ops if op[1] != "host"))
    return host, headers


def _backend_filter_ops(
    filters: tuple[Filter, ...],
) -> tuple[tuple[HeaderOp, ...], tuple[HeaderOp, ...], list[str]]:
    req: list[HeaderOp] = []
    resp: list[HeaderOp] = []
    ignored: list[str] = []
    for f in filters:
        if f.type == "RequestHeaderModifier" and f.request_header_modifier:
            req.extend(header_ops(f.request_header_modifier))
        elif f.type == "ResponseHeaderModifier" and f.response_header_modifier:
            resp.extend(header_ops(f.response_header_modifier))
        elif f.type not in BACKEND_FILTERS_MODELLED:
            ignored.append(f.type)
    return tuple(req), tuple(resp), ignored


def act(res: Resources, port: int, winner: Candidate, request: Request) -> Action:
    """The outcome of ``request`` once ``winner`` has been chosen; ``port``: the parent's
    port it arrived on (a Gateway Listener's, or a Service's for a mesh request)."""
    route = winner.route
    ref = RouteRef(
        httproute=f"{route.meta.namespace}/{route.meta.name}",
        rule=winner.rule.index,
        match=winner.match_index,
    )
    prefix = winner.match.path.value if winner.match.path.type == "PathPrefix" else None
    p = _Pipeline(res, route, request, port, prefix, host=request.host, path=request.path)
    for f in winner.rule.filters:
        handler = RULE_FILTERS.get(f.type)
        if handler is None:
            p.trace.append(f"filter {f.type}: not modelled")
        else:
            handler(p, f)
    if p.preflight:
        p.trace.append(f"CORS preflight answered by the gateway with {PREFLIGHT_STATUS}")
        return p.response(PREFLIGHT_STATUS, ref)
    if p.redirect is not None:
        return p.response(p.redirect[0], ref, redirect=p.redirect[1])
    return _forward(p, winner, ref)


def _forward(p: _Pipeline, winner: Candidate, ref: RouteRef) -> Action:
    """Weighted backendRefs: valid shares forwarded, invalid shares answered with 500,
    the shares of backends with no ready endpoint with 503."""
    rule = winner.rule
    backends: list[Backend] = []
    backend_filters: list[tuple[tuple[HeaderOp, ...], tuple[HeaderOp, ...]]] = []
    invalid = unavailable = 0
    for b in rule.backend_refs:
        resolved = resolve_ref(p.res, p.route, b.ref, b.weight)
        if resolved.backend is None:
            invalid += b.weight
            p.trace.append(
                f"backendRef {b.ref.name} (weight {b.weight}) invalid: {resolved.problem}"
            )
        elif b.weight <= 0:
            p.trace.append(f"backendRef {b.ref.name} has weight 0: no traffic")
        elif not has_ready_endpoint(p.res, resolved.backend):
            # HTTPRouteRule.backendRefs: "When a HTTPBackendRef refers to a Service that
            # has no ready endpoints, implementations SHOULD return a 503 for requests to
            # that backend instead": its share, not the others'.
            unavailable += b.weight
            be = resolved.backend
            p.trace.append(
                f"backendRef {be.namespace}/{be.name}:{be.port} weight {b.weight} has no "
                f"ready endpoint: its share gets {NO_READY_ENDPOINT_STATUS}"
            )
        else:
            req_b, resp_b, ignored = _backend_filter_ops(b.filters)
            if ignored:
                p.trace.append(f"backendRef {b.ref.name}: filters {ignored} not modelled")
            backends.append(resolved.backend)
            backend_filters.append((req_b, resp_b))
            be = resolved.backend
            p.trace.append(
                f"backendRef {be.namespace}/{be.name}:{be.port} weight {b.weight} "
                f"({resolved.protocol})"
            )
    notes = _apply_backend_filters(p, backend_filters)
    shares: dict[str, Any] = {"invalid_weight": invalid, "unavailable_weight": unavailable}
    if not backends and not unavailable:
        why = "no backendRefs" if not rule.backend_refs else "no valid backendRef with weight > 0"
        p.trace.append(f"{why}: {NO_BACKEND_STATUS}")
        return p.response(NO_BACKEND_STATUS, ref, notes=notes, **shares)
    if not backends:
        p.trace.append(f"no backend has a ready endpoint: {NO_READY_ENDPOINT_STATUS}")
        return p.response(NO_READY_ENDPOINT_STATUS, ref, notes=notes, **shares)
    host, headers = _forwarded_headers(p.request, p.host, tuple(p.req_ops))
    forwarded = Forwarded(p.request.method, host, p.path, to_headers(headers))
    request_ms, backend_ms = rule_timeouts(rule.request_timeout, rule.backend_request_timeout)
    if request_ms is not None or backend_ms is not None:
        p.trace.append(f"timeouts: request {request_ms} ms, backendRequest {backend_ms} ms")
    total = invalid + unavailable + sum(b.weight for b in backends)
    for weight, status in ((invalid, NO_BACKEND_STATUS), (unavailable, NO_READY_ENDPOINT_STATUS)):
        if weight:
            p.trace.append(f"{weight}/{total} of the traffic gets {status}")
    return p.response(
        FORWARDED_STATUS,
        ref,
        backends=tuple(sorted(backends)),
        request=forwarded,
        mirrors=tuple(sorted(p.mirrors)),
        request_timeout_ms=request_ms,
        backend_timeout_ms=backend_ms,
        notes=notes,
        **shares,
    )


def rule_timeouts(request: str | None, backend: str | None) -> tuple[int | None, int | None]:
    """(request, backendRequest) timeouts in ms; None: the implementation's default.

    GEP-1742: "A zero-valued timeout ("0s") MUST be interpreted as disabling the
    timeout"; request: "When this field is unspecified, request timeout behavior is
    implementation-specific"; backendRequest: "when specified, the value of
    BackendRequest must be no more than the value of the Request timeout (since the
    Request timeout encompasses the BackendRequest timeout)". So an unset request
    timeout beside a backendRequest one is whatever the implementation picks, but
    never shorter than backendRequest: it is taken to be backendRequest itself. A
    rule with ``backendRequest: 0s`` alone (upstream conformance,
    httproute-timeout-backend-request.yaml) then has no deadline at all, where a
    default request timeout (Envoy's 15 s) would cut short a backend request the
    rule lets run forever.
    """
    request_ms, backend_ms = duration_ms(request), duration_ms(backend)
    if request_ms is None and backend_ms is not None:
        request_ms = backend_ms
    return request_ms, backend_ms


def _apply_backend_filters(
    p: _Pipeline, per_backend: list[tuple[tuple[HeaderOp, ...], tuple[HeaderOp, ...]]]
) -> tuple[str, ...]:
    """Backend-level header filters run after the rule's, for the backend that
    gets the request. With several backends carrying different filters, the
    one forwarded request of the Outcome cannot show them: say so."""
    if len(set(per_backend)) == 1:
        req_b, resp_b = per_backend[0]
        if req_b or resp_b:
            p.trace.append(
                f"backendRef filters: request {_ops_text(req_b)}; response {_ops_text(resp_b)}"
            )
        p.req_ops.extend(req_b)
        p.resp_ops.extend(resp_b)
        return ()
    if per_backend:
        note = "backendRef filters differ per backend; forwarded request shows rule filters only"
        p.trace.append(note)
        return (note,)
    return ()
