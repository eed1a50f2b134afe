"""The spec model: what the Gateway API v1.5 requires for one request.

For a Gateway, the port a request arrives on and the request itself, it
answers the outcome the spec REQUIRES (GATEWAY-HTTP Core + Extended, as the
aether edge claims them), with a human-readable trace of each decision:

1. the Gateway's class belongs to this controller (``spec.listeners``);
2. the one Listener that owns the port + SNI + Host, or 404/421/no response;
3. the HTTPRoutes that serve that Listener: parentRefs, allowedRoutes,
   hostnames, supported features (``spec.attach``, ``spec.hostnames``);
4. the matching rule with the highest precedence (``spec.match``);
5. its filters and backends (``spec.action``, ``spec.filters``, ``spec.cors``,
   ``spec.backends``).

Step 3 does not depend on the request: ``spec.index`` does it once per
Resources and files the attached matches by hostname and first path segment,
so a request is only tested against the matches that could accept it.
``spec_evaluate`` keeps one index per live ``Resources`` object;
``SpecModel`` holds one explicitly. ``spec_evaluate_scan`` is the
request-by-request scan over every HTTPRoute, kept as the index's oracle.

It is written from the spec text, independently of ``verifier.translate`` and
``verifier.gatewayapi.attach``: sharing decisions with the translator would
make the verifier agree with the translator's bugs. Only the data types are
shared. Pure: no I/O, no environment.
"""

from __future__ import annotations

from dataclasses import replace

from verifier.gatewayapi.model import Gateway, GatewayListener, HTTPRoute
from verifier.gatewayapi.resources import Resources
from verifier.semantics.request import Evaluation, Headers, Request
from verifier.semantics.spec.attach import attachment_problem, refers_to_gateway
from verifier.semantics.spec.decide import NO_MATCH_STATUS, Decision, answer, decide_rule
from verifier.semantics.spec.hostnames import effective_hostnames, route_hostname_key
from verifier.semantics.spec.index import (
    IndexedMatch,
    ListenerRoutes,
    ServedRoute,
    SpecIndex,
    path_keys,
)
from verifier.semantics.spec.listeners import (
    NO_RESPONSE,
    describe,
    gateway_problem,
    listener_ports,
    select_listener,
    shared_peers,
)
from verifier.semantics.spec.listenersets import merged_gateway
from verifier.semantics.spec.match import Candidate, match_accepts, rule_problem
from verifier.semantics.spec.per_resources import PerResources

DEFAULT_CONTROLLER = "gateway.aether.io/edge"

__all__ = [
    "DEFAULT_CONTROLLER",
    "NO_MATCH_STATUS",
    "NO_RESPONSE",
    "SpecModel",
    "default_port",
    "index_for",
    "spec_evaluate",
    "spec_evaluate_scan",
    "spec_response_headers",
]


def spec_evaluate(
    res: Resources,
    gateway: tuple[str, str],
    request: Request,
    *,
    controller_name: str = DEFAULT_CONTROLLER,
    trace: bool = True,
    shared_address: bool = False,
) -> Evaluation:
    """The outcome the spec requires for ``request`` sent to ``gateway``
    (namespace, name) on ``request.port``, and the steps that decided it.
    ``shared_address``: every Gateway of the controller is on one address, so
    their listeners conflict as one Gateway's would.

    ``Outcome.status`` is ``NO_RESPONSE`` (0) when no HTTP response can come
    back at all: the Gateway is not ours, no programmed Listener serves the
    port, or the TLS handshake cannot complete. ``trace=False``: the same
    outcome with a shorter trace (no line per Route examined), for callers
    that only compare outcomes.
    """
    index = index_for(res)
    return _decide(res, gateway, request, controller_name, index, trace, shared_address).evaluation


def spec_evaluate_scan(
    res: Resources,
    gateway: tuple[str, str],
    request: Request,
    *,
    controller_name: str = DEFAULT_CONTROLLER,
) -> Evaluation:
    """``spec_evaluate`` without the index: every HTTPRoute is examined for
    every request. Same outcome; slower; a trace line for every Route."""
    return _decide(res, gateway, request, controller_name, None).evaluation


def spec_response_headers(
    res: Resources,
    gateway: tuple[str, str],
    request: Request,
    upstream: Headers,
    *,
    controller_name: str = DEFAULT_CONTROLLER,
) -> Headers:
    """The response headers the client receives when the backend (or the
    gateway itself) answers with ``upstream``: the configured set/add/remove
    operations (ResponseHeaderModifier, CORS) applied in order.

    ``Outcome.response_headers`` cannot say whether a value replaces or is
    appended to the backend's; this can ("Add ... appends to any existing
    values associated with the header name").
    """
    plan = _decide(res, gateway, request, controller_name, index_for(res)).response_plan
    return plan.apply(upstream)


