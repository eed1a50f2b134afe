"""One HTTPRoute match to one Envoy route: the match, the action, the filters.

Envoy takes the first route whose match succeeds, so the translator emits one
Envoy route per (rule, match) pair and leaves ordering to ``order.py``; this
module only has to make each route behave like its Gateway API rule.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta

import re2
from envoy_data_plane.envoy.config.core.v3 import (
    HeaderValue,
    HeaderValueOption,
    HeaderValueOptionHeaderAppendAction,
    Metadata,
    RuntimeFractionalPercent,
)
from envoy_data_plane.envoy.config.route.v3 import (
    DirectResponseAction,
    HeaderMatcher,
    QueryParameterMatcher,
    RedirectAction,
    RedirectActionRedirectResponseCode,
    RetryPolicy,
    Route,
    RouteAction,
    RouteActionClusterNotFoundResponseCode,
    RouteActionRequestMirrorPolicy,
    RouteActionUpgradeConfig,
    RouteMatch,
    WeightedCluster,
    WeightedClusterClusterWeight,
)
from envoy_data_plane.envoy.extensions.filters.http.cors.v3 import CorsPolicy
from envoy_data_plane.envoy.type.matcher.v3 import (
    RegexMatchAndSubstitute,
    RegexMatcher,
    StringMatcher,
)
from envoy_data_plane.envoy.type.v3 import FractionalPercent, FractionalPercentDenominatorType
from envoy_data_plane.google.protobuf import Any, Struct

from verifier.gatewayapi import model as m
from verifier.gatewayapi.attach import ResolvedBackend
from verifier.xds.codec import new

ROUTE_METADATA_KEY = "aether.io/route"
CORS_FILTER = "envoy.filters.http.cors"
# A cluster that never exists: Envoy answers its share of traffic with
# cluster_not_found_response_code (500), as the spec requires for invalid refs.
INVALID_BACKEND = "aether/invalid-backend"

REDIRECT_CODES = {
    301: RedirectActionRedirectResponseCode.MOVED_PERMANENTLY,
    302: RedirectActionRedirectResponseCode.FOUND,
    303: RedirectActionRedirectResponseCode.SEE_OTHER,
    307: RedirectActionRedirectResponseCode.TEMPORARY_REDIRECT,
    308: RedirectActionRedirectResponseCode.PERMANENT_REDIRECT,
}
WELL_KNOWN_PORTS = {"http": 80, "https": 443}
_DURATION = re.compile(r"(\d+)(h|ms|m|s)")
_UNIT_MS = {"h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}


@dataclass(frozen=True)
class RouteSource:
    """Where an Envoy route came from, carried into its metadata."""

    route: m.HTTPRoute
    rule: m.RouteRule
    match: m.RouteMatch
    match_index: int
    listener_port: int
    listener_scheme: str  # http | https


def duration(value: str) -> timedelta:
    """Gateway API durations (GEP-2257): e.g. ``1h30m``, ``500ms``, ``0s``."""
    total_ms = sum(int(n) * _UNIT_MS[u] for n, u in _DURATION.findall(value))
    return timedelta(milliseconds=total_ms)


def _string_match(kind: str, value: str) -> StringMatcher:
    if kind == "RegularExpression":
        return new(StringMatcher, safe_regex=new(RegexMatcher, regex=value))
    return new(StringMatcher, exact=value)


def _prefix_base(value: str) -> str:
    """PathPrefix ignores a trailing slash: `/foo/` matches like `/foo`."""
    return value.rstrip("/") or "/"


def effective_headers(match: m.RouteMatch) -> tuple[m.ValueMatch, ...]:
    """HTTPHeaderMatch: "If multiple entries specify equivalent header names, only
    the first entry with an equivalent name MUST be considered for a match."
    Header names compare case-insensitively."""
    seen: set[str] = set()
    out = []
    for h in match.headers:
        if h.name.lower() not in seen:
            seen.add(h.name.lower())
            out.append(h)
    return tuple(out)


def effective_query_params(match: m.RouteMatch) -> tuple[m.ValueMatch, ...]:
    """HTTPQueryParamMatch: the same first-wins rule, with exact (case-sensitive) names."""
    seen: set[str] = set()
    out = []
    for q in match.query_params:
        if q.name not in seen:
            seen.add(q.name)
            out.append(q)
    return tuple(out)


def route_match(match: m.RouteMatch) -> RouteMatch:
    out = new(RouteMatch)
    p = match.path
    if p.type == "Exact":
        out.path = p.value
    elif p.type == "RegularExpression":
        out.safe_regex = new(RegexMatcher, regex=p.value)
    elif _prefix_base(p.value) == "/":
        out.prefix = "/"
    else:
        # Element-wise: /foo matches /foo, /foo/ and /foo/bar but never /foobar.
        out.path_separated_prefix = _prefix_base(p.value)
    headers = [
        new(HeaderMatcher, name=h.name.lower(), string_match=_string_match(h.type, h.value))
        for h in effective_headers(match)
    ]
    if match.method is not None:
        headers.append(
            new(HeaderMatcher, name=":method", string_match=new(StringMatcher, exact=match.method))
        )
    out.headers = headers
    out.query_parameters = [
        new(QueryParameterMatcher, name=q.name, string_match=_string_match(q.type, q.value))
        for q in effective_query_params(match)
    ]
    return out


def header_options(mod: m.HeaderModifier) -> list[HeaderValueOption]:
    """`set` overwrites (or adds); `add` appends to what is there."""
    overwrite = HeaderValueOptionHeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD
    append = HeaderValueOptionHeaderAppendAction.APPEND_IF_EXISTS_OR_ADD
    return [
        new(HeaderValueOption, header=new(HeaderValue, key=n, value=v), append_action=overwrite)
        for n, v in mod.set
    ] + [
        new(HeaderValueOption, header=new(HeaderValue, key=n, value=v), append_action=append)
        for n, v in mod.add
    ]


def _path_rewrite(
    modifier: m.PathModifier, match: m.RouteMatch
) -> tuple[str | None, str | None, RegexMatchAndSubstitute | None]:
    """(full path, prefix rewrite, regex rewrite) for a path modifier."""
    if modifier.type == "ReplaceFullPath":
        full = modifier.replace_full_path or "/"
        return full, None, None
    # HTTPPathModifier's table: with P the matched prefix and R the new prefix,
    # both without a trailing slash, path P+rest becomes R+rest, or "/" when
    # that is empty (/foo/bar -> /xyz/bar; /foo/ -> /xyz/; /foo -> /xyz;
    # R empty: /foo/bar -> /bar, /foo -> /).
    target = (modifier.replace_prefix_match or "").rstrip("/")
    prefix = _prefix_base(match.path.value)
    if prefix == "/":
        # Every path starts with "/": keep it as the separator after R.
        if not target:
            return None, None, None
        rewrite = new(
            RegexMatchAndSubstitute,
            pattern=new(RegexMatcher, regex="^/"),
            substitution=target + "/",
        )
        return None, None, rewrite
    if not target:
        pattern = "^" + re2.escape(prefix) + "/?"
        rewrite = new(
            RegexMatchAndSubstitute, pattern=new(RegexMatcher, regex=pattern), substitution="/"
        )
        return None, None, rewrite
    # path_separated_prefix guarantees P is followed by "/" or the end.
    return None, target, None


def _redirect(redirect: m.Redirect, src: RouteSource) -> RedirectAction:
    action = new(RedirectAction, response_code=REDIRECT_CODES[redirect.status_code])
    scheme = redirect.scheme or src.listener_scheme
    if redirect.scheme:
        action.scheme_redirect = redirect.scheme
    if redirect.hostname:
        action.host_redirect = redirect.hostname
    # Spec: without a port, use the scheme's well-known port when a scheme is
    # given, else the listener's (a mesh route's: the Service port). Without
    # port_redirect Envoy keeps the port of the Host header (dropping only the
    # request scheme's default port on a scheme change), and a client may name
    # any port there (a Service's other port, say): so the port is written out,
    # even a well-known one ("SHOULD NOT add the port number" yields to the
    # MUST). Only host_redirect drops the Host's port, leaving the new scheme's
    # default: then a well-known port can be left out of Location.
    port = redirect.port
    if port is None:
        port = WELL_KNOWN_PORTS[redirect.scheme] if redirect.scheme else src.listener_port
    if not redirect.hostname or port != WELL_KNOWN_PORTS.get(scheme):
        action.port_redirect = port
    if redirect.path is not None:
        full, prefix, regex = _path_rewrite(redirect.path, src.match)
        if full is not None:
            action.path_redirect = full
        elif prefix is not None:
            action.prefix_rewrite = prefix
        else:
            action.regex_rewrite = regex
    return action


def _fraction(mirror: m.Mirror) -> RuntimeFractionalPercent | None:
    if mirror.fraction is not None:
        num, den = mirror.fraction
        millionths = num * 1_000_000 // den if den else 0
        pct = new(
            FractionalPercent,
            numerator=millionths,
            denominator=FractionalPercentDenominatorType.MILLION,
        )
    elif mirror.percent is not None:
        pct = new(
            FractionalPercent,
            numerator=mirror.percent,
            denominator=FractionalPercentDenominatorType.HUNDRED,
        )
    else:
        return None
    return new(RuntimeFractionalPercent, default_value=pct)


def _origin_pattern(origin: str) -> str:
    """`https://*.example.com`: "`*` is a greedy match to the _left_"."""
    return ".*" if origin == "*" else re2.escape(origin).replace(re2.escape("*"), "[^/]+")


def _cors(cors: m.Cors) -> CorsPolicy:
    origins = [
        new(StringMatcher, exact=o)
        if "*" not in o
        else new(StringMatcher, safe_regex=new(RegexMatcher, regex=_origin_pattern(o)))
        for o in cors.allow_origins
    ]
    policy = new(
        CorsPolicy,
        allow_origin_string_match=origins,
        allow_methods=",".join(cors.allow_methods),
        allow_headers=",".join(cors.allow_headers),
        expose_headers=",".join(cors.expose_headers),
        max_age=str(cors.max_age),
    )
    if cors.allow_credentials is not None:
        policy.allow_credentials = cors.allow_credentials
    return policy


ClusterFor = Callable[[ResolvedBackend], str]


def _backend_action(
    backends: tuple[ResolvedBackend, ...], cluster_for: ClusterFor
) -> RouteAction | DirectResponseAction:
    live = [b for b in backends if b.weight > 0]
    if not live:
        # No backends, or all with weight 0: nothing can serve the request.
        return new(DirectResponseAction, status=500)
    if len(live) == 1 and live[0].problem is None and not live[0].filters:
        action = new(RouteAction, cluster=cluster_for(live[0]))
    else:
        weights = []
        for b in live:
            cw = new(
                WeightedClusterClusterWeight,
                name=INVALID_BACKEND if b.problem else cluster_for(b),
                weight=b.weight,
            )
            for f in b.filters:
                if f.request_header_modifier is not None:
                    cw.request_headers_to_add = header_options(f.request_header_modifier)
                    cw.request_headers_to_remove = list(f.request_header_modifier.remove)
                if f.response_header_modifier is not None:
                    cw.response_headers_to_add = header_options(f.response_header_modifier)
                    cw.response_headers_to_remove = list(f.response_header_modifier.remove)
            weights.append(cw)
        action = new(RouteAction, weighted_clusters=new(WeightedCluster, clusters=weights))
    action.cluster_not_found_response_code = (
        RouteActionClusterNotFoundResponseCode.INTERNAL_SERVER_ERROR
    )
    if any(b.protocol == "ws" for b in live if b.problem is None):
        action.upgrade_configs = [
            new(RouteActionUpgradeConfig, upgrade_type="websocket", enabled=True)
        ]
    return action


def _metadata(src: RouteSource) -> Metadata:
    fields: dict[str, object] = {
        "httproute": f"{src.route.meta.namespace}/{src.route.meta.name}",
        "rule": src.rule.index,
        "match": src.match_index,
    }
    if src.rule.name:
        fields["rule_name"] = src.rule.name
    return new(Metadata, filter_metadata={ROUTE_METADATA_KEY: Struct.from_dict(fields)})


def route_name(src: RouteSource) -> str:
    meta = src.route.meta
    return f"{meta.namespace}/{meta.name}/rule/{src.rule.index}/match/{src.match_index}"


def build_route(
    src: RouteSource,
    backends: tuple[ResolvedBackend, ...],
    mirrors: dict[str, ResolvedBackend],
    cluster_for: ClusterFor,
) -> Route:
    rule = src.rule
    route = new(Route, name=route_name(src), match=route_match(src.match), metadata=_metadata(src))
    redirect = next((f.request_redirect for f in rule.filters if f.request_redirect), None)
    if redirect is not None:
        route.redirect = _redirect(redirect, src)
    else:
        action = _backend_action(backends, cluster_for)
        if isinstance(action, DirectResponseAction):
            route.direct_response = action
        else:
            _apply_rule_to_action(action, src, mirrors, cluster_for)
            route.route = action
    for f in rule.filters:
        if f.request_header_modifier is not None:
            route.request_headers_to_add = header_options(f.request_header_modifier)
            route.request_headers_to_remove = list(f.request_header_modifier.remove)
        if f.response_header_modifier is not None:
            route.response_headers_to_add = header_options(f.response_header_modifier)
            route.response_headers_to_remove = list(f.response_header_modifier.remove)
        if f.cors is not None:
            route.typed_per_filter_config = {CORS_FILTER: Any.pack(_cors(f.cors))}
    return route


def _apply_rule_to_action(
    action: RouteAction,
    src: RouteSource,
    mirrors: dict[str, ResolvedBackend],
    cluster_for: ClusterFor,
) -> None:
    rule = src.rule
    for f in rule.filters:
        if f.url_rewrite is not None:
            if f.url_rewrite.hostname:
                action.host_rewrite_literal = f.url_rewrite.hostname
            if f.url_rewrite.path is not None:
                full, prefix, regex = _path_rewrite(f.url_rewrite.path, src.match)
                if full is not None:
                    action.regex_rewrite = new(
                        RegexMatchAndSubstitute,
                        pattern=new(RegexMatcher, regex="^/.*$"),
                        substitution=full,
                    )
                elif prefix is not None:
                    action.prefix_rewrite = prefix
                else:
                    action.regex_rewrite = regex
        if f.request_mirror is not None:
            target = mirrors.get(f.path)
            if target is None or target.problem:
                continue  # an unresolved mirror is dropped; status says why
            policy = new(RouteActionRequestMirrorPolicy, cluster=cluster_for(target))
            fraction = _fraction(f.request_mirror)
            if fraction is not None:
                policy.runtime_fraction = fraction
            action.request_mirror_policies = [*action.request_mirror_policies, policy]
    if rule.request_timeout is not None:
        action.timeout = duration(rule.request_timeout)
    if rule.backend_request_timeout is not None:
        action.retry_policy = new(
            RetryPolicy, num_retries=0, per_try_timeout=duration(rule.backend_request_timeout)
        )
        if rule.request_timeout is None:
            action.timeout = duration(rule.backend_request_timeout)


def service_route(name: str, backend: ResolvedBackend, cluster_for: ClusterFor) -> Route:
    """Everything to one Service port, as kube-proxy would send it: a sidecar's route
    for a Service no mesh route applies to."""
    route = new(Route, name=name, match=new(RouteMatch, prefix="/"))
    action = _backend_action((backend,), cluster_for)
    assert isinstance(action, RouteAction)  # one live, valid backend
    route.route = action
    return route


Backends = Mapping[tuple[str, str, int], tuple[ResolvedBackend, ...]]
Mirrors = Mapping[tuple[str, str, str], ResolvedBackend]


def build_routes(
    sources: Iterable[RouteSource], backends: Backends, mirrors: Mirrors, cluster_for: ClusterFor
) -> list[Route]:
    """Envoy routes for (rule, match) pairs already in precedence order, each preceded
    by its CORS preflight guard: one virtual host's routes, the edge's or a sidecar's.
    ``backends`` and ``mirrors`` are the controller's resolution (``attach.resolve_rules``)."""
    routes = []
    for src in sources:
        rkey = (src.route.meta.namespace, src.route.meta.name)
        rule_backends = backends.get((*rkey, src.rule.index), ())
        own_mirrors = {p: b for (ns, n, p), b in mirrors.items() if (ns, n) == rkey}
        route = build_route(src, rule_backends, own_mirrors, cluster_for)
        guard = cors_preflight_guard(route, src.rule)
        if guard is not None:
            routes.append(guard)
        routes.append(route)
    return routes


