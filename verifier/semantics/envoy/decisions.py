"""The Envoy model's decision list for a (filter chain, virtual host), from the xDS alone.

The virtual host's routes in their order ("The first route that matches will be
used"), each with its RouteMatch in the normal form of ``verifier.semantics.decisions``
and the action the model's own ``run_action`` gives to two probe requests. A route,
virtual host or route configuration that sets any field this module does not read
makes the list not comparable: an unread field might change an answer, so the host's
witnesses are asked instead. ``routing_of`` says which list routes a request, and
whether the request reaches it untouched (the HCM's path and Host handling, the
codec's checks): only then does the list alone decide its answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verifier.semantics import decisions as d
from verifier.semantics.envoy import caveats
from verifier.semantics.envoy.actions import BackendReply, RouteContext, run_action
from verifier.semantics.envoy.codec import METHODS
from verifier.semantics.envoy.config import CompiledRouteConfig, CompiledVhost
from verifier.semantics.envoy.listeners import Escaped, Hcm, Selected
from verifier.semantics.envoy.match import router_view
from verifier.semantics.envoy.model import EnvoyModel, _dial, _Run
from verifier.semantics.envoy.origin import decide, hcm_headers
from verifier.semantics.envoy.paths import canonical_path, merge_slashes
from verifier.semantics.envoy.routes import CompiledRoute
from verifier.semantics.request import Outcome, Request, wire_problem
from verifier.xds import read

# The fields each level may set for its list to be comparable (proto-JSON names);
# metadata names a route for findings only.
ROUTE_FIELDS = frozenset(
    {
        "name",
        "match",
        "route",
        "direct_response",
        "metadata",
        "request_headers_to_add",
        "request_headers_to_remove",
        "response_headers_to_add",
        "response_headers_to_remove",
    }
)
ACTION_FIELDS = frozenset(
    {
        "cluster",
        "weighted_clusters",
        "cluster_not_found_response_code",
        "timeout",
        "request_mirror_policies",
        "retry_policy",
    }
)
# A retry policy that only bounds each attempt (the backendRequest timeout's form): with
# no retry_on, nothing is retried, whatever num_retries says.
RETRY_FIELDS = frozenset({"num_retries", "per_try_timeout"})
# A direct response without a Location (201 and 3xx carry one built from the request).
DIRECT_FIELDS = frozenset({"status"})
WEIGHTED_FIELDS = frozenset({"clusters"})
CLUSTER_WEIGHT_FIELDS = frozenset({"name", "weight"})
MATCH_PATHS = {"path": "exact", "path_separated_prefix": "segment_prefix", "prefix": "prefix"}
VHOST_FIELDS = frozenset({"name", "domains", "routes"})
CONFIG_FIELDS = frozenset(
    {"name", "virtual_hosts", "ignore_port_in_host_matching", "validate_clusters"}
)
# Header names the HCM sets for the router (or pseudo-headers): a matcher on them
# reads what the client did not send.
ROUTER_SET = frozenset({"x-forwarded-proto", "x-envoy-internal"})


def _string(sm: dict[str, Any]) -> tuple[str, str] | None:
    if sm.get("ignore_case") or set(sm) - {"exact", "safe_regex", "ignore_case"}:
        return None
    if "exact" in sm:
        return "exact", str(sm["exact"])
    if "safe_regex" in sm:
        return "regex", str(sm["safe_regex"].get("regex", ""))
    return None


def _header(h: dict[str, Any]) -> d.ValuePred | tuple[str, str] | None:
    """A HeaderMatcher: a value predicate, or ("method", value) for ``:method``."""
    name = str(h.get("name", "")).lower()
    if set(h) - {"name", "string_match", "safe_regex_match", "exact_match"}:
        return None  # inverted, presence, missing-as-empty, range, ...
    if "string_match" in h:
        found = _string(h["string_match"])
    elif "safe_regex_match" in h:
        found = ("regex", str(h["safe_regex_match"].get("regex", "")))
    elif h.get("exact_match"):
        found = ("exact", str(h["exact_match"]))
    else:
        found = None
    if found is None:
        return None
    if name == ":method":
        pred = d.value_pred(name, *found)
        return ("method", pred.value) if pred.kind == "exact" else None
    if name.startswith(":") or name in ROUTER_SET or name.startswith("x-envoy-"):
        return None
    return d.value_pred(name, *found)


def predicate(match: dict[str, Any]) -> d.Predicate | None:
    """A RouteMatch in the normal form; None for anything else it may hold."""
    if set(match) - {*MATCH_PATHS, "safe_regex", "headers", "query_parameters", "case_sensitive"}:
        return None  # runtime_fraction, grpc, tls_context, path_match_policy, ...
    if match.get("case_sensitive", True) is not True:
        return None
    kinds = [k for k in (*MATCH_PATHS, "safe_regex") if k in match]
    if len(kinds) != 1:
        return None
    kind = kinds[0]
    if kind == "safe_regex":
        path = d.path_pred("regex", str(match["safe_regex"].get("regex", "")))
    else:
        value = str(match[kind])
        if kind == "path_separated_prefix" and value.endswith("/"):
            return None
        path = d.PathPred(MATCH_PATHS[kind], value)
    method: str | None = None
    headers: dict[str, d.ValuePred] = {}
    for h in match.get("headers", ()):
        found = _header(h)
        if found is None:
            return None
        if isinstance(found, tuple):
            if method is not None:
                return None
            method = found[1]
        elif found.name in headers:
            return None
        else:
            headers[found.name] = found
    query: dict[str, d.ValuePred] = {}
    for q in match.get("query_parameters", ()):
        if set(q) - {"name", "string_match"} or "string_match" not in q:
            return None
        found_q = _string(q["string_match"])
        name = str(q.get("name", ""))
        if found_q is None or name in query:
            return None
        query[name] = d.value_pred(name, *found_q)
    return d.Predicate(
        path,
        method,
        tuple(v for _, v in sorted(headers.items())),
        tuple(v for _, v in sorted(query.items())),
    )


def _unread(route: Any) -> str:
    """The first field of the route this module does not read, or ""."""
    extra = _set_besides(route, ROUTE_FIELDS)
    if extra:
        return f"route field {extra}"
    action = route.route
    direct = route.direct_response
    if action is None and direct is not None:
        status = int(direct.status or 0)
        if _set_besides(direct, DIRECT_FIELDS) or status == 201 or 300 <= status < 400:
            return "a direct response with a body or a Location"
        return ""
    if action is None:
        return "a route that is not forwarded (redirect)"
    extra = _set_besides(action, ACTION_FIELDS)
    if extra:
        return f"route action field {extra}"
    if action.retry_policy is not None and _set_besides(action.retry_policy, RETRY_FIELDS):
        return "a retry policy that retries"
    weighted = action.weighted_clusters
    if weighted is not None:
        if _set_besides(weighted, WEIGHTED_FIELDS):
            return "weighted_clusters fields"
        for c in weighted.clusters:
            if _set_besides(c, CLUSTER_WEIGHT_FIELDS):
                return "per-cluster fields of weighted_clusters"
    return ""


@dataclass(frozen=True)
class Routing:
    """Where a request is routed, when the route list alone decides its answer."""

    key: tuple[int, int]  # (chain, virtual host) of this model; (chain, 0): no virtual host
    selected: Selected
    config: CompiledRouteConfig
    vhost: CompiledVhost | None  # None: no virtual host serves the Host (404)


def routing_of(model: EnvoyModel, request: Request) -> tuple[Routing | None, str]:
    """The list ``request`` is matched against, if it reaches the router as sent
    (``connection_routing``, then ``untouched``); (None, why) otherwise."""
    routing, why = connection_routing(model, request)
    if routing is not None:
        why = untouched(routing, request)
    return (None, why) if why else (routing, "")


def connection_routing(model: EnvoyModel, request: Request) -> tuple[Routing | None, str]:
    """The virtual host a plaintext or admitted TLS connection to an HTTP connection
    manager routes ``request`` by, with a Host the HCM leaves as it is. It depends on
    the connection and the Host alone (what ``untouched`` reads is the rest)."""
    dial = _dial(request)
    selected, _notes = model.listeners.select(dial, [])
    if selected is None:
        return None, "no listener"
    chain = selected.chain
    if chain.tls != dial.tls or chain.tcp is not None or chain.hcm is None:
        return None, "not an HTTP connection it terminates as sent"
    if dial.tls and (
        chain.client.refusal(request.client_cert) is not None
        or chain.client.undecided(request.client_cert)
    ):
        return None, "the client certificate decides"
    hcm = chain.hcm
    if hcm.route_config is None:
        return None, "no route configuration"
    host = model._host(request, hcm, selected.downstream.port, _Run(tracing=False))
    if host != request.host:
        return None, "the HCM changes Host"
    rc = model._compiled(hcm.route_config)
    _match_host, vhost, _why = model._vhost(rc, host)
    if vhost is None:
        return Routing((id(chain), 0), selected, rc, None), ""
    if vhost.tls_requirement:
        return None, "require_tls"
    return Routing((id(chain), id(vhost)), selected, rc, vhost), ""


def untouched(routing: Routing, request: Request) -> str:
    """Why the codec or the HCM would not pass ``request`` to the router as sent
    (a codec problem, a path it normalises, headers it drops), or ""."""
    hcm = routing.selected.chain.hcm
    assert hcm is not None  # connection_routing holds it
    if wire_problem(request) is not None or (
        not hcm.custom_methods and request.method.upper() not in METHODS
    ):
        return "the codec rejects it"
    if _path_changed(hcm, request.path.split("?", 1)[0]):
        return "the HCM changes the path"
    origin = decide(hcm.origin, request.headers, request.scheme.lower())
    forwarded, _set = hcm_headers(request.headers, origin, hcm.origin, routing.config.internal_only)
    return "" if forwarded == request.headers else "the HCM drops headers"


def _path_changed(hcm: Hcm, path: str) -> bool:
    if "%" in path and hcm.escaped_slashes != Escaped.KEEP_UNCHANGED:
        return True
    if hcm.normalize_path and canonical_path(path) != path:
        return True
    return hcm.merge_slashes and merge_slashes(path) != path


def decision_list(model: EnvoyModel, routing: Routing, sample: Request) -> d.DecisionList:
    """The first-match list of ``routing``'s virtual host; ``sample``: a request it
    routes (the probes are sent as it is: to its address, port and Host)."""
    rc, vhost = routing.config, routing.vhost
    if vhost is None:
        return d.DecisionList(())  # "no virtual host": 404 for every request it passes on
    extra = _set_besides(rc.config, CONFIG_FIELDS)
    if extra:
        return d.not_comparable(f"route configuration field {extra}")
    extra = _set_besides(vhost.vhost, VHOST_FIELDS)
    if extra:
        return d.not_comparable(f"virtual host field {extra}")
    # Every route's match first (cheap): a list that cannot be stated costs no probe.
    preds = []
    for route in vhost.table.routes:
        why = _unread(route.route)
        match = route.route.match
        pred = predicate(read.to_json(match)) if not why and match is not None else None
        if pred is None:
            return d.not_comparable(f"route {route.label}: {why or 'a match it cannot state'}")
        preds.append(pred)
    entries = []
    actions: dict[object, tuple[d.Action | None, str]] = {}
    for route, pred in zip(vhost.table.routes, preds, strict=True):
        key = _action_key(route)
        found = actions.get(key) if key is not None else None
        if found is None:
            found = _action(model, routing, route, sample)
            if key is not None:
                actions[key] = found
        action, why = found
        if action is None:
            return d.not_comparable(f"route {route.label}: {why}")
        entries.append(d.Entry(pred, action, model._located(rc, vhost, route)))
    return d.DecisionList(tuple(entries))


def _action_key(route: CompiledRoute) -> tuple[object, ...] | None:
    """Everything a forwarded route's answer reads within one virtual host (``_unread``
    allows nothing else): routes with equal keys act alike, and are probed once."""
    action = route.route.route
    if action is None or action.request_mirror_policies or action.retry_policy is not None:
        return None
    weighted = action.weighted_clusters
    return (
        action.cluster,
        tuple((c.name, c.weight) for c in weighted.clusters) if weighted is not None else None,
        action.cluster_not_found_response_code,
        repr(action.timeout),
        route.request_headers.to_add,
        route.request_headers.to_remove,
        route.response_headers.to_add,
        route.response_headers.to_remove,
    )


def _set_besides(msg: object, allowed: frozenset[str]) -> str:
    """The first field of ``msg`` set to other than its default, besides ``allowed``
    (a message's attributes are all its fields; a record's, those it was given), or "".
    Without serializing what ``allowed`` holds (a route configuration's every route)."""
    for name, value in vars(msg).items():
        if name in allowed or value is None or value is False or value == 0 or value == "":
            continue
        if isinstance(value, list | tuple | dict | bytes) and not value:
            continue
        return name
    return ""


def _action(
    model: EnvoyModel, routing: Routing, route: CompiledRoute, sample: Request
) -> tuple[d.Action | None, str]:
    assert routing.vhost is not None  # decision_list holds it
    if caveats.of_route(route):
        return None, "an answer resting on an assumption"
    req_names = {op.name for op in route.request_headers.to_add} | set(
        route.request_headers.to_remove
    )
    resp_names = {op.name for op in route.response_headers.to_add} | set(
        route.response_headers.to_remove
    )
    hostname = sample.host
    outcomes: list[Outcome] = []
    for headers in ((), d.probe_headers(req_names)) if req_names else ((),):
        probe = Request(
            method="GET",
            scheme=sample.scheme,
            host=hostname,
            port=sample.port,
            address=sample.address,
            proxy_port=sample.proxy_port,
            path="/",
            headers=headers,
            sni=sample.sni,
        )
        outcomes.append(_run(model, routing, route, probe))
    return d.action_of(outcomes[0], outcomes[-1], ("GET", hostname, "/"), req_names, resp_names)


def _run(model: EnvoyModel, routing: Routing, route: CompiledRoute, probe: Request) -> Outcome:
    hcm = routing.selected.chain.hcm
    assert hcm is not None
    origin = decide(hcm.origin, probe.headers, probe.scheme.lower())
    forwarded, set_by_hcm = hcm_headers(
        probe.headers, origin, hcm.origin, routing.config.internal_only
    )
    ctx = router_view(probe, probe.host, probe.path, probe.path, forwarded, set_by_hcm)
    rctx = RouteContext(
        request=probe,
        host=probe.host,
        path=probe.path,
        headers=[(k, v) for k, vs in forwarded for v in vs if k != "host"],
        view=ctx.headers,
        hcm=hcm,
        config=routing.config,
        vhost=routing.vhost,  # type: ignore[arg-type]  # _action holds it
        route=route,
        resolver=model.resolver,
        upstreams=model.upstreams,
        reply=BackendReply(),
        downstream=routing.selected.downstream,
    )
    return run_action(rctx, [])
