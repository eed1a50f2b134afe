"""Which listener owns a host, and the order of routes inside a virtual host.

Envoy takes the first matching route of the most specific matching virtual
host; Gateway API defines precedence instead. This module turns the spec's
precedence into an order so that Envoy's first match is the spec's winner.
"""

from __future__ import annotations

from verifier.gatewayapi import model as m
from verifier.translate.routes import effective_headers, effective_query_params

# HTTPRoute hostnames (v1.5): "In the event that multiple HTTPRoutes specify
# intersecting hostnames ..., precedence must be given to rules from the
# HTTPRoute with the largest number of: Characters in a matching non-wildcard
# hostname. Characters in a matching hostname. If ties exist across multiple
# Routes, the matching precedence rules for HTTPRouteMatches takes over."
#
# HTTPRouteRule (v1.5): "Proxy or Load Balancer routing configuration generated
# from HTTPRoutes MUST prioritize matches based on the following criteria,
# continuing on ties. ... 'Exact' path match. 'Prefix' path match with largest
# number of characters. Method match. Largest number of header matches.
# Largest number of query param matches. ... If ties still exist across
# multiple Routes, matching precedence MUST be determined in order of the
# following criteria, continuing on ties: The oldest Route based on creation
# timestamp. The Route appearing first in alphabetical order by
# '{namespace}/{name}'. If ties still exist within an HTTPRoute, matching
# precedence MUST be granted to the FIRST matching rule (in list order)."
#
# RegularExpression precedence is implementation-specific; the edge puts it
# after Exact and before PathPrefix, longest pattern first.
PATH_TYPE_RANK = {"Exact": 0, "RegularExpression": 1, "PathPrefix": 2}
NO_TIMESTAMP = "9999-12-31T23:59:59Z"  # unknown age sorts as newest

RouteKey = tuple[tuple[int, int], int, int, int, int, int, str, str, str, int, int]


def host_covers(pattern: str, host: str) -> bool:
    """Does hostname ``pattern`` ("*" = any) serve every request for ``host``?"""
    if pattern in ("*", host):
        return True
    if pattern.startswith("*."):
        suffix = pattern[1:]  # ".example.com": one or more labels must precede it
        if host.startswith("*."):
            return host[1:].endswith(suffix) and len(host) > len(pattern)
        return host.endswith(suffix) and len(host) > len(suffix)
    return False


def listener_specificity(hostname: str | None) -> tuple[int, int]:
    if hostname is None:
        return (0, 0)
    if hostname.startswith("*."):
        return (1, len(hostname))
    return (2, len(hostname))


def listener_serves(hostname: str | None, domain: str) -> bool:
    if hostname is None:
        return True
    if domain == "*":
        return False
    return host_covers(hostname, domain)


def hostname_rank(hostnames: tuple[str, ...], domain: str) -> tuple[int, int]:
    """Specificity of the route hostname that serves ``domain`` (higher first)."""
    best = (0, 0)
    for h in hostnames:
        if host_covers(h, domain):
            non_wild = 0 if h.startswith("*") else len(h)
            best = max(best, (non_wild, 0 if h == "*" else len(h)))
    return best


def route_key(
    hostnames: tuple[str, ...],
    domain: str,
    route: m.HTTPRoute,
    rule: m.RouteRule,
    match: m.RouteMatch,
    match_index: int,
) -> RouteKey:
    non_wild, chars = hostname_rank(hostnames, domain)
    path = match.path
    value = path.value.rstrip("/") or "/" if path.type == "PathPrefix" else path.value
    return (
        (-non_wild, -chars),
        PATH_TYPE_RANK.get(path.type, 3),
        -len(value),
        0 if match.method else 1,
        -len(effective_headers(match)),
        -len(effective_query_params(match)),
        route.meta.creation_timestamp or NO_TIMESTAMP,
        route.meta.namespace,
        route.meta.name,
        rule.index,
        match_index,
    )