def cors_preflight_guard(route: Route, rule: m.RouteRule) -> Route | None:
    """A route answering preflights from origins the CORS filter does not allow.

    HTTPCORSFilter: "If the request `Origin` does not match the configured
    allowed origins, the gateway returns 204/200 response but doesn't set the
    relevant cross-origin response headers." Envoy's CORS filter forwards such
    preflights to the backend, or (forward_not_matching_preflights: false)
    answers them itself but still adds Access-Control-Allow-Credentials (seen on
    Envoy 1.40), so the edge answers them with this route, placed just before
    the rule's own route: it only takes requests that route would have taken.
    """
    cors = next((f.cors for f in rule.filters if f.cors is not None), None)
    if cors is None or "*" in cors.allow_origins:
        return None
    guard = copy.deepcopy(route)
    guard.name = f"{route.name}/cors-preflight-denied"
    origin = (
        new(
            HeaderMatcher,
            name="origin",
            string_match=new(
                StringMatcher,
                safe_regex=new(
                    RegexMatcher,
                    regex="|".join(f"(?:{_origin_pattern(o)})" for o in cors.allow_origins),
                ),
            ),
            invert_match=True,
        )
        if cors.allow_origins
        else new(HeaderMatcher, name="origin", present_match=True)
    )
    match = guard.match or new(RouteMatch)
    guard.match = match
    match.headers = [
        *match.headers,
        new(HeaderMatcher, name=":method", string_match=new(StringMatcher, exact="OPTIONS")),
        new(HeaderMatcher, name="access-control-request-method", present_match=True),
        origin,
    ]
    guard.route = None
    guard.redirect = None
    guard.direct_response = new(DirectResponseAction, status=200)
    guard.typed_per_filter_config = {}
    guard.request_headers_to_add = []
    guard.request_headers_to_remove = []
    return guard