class SpecModel:
    """The spec model over one ``Resources``, with its own index.

    The Resources are read as they are when a Listener is first asked about:
    build a new model after changing Gateways, HTTPRoutes or Namespaces.
    """

    def __init__(self, res: Resources, controller_name: str = DEFAULT_CONTROLLER) -> None:
        self.res = res
        self.controller_name = controller_name
        self.index = SpecIndex()

    def evaluate(self, gateway: tuple[str, str], request: Request) -> Evaluation:
        return _decide(self.res, gateway, request, self.controller_name, self.index).evaluation

    def response_headers(
        self, gateway: tuple[str, str], request: Request, upstream: Headers
    ) -> Headers:
        decision = _decide(self.res, gateway, request, self.controller_name, self.index)
        return decision.response_plan.apply(upstream)


# The index holds routes and listeners, never ``res``; built on first use per object.
_INDEXES = PerResources(
    lambda _res: SpecIndex(),
    lambda res: (res.gateways, res.httproutes, res.namespaces, res.listener_sets),
)


def index_for(res: Resources) -> SpecIndex:
    """The index ``spec_evaluate`` uses for ``res``, built once per object.

    Like ``SpecModel``, it assumes ``res`` is not modified once evaluated
    (the loader builds it; checks and rules only read it).
    """
    return _INDEXES(res)


def default_port(res: Resources, gateway: tuple[str, str]) -> int | None:
    """The Gateway's port when it has exactly one (cases may omit the port then)."""
    gw = res.gateways.get(gateway)
    ports = listener_ports(merged_gateway(res, gw)) if gw else ()
    return ports[0] if len(ports) == 1 else None


def _decide(
    res: Resources,
    gateway: tuple[str, str],
    request: Request,
    controller_name: str,
    index: SpecIndex | None,
    tracing: bool = True,
    shared_address: bool = False,
    other_gateways: bool = True,
) -> Decision:
    trace = [f"request: {request.line()}"] if tracing else []
    gw = res.gateways.get(gateway)
    if gw is None:
        trace.append(f"Gateway {gateway[0]}/{gateway[1]} does not exist: no response")
        return answer(NO_RESPONSE, trace)
    problem = gateway_problem(res, gw, controller_name)
    if problem:
        trace.append(f"Gateway {gateway[0]}/{gateway[1]} not programmed: {problem}")
        return answer(NO_RESPONSE, trace)
    gw = merged_gateway(res, gw)
    peers = shared_peers(res, gw, controller_name) if shared_address else ()
    selection = (
        select_listener(res, gw, request, peers)
        if index is None
        else index.selection(res, gw, request, peers)
    )
    trace.extend(selection.trace)
    lst = selection.listener
    if lst is None and peers and other_gateways and selection.status == NO_RESPONSE:
        # One shared address: a connection the Gateway cannot take is still answered
        # by another Gateway's listener on that port, as if it had been sent there.
        for key in sorted(res.gateways):
            other = res.gateways[key]
            if key == gateway or gateway_problem(res, other, controller_name) is not None:
                continue
            if any(p.port == request.port for p in merged_gateway(res, other).listeners):
                trace.append(f"the shared address: Gateway {key[0]}/{key[1]} answers port")
                found = _decide(res, key, request, controller_name, index, tracing, True, False)
                if found.evaluation.outcome.status != NO_RESPONSE:
                    steps = (*trace, *found.evaluation.trace)
                    return replace(found, evaluation=replace(found.evaluation, trace=steps))
    if lst is None:
        return answer(selection.status, trace)
    if index is None:
        candidates = _candidates_scan(res, gw, lst, request, trace)
    else:
        candidates = _candidates_indexed(index.listener(res, gw, lst), request, trace, tracing)
    return decide_rule(res, candidates, request, lst.port, trace, tracing)


