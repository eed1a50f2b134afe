"""The spec model's decision list for a (Gateway, Listener, hostname).

Every match of every rule that serves the Listener for that hostname, in the order
the spec's precedence gives them (``spec.match.PRECEDENCE``, with the hostname's own
keys), each with its predicate and the action the spec model's own ``act`` gives
(``verifier.semantics.decisions`` states the normal form). The first entry that
accepts a request is the rule ``spec_evaluate`` chooses for it, because the
candidates it ranks are exactly the entries that accept the request, ranked by the
same key. Nothing here comes from the translator.
"""

from __future__ import annotations

from verifier.gatewayapi.model import Gateway, GatewayListener, RouteMatch, RouteRule, ValueMatch
from verifier.gatewayapi.resources import Resources
from verifier.semantics import decisions as d
from verifier.semantics.request import Request
from verifier.semantics.spec.action import act
from verifier.semantics.spec.filters import header_ops
from verifier.semantics.spec.hostnames import route_hostname_key
from verifier.semantics.spec.index import IndexedMatch, SpecIndex
from verifier.semantics.spec.listeners import NO_RESPONSE, gateway_problem
from verifier.semantics.spec.listenersets import merged_gateway
from verifier.semantics.spec.match import (
    Candidate,
    effective_headers,
    effective_query_params,
    path_kind,
    precedence_key,
)

# Filters whose effect does not depend on the request beyond its headers: the probes
# of ``decisions.action_of`` then state it in full.
STATED_FILTERS = frozenset({"RequestHeaderModifier", "ResponseHeaderModifier", "RequestMirror"})


def _value(v: ValueMatch, name: str) -> d.ValuePred | None:
    kind = {"Exact": "exact", "RegularExpression": "regex"}.get(v.type)
    return None if kind is None else d.value_pred(name, kind, v.value)


def predicate(match: RouteMatch) -> d.Predicate | None:
    """HTTPRouteMatch in the normal form (``spec.match.match_accepts`` says how it
    matches); None for a kind the form has no word for."""
    found = path_kind(match.path)
    if found is None or (found[0] == "segment_prefix" and not found[1].startswith("/")):
        return None
    # Every path starts with "/": the prefix of "/" alone is stated as Envoy's ``prefix: /``.
    path = d.PathPred("prefix", "/") if found == ("prefix", "") else d.path_pred(*found)
    headers = [_value(h, h.name.lower()) for h in effective_headers(match)]
    query = [_value(q, q.name) for q in effective_query_params(match)]
    if any(v is None for v in (*headers, *query)):
        return None
    return d.Predicate(
        path,
        match.method,
        tuple(sorted((h for h in headers if h), key=lambda v: v.name)),
        tuple(sorted((q for q in query if q), key=lambda v: v.name)),
    )


def _touched(rule: RouteRule) -> tuple[set[str], set[str]]:
    request: set[str] = set()
    response: set[str] = set()
    for f in rule.filters:
        if f.request_header_modifier:
            request |= {n.lower() for _, n, _ in header_ops(f.request_header_modifier)}
        if f.response_header_modifier:
            response |= {n.lower() for _, n, _ in header_ops(f.response_header_modifier)}
    return request, response


def action(res: Resources, port: int, c: Candidate, hostname: str) -> tuple[d.Action | None, str]:
    """The rule's action in the normal form, from ``act`` on two probe requests."""
    rule = c.rule
    if any(f.type not in STATED_FILTERS for f in rule.filters):
        return None, "a filter whose effect depends on the request"
    if any(b.filters for b in rule.backend_refs):
        return None, "backendRef filters (per chosen backend)"
    req_names, resp_names = _touched(rule)
    absent = Request(method="GET", host=hostname, port=port, path="/")
    present = Request(
        method="GET", host=hostname, port=port, path="/", headers=d.probe_headers(req_names)
    )
    without = act(res, port, c, absent).outcome
    return d.action_of(
        without,
        act(res, port, c, present).outcome if req_names else without,
        ("GET", hostname, "/"),
        req_names,
        resp_names,
    )


def decision_list(
    res: Resources, index: SpecIndex, gw: Gateway, lst: GatewayListener, hostname: str
) -> d.DecisionList:
    """The first-match list of ``lst`` (of the merged Gateway ``gw``) for requests
    whose Host names ``hostname``."""
    lr = index.listener(res, gw, lst)
    seen: dict[int, IndexedMatch] = {}
    for bucket in lr.buckets(hostname):
        for seconds in bucket.by_segment.values():
            for filed in seconds.values():
                seen.update((id(im), im) for im in filed)
        seen.update((id(im), im) for im in bucket.always)
    candidates = []
    for im in seen.values():
        key = route_hostname_key(im.served.effective, hostname)
        if key is not None:
            candidates.append(Candidate(im.served.route, im.rule, im.match_index, im.match, key))
    candidates.sort(key=precedence_key)
    entries = []
    # A rule's action reads its filters, backendRefs and timeouts, and the Route's
    # namespace (backendRefs resolve from it): rules equal in those act alike.
    actions: dict[object, tuple[d.Action | None, str]] = {}
    for c in candidates:
        pred = predicate(c.match)
        if pred is None:
            return d.not_comparable(f"{c.describe()}: a match the normal form cannot state")
        rule = c.rule
        rule_key = (
            c.route.meta.namespace,
            rule.filters,
            rule.backend_refs,
            rule.request_timeout,
            rule.backend_request_timeout,
        )
        found = actions.get(rule_key)
        if found is None:
            found = actions[rule_key] = action(res, lst.port, c, hostname)
        act_, why = found
        if act_ is None:
            return d.not_comparable(f"{c.describe()}: {why}")
        ref = (c.route_key, c.rule.index, c.match_index)
        entries.append(d.Entry(pred, act_, ref))
    return d.DecisionList(tuple(entries))


def routing_of(
    res: Resources, index: SpecIndex, gateway: tuple[str, str], request: Request, controller: str
) -> tuple[Gateway, GatewayListener] | int:
    """The (merged Gateway, Listener) whose list decides ``request``, as ``spec_evaluate``
    chooses them on an address of the Gateway's own; else the status answered before
    any list is read (no response, 404 when no Listener serves the Host, 421)."""
    gw = res.gateways.get(gateway)
    if gw is None or gateway_problem(res, gw, controller) is not None:
        return NO_RESPONSE
    merged = merged_gateway(res, gw)
    selection = index.selection(res, merged, request)
    return selection.status if selection.listener is None else (merged, selection.listener)
