"""Hostnames as the Gateway API compares them: Listener vs request, Route vs
Listener, and the specificity orders that pick one Listener and rank Routes.

Written from the spec text (``apis/v1/gateway_types.go`` Listener.hostname and
GatewaySpec.listeners, ``apis/v1/httproute_types.go`` HTTPRouteSpec.hostnames),
independently of the translator, so that the verifier does not inherit its
bugs. Pure functions over strings.
"""

from __future__ import annotations

# Listener.hostname / HTTPRouteSpec.hostnames: "Hostnames that are prefixed
# with a wildcard label (`*.`) are interpreted as a suffix match. That means
# that a match for `*.example.com` would match both `test.example.com`, and
# `foo.test.example.com`, but not `example.com`."
WILDCARD_PREFIX = "*."

# GatewaySpec.listeners: "Exact matches MUST be processed before wildcard
# matches, and wildcard matches MUST be processed before fallback (empty
# Hostname value) matches." (rank: lower is processed first)
LISTENER_HOSTNAME_RANK = {"exact": 0, "wildcard": 1, "fallback": 2}


def normalize_host(host: str) -> str:
    """DNS names compare case-insensitively; a trailing root dot names the same host."""
    host = host.strip().lower()
    return host[:-1] if host.endswith(".") and len(host) > 1 else host


def is_wildcard(hostname: str) -> bool:
    return hostname.startswith(WILDCARD_PREFIX)


def hostname_matches(pattern: str, host: str) -> bool:
    """Does the request host (no port) fall under a Listener/Route hostname?

    The wildcard label stands for one or more labels ("will match any number of
    characters _and dots_ to the left"), never for none: the apex is not matched.
    """
    pattern, host = normalize_host(pattern), normalize_host(host)
    if is_wildcard(pattern):
        suffix = pattern[1:]  # ".example.com"
        return host.endswith(suffix) and len(host) > len(suffix)
    return host == pattern


def listener_specificity(hostname: str | None) -> tuple[int, int]:
    """Sort key: the most specific Listener hostname first.

    GatewaySpec.listeners: "if there are multiple wildcard entries, more specific
    wildcard entries must be processed before less specific wildcard entries
    ... the higher the number of dots in the hostname to the right of the
    wildcard character, the higher the precedence."
    """
    if not hostname:
        return (LISTENER_HOSTNAME_RANK["fallback"], 0)
    if is_wildcard(hostname):
        return (LISTENER_HOSTNAME_RANK["wildcard"], -hostname.count("."))
    return (LISTENER_HOSTNAME_RANK["exact"], 0)


def intersect(listener: str | None, route: str) -> str | None:
    """The hostnames both a Listener and a Route hostname accept, or None.

    HTTPRouteSpec.hostnames: "If a hostname is specified by both the Listener
    and HTTPRoute, there must be at least one intersecting hostname ... A
    Listener with `*.example.com` as the hostname matches HTTPRoutes that have
    ... specified at least one hostname that matches the Listener hostname. For
    example, `*.example.com`, `test.example.com`, and `foo.test.example.com`
    would all match." The result is the more specific of the two patterns; a
    Listener without hostname accepts the Route hostname as is.
    """
    route = normalize_host(route)
    if not listener:
        return route
    listener = normalize_host(listener)
    if not is_wildcard(listener) and not is_wildcard(route):
        return route if route == listener else None
    if is_wildcard(listener) and not is_wildcard(route):
        return route if hostname_matches(listener, route) else None
    if not is_wildcard(listener) and is_wildcard(route):
        return listener if hostname_matches(route, listener) else None
    # Both wildcards: one suffix contains the other.
    if route[1:].endswith(listener[1:]):
        return route
    if listener[1:].endswith(route[1:]):
        return listener
    return None


def effective_hostnames(listener: str | None, route_hostnames: tuple[str, ...]) -> tuple[str, ...]:
    """The Route's hostnames as seen through one Listener.

    "If both the Listener and HTTPRoute have specified hostnames, any HTTPRoute
    hostnames that do not match the Listener hostname MUST be ignored." A Route
    without hostnames inherits the Listener's (``("",)`` stands for "any host").
    """
    if not route_hostnames:
        return (normalize_host(listener),) if listener else ("",)
    found = (intersect(listener, h) for h in route_hostnames)
    return tuple(dict.fromkeys(h for h in found if h is not None))


def route_hostname_key(effective: tuple[str, ...], host: str) -> tuple[int, int] | None:
    """(characters of the matching non-wildcard hostname, characters of the
    matching hostname) for this request, or None when no hostname matches.

    HTTPRouteSpec.hostnames: "precedence must be given to rules from the
    HTTPRoute with the largest number of: * Characters in a matching
    non-wildcard hostname. * Characters in a matching hostname." The aether
    edge does not claim GatewayRouteHostnameIntersectionPrecedence, so the
    Listener/Route intersection is what counts ("Implementations that do not
    support this feature MAY evaluate precedence using the calculated
    Listener/Route hostname intersection"); "any host" counts 0 characters.
    """
    best: tuple[int, int] | None = None
    for pattern in effective:
        if pattern == "":
            key = (0, 0)
        elif hostname_matches(pattern, host):
            key = (0 if is_wildcard(pattern) else len(pattern), len(pattern))
        else:
            continue
        best = key if best is None or key > best else best
    return best