def _candidates_indexed(
    lr: ListenerRoutes, request: Request, trace: list[str], tracing: bool = True
) -> list[Candidate]:
    """``_candidates_scan`` over the index: the same Candidates (the same
    hostname keys and match decisions), from the matches filed under the
    request's host and first path segment only."""
    host = request.hostname
    segment, second = path_keys(request.path_only)
    if tracing:
        trace.extend(lr.refused_trace())
    plausible: dict[int, list[IndexedMatch]] = {}
    seen: set[int] = set()
    noted: dict[int, ServedRoute] = {}
    for bucket in lr.buckets(host):
        for sr in bucket.with_dropped:
            noted[sr.order] = sr
        for im in bucket.plausible(segment, second):
            if id(im) not in seen:
                seen.add(id(im))
                plausible.setdefault(im.served.order, []).append(im)
                noted[im.served.order] = im.served
    found: list[Candidate] = []
    for order in sorted(noted):
        sr = noted[order]
        hostname_key = route_hostname_key(sr.effective, host)
        if hostname_key is None:
            if tracing:
                trace.append(
                    f"{sr.name}: hostnames {list(sr.route.hostnames)} do not match host {host!r}"
                )
            continue
        if tracing:
            trace.extend(sr.dropped)
        matches = plausible.get(order)
        if matches:
            found.extend(_indexed_candidates(sr, matches, request, hostname_key, trace, tracing))
    if not tracing:
        return found
    skipped = lr.served - len(plausible)
    if skipped:
        trace.append(
            f"{skipped} of {lr.served} HTTPRoute(s) serving {describe(lr.listener)} skipped "
            f"by the index: {_why_skipped(lr, host, segment, set(plausible), skipped)}"
        )
    if lr.unrelated:
        trace.append(f"{lr.unrelated} HTTPRoute(s) do not reference this Gateway")
    return found


def _why_skipped(
    lr: ListenerRoutes, host: str, segment: str, plausible: set[int], skipped: int
) -> str:
    """Which of the two reasons skipped the Routes the index passed over: those filed
    under the host whose hostnames match it were skipped for the path alone."""
    for_path = {
        order
        for bucket in lr.buckets(host)
        for order, sr in bucket.routes.items()
        if order not in plausible and route_hostname_key(sr.effective, host) is not None
    }
    why = []
    if skipped > len(for_path):
        why.append(f"{skipped - len(for_path)} with no hostname matching {host!r}")
    if for_path:
        why.append(
            f"{len(for_path)} whose hostnames match but no match fits the path's first "
            f"segment {'/' + segment!r}"
        )
    return "; ".join(why)


def _indexed_candidates(
    sr: ServedRoute,
    matches: list[IndexedMatch],
    request: Request,
    hostname_key: tuple[int, int],
    trace: list[str],
    tracing: bool = True,
) -> list[Candidate]:
    out = [
        Candidate(sr.route, im.rule, im.match_index, im.match, hostname_key)
        for im in matches
        if match_accepts(im.match, request)
    ]
    if tracing and out:
        trace.append(f"{sr.name} serves host {request.hostname!r}: {len(out)} matching match(es)")
    elif tracing:
        trace.append(f"{sr.name} serves host {request.hostname!r}: no plausible match accepts it")
    return out


def _candidates_scan(
    res: Resources, gw: Gateway, lst: GatewayListener, request: Request, trace: list[str]
) -> list[Candidate]:
    """Every (route, rule, match) of a Route attached to ``lst`` that accepts the request."""
    host = request.hostname
    found: list[Candidate] = []
    unrelated = 0
    for key in sorted(res.httproutes):
        route = res.httproutes[key]
        name = f"HTTPRoute {key[0]}/{key[1]}"
        if not any(refers_to_gateway(ref, gw) for ref in route.parent_refs):
            unrelated += 1
            continue
        problem = attachment_problem(res, gw, lst, route)
        if problem:
            trace.append(f"{name} does not serve {describe(lst)}: {problem}")
            continue
        hostname_key = route_hostname_key(effective_hostnames(lst.hostname, route.hostnames), host)
        if hostname_key is None:
            trace.append(f"{name}: hostnames {list(route.hostnames)} do not match host {host!r}")
            continue
        found.extend(_route_candidates(route, request, hostname_key, name, trace))
    if unrelated:
        trace.append(f"{unrelated} HTTPRoute(s) do not reference this Gateway")
    return found


def _route_candidates(
    route: HTTPRoute,
    request: Request,
    hostname_key: tuple[int, int],
    name: str,
    trace: list[str],
) -> list[Candidate]:
    out: list[Candidate] = []
    for rule in route.rules:
        problem = rule_problem(rule)
        if problem:
            trace.append(f"{name} rule {rule.index} dropped: {problem}")
            continue
        out.extend(
            Candidate(route, rule, i, match, hostname_key)
            for i, match in enumerate(rule.matches)
            if match_accepts(match, request)
        )
    if out:
        trace.append(f"{name} serves host {request.hostname!r}: {len(out)} matching match(es)")
    else:
        trace.append(f"{name} serves host {request.hostname!r}: no match accepts the request")
    return out
