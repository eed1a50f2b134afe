"""An index over the HTTPRoutes that serve each Listener, built once per Resources.

The spec model's question "which (route, rule, match) accept this request on
this Listener?" has a request-independent part: which Routes are attached to
the Listener (parentRefs, allowedRoutes, hostname intersection, supported
features), each Route's hostnames as seen through the Listener, and which
rules are dropped. ``SpecIndex`` computes that part once, by calling the same
spec functions the request-by-request scan calls (``attachment_problem``,
``effective_hostnames``, ``rule_problem``), and files every surviving match
in buckets so a request only looks at matches that could accept it:

* by hostname: the exact hostname, the wildcard suffix (``*.example.com`` is
  filed under ``.example.com``), or "any host" (a Route without hostnames on a
  Listener without one, and any pattern not in normal form);
* by the first path segment: ``Exact`` and ``PathPrefix`` values, and
  ``RegularExpression`` patterns that start with a literal ``/segment/``; the
  rest (``/`` prefixes, other regexes) are checked for every request.

The index only narrows: the request's hostname key and every match are then
decided by ``route_hostname_key`` and ``match_accepts``, exactly as the scan
decides them. A bucket never drops a match that could accept the request
(each filing rule says why above it). Pure: no I/O.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from verifier.gatewayapi.model import Gateway, GatewayListener, HTTPRoute, RouteMatch, RouteRule
from verifier.gatewayapi.resources import Resources
from verifier.semantics.path_match import first_segment, regex_segment
from verifier.semantics.request import Request
from verifier.semantics.spec.attach import attachment_problem, refers_to_gateway
from verifier.semantics.spec.hostnames import effective_hostnames, is_wildcard, normalize_host
from verifier.semantics.spec.listeners import ListenerSelection, describe, select_listener
from verifier.semantics.spec.match import rule_problem

# How many request-independent "does not serve" lines a trace lists before a count.
TRACE_LIMIT = 10

# A RegularExpression is filed by first segment only when every string it fully
# matches starts with "/<segment>/" (``path_match.regex_segment`` says when).
path_segment = first_segment  # the bucket key of a request path (without query)


def match_segment(match: RouteMatch) -> str | None:
    """The only first segment a path accepted by ``match`` can have, or None
    when several are possible (the match is then checked for every request).

    Exact: the path equals the value, so it has the value's key. PathPrefix:
    "the paths `/abc`, `/abc/`, and `/abc/def` would all match the prefix
    `/abc`" (a trailing ``/`` ignored): a non-empty prefix starting with ``/``
    fixes the first segment; ``/`` (empty once stripped) fixes nothing.
    """
    pm = match.path
    if pm.type == "Exact":
        return path_segment(pm.value)
    if pm.type == "PathPrefix":
        prefix = pm.value.rstrip("/")
        return path_segment(prefix) if prefix.startswith("/") else None
    if pm.type == "RegularExpression":
        return regex_segment(pm.value)
    return None


# Within a first segment, matches are filed again by the second: a route's rules
# usually share their first segment (/shop/cart, /shop/pay, ...). NO_SECOND is
# the key of a path that has none (`/shop`); `/shop/` has the empty one.
NO_SECOND = "\x00"
_LITERAL_SEGMENTS = re.compile(r"/([A-Za-z0-9_~%-]*)/([A-Za-z0-9_~%-]*)/(?![?*+{])")


def path_keys(path: str) -> tuple[str, str]:
    """(first segment, second segment or NO_SECOND) of a request path without query."""
    if not path.startswith("/"):
        return path, NO_SECOND
    parts = path.split("/", 3)
    return parts[1], parts[2] if len(parts) > 2 else NO_SECOND


def match_second(match: RouteMatch) -> str | None:
    """The only second-segment key (see ``path_keys``) a path accepted by ``match``
    can have, or None when several are possible. Only meaningful together with a
    first segment from ``match_segment``.

    Exact: the value's own key. PathPrefix, trailing `/` ignored: `/a/b` accepts
    `/a/b` and `/a/b/...` (second `b`); `/a` accepts `/a`, `/a/`, `/a/x` (any).
    RegularExpression: when its literal start spells two whole segments.
    """
    pm = match.path
    if pm.type == "Exact":
        return path_keys(pm.value)[1]
    if pm.type == "PathPrefix":
        prefix = pm.value.rstrip("/")
        if prefix.startswith("/") and prefix.count("/") >= 2:
            return prefix.split("/", 3)[2]
        return None
    if pm.type == "RegularExpression" and "|" not in pm.value:
        found = _LITERAL_SEGMENTS.match(pm.value)
        return found.group(2) if found else None
    return None


@dataclass(frozen=True, eq=False)
class IndexedMatch:
    """One match of a valid rule of a Route that serves the Listener."""

    served: ServedRoute
    rule: RouteRule
    match_index: int
    match: RouteMatch
    seq: int = 0  # creation order: the order the scan meets matches


@dataclass(frozen=True, eq=False)
class ServedRoute:
    """A Route attached to the Listener, with what the request cannot change."""

    order: int  # position in sorted(res.httproutes): the scan's trace order
    name: str  # "HTTPRoute ns/name"
    route: HTTPRoute
    effective: tuple[str, ...]  # effective_hostnames(listener, route.hostnames)
    dropped: tuple[str, ...]  # trace lines for rules rule_problem drops


@dataclass
class Bucket:
    """The matches of the Routes filed under one hostname key."""

    # first segment -> second-segment key (None: any) -> matches, in filing order
    by_segment: dict[str, dict[str | None, list[IndexedMatch]]] = field(default_factory=dict)
    always: list[IndexedMatch] = field(default_factory=list)
    routes: dict[int, ServedRoute] = field(default_factory=dict)  # order -> route
    with_dropped: list[ServedRoute] = field(default_factory=list)

    def add(self, served: ServedRoute, matches: Iterable[tuple[IndexedMatch, str | None]]) -> None:
        if served.order in self.routes:
            return
        self.routes[served.order] = served
        if served.dropped:
            self.with_dropped.append(served)
        for im, segment in matches:
            if segment is None:
                self.always.append(im)
            else:
                seconds = self.by_segment.setdefault(segment, {})
                seconds.setdefault(match_second(im.match), []).append(im)

    def plausible(self, segment: str, second: str = NO_SECOND) -> list[IndexedMatch]:
        """The matches a path with these first two segments may satisfy, in the
        order they were filed (the order the scan meets them)."""
        seconds = self.by_segment.get(segment)
        if not seconds:
            return self.always
        exact, anywhere = seconds.get(second, []), seconds.get(None, [])
        if not exact or not anywhere:
            return (exact or anywhere) + self.always
        return [*heapq.merge(exact, anywhere, key=lambda im: im.seq), *self.always]


@dataclass
class ListenerRoutes:
    """Every Route that references the Gateway, as seen from one Listener."""

    listener: GatewayListener
    unrelated: int  # HTTPRoutes that do not reference the Gateway at all
    refused: tuple[str, ...]  # "HTTPRoute ns/n does not serve <listener>: why"
    served: int = 0
    exact: dict[str, Bucket] = field(default_factory=dict)
    wildcard: dict[str, Bucket] = field(default_factory=dict)  # ".example.com" -> bucket
    any_host: Bucket = field(default_factory=Bucket)

    def file(self, served: ServedRoute, matches: list[tuple[IndexedMatch, str | None]]) -> None:
        """HTTPRouteSpec.hostnames, as ``route_hostname_key`` reads them: "" is
        any host; a normalized exact name matches only the normalized request
        host; a normalized ``*.suffix`` matches hosts ending in ``.suffix``
        with at least one more label. Anything else is checked every time."""
        self.served += 1
        for pattern in served.effective:
            normal = pattern != "" and normalize_host(pattern) == pattern
            if normal and is_wildcard(pattern):
                self.wildcard.setdefault(pattern[1:], Bucket()).add(served, matches)
            elif normal:
                self.exact.setdefault(pattern, Bucket()).add(served, matches)
            else:
                self.any_host.add(served, matches)

    def buckets(self, host: str) -> list[Bucket]:
        """The buckets whose Routes may serve ``host``: every wildcard suffix of
        the host starts at one of its dots (but not at the first character)."""
        name = normalize_host(host)
        found = [self.any_host]
        exact = self.exact.get(name)
        if exact is not None:
            found.append(exact)
        if self.wildcard:
            dot = name.find(".", 1)
            while dot != -1:
                bucket = self.wildcard.get(name[dot:])
                if bucket is not None:
                    found.append(bucket)
                dot = name.find(".", dot + 1)
        return found

    def matches(self) -> list[IndexedMatch]:
        """Every match filed, once, in the order the scan meets them: a Route is filed
        under each of its hostnames, its matches the same objects in each bucket."""
        found: dict[int, IndexedMatch] = {}
        for bucket in (self.any_host, *self.exact.values(), *self.wildcard.values()):
            for seconds in bucket.by_segment.values():
                for filed in seconds.values():
                    found.update((im.seq, im) for im in filed)
            found.update((im.seq, im) for im in bucket.always)
        return [found[seq] for seq in sorted(found)]

    def refused_trace(self) -> list[str]:
        lines = list(self.refused[:TRACE_LIMIT])
        if len(self.refused) > TRACE_LIMIT:
            lines.append(
                f"... and {len(self.refused) - TRACE_LIMIT} more HTTPRoute(s) "
                f"do not serve {describe(self.listener)}"
            )
        return lines


# (position in sorted(res.httproutes), key, route)
_Numbered = tuple[int, tuple[str, str], HTTPRoute]


class SpecIndex:
    """Per Listener, the attached Routes filed by hostname and path, built on
    first use. One index serves one ``Resources``: pass the same one each time
    (``SpecModel`` and ``spec_evaluate`` do); when its Gateways, HTTPRoutes or
    Namespaces change, build a new index.
    """

    def __init__(self) -> None:
        self._referencing: dict[tuple[str, str], list[_Numbered]] | None = None
        self._listeners: dict[int, ListenerRoutes] = {}
        self._selections: dict[tuple[object, ...], ListenerSelection] = {}

    def selection(
        self,
        res: Resources,
        gw: Gateway,
        request: Request,
        peers: tuple[GatewayListener, ...] = (),
    ) -> ListenerSelection:
        """``select_listener``, remembered: it reads only the request's port,
        scheme, hostname, SNI and client certificate (and the Gateways sharing the
        address, if any), and witnesses share them by the thousand."""
        key = (
            id(gw),
            len(peers),
            request.port,
            request.scheme,
            request.hostname,
            request.sni,
            request.client_cert,
        )
        found = self._selections.get(key)
        if found is None:
            found = self._selections[key] = select_listener(res, gw, request, peers)
        return found

    def listener(self, res: Resources, gw: Gateway, lst: GatewayListener) -> ListenerRoutes:
        """The Routes of ``res`` as seen from ``lst`` (a Listener of ``gw``)."""
        found = self._listeners.get(id(lst))
        if found is None or found.listener is not lst:
            if self._referencing is None:
                self._referencing = _routes_by_gateway(res)
            # Routes naming the Gateway or one of the ListenerSets merged into it.
            targets = {gw.meta.key} | {
                other.listener_set for other in gw.listeners if other.listener_set is not None
            }
            seen: dict[int, _Numbered] = {}
            for target in targets:
                for numbered in self._referencing.get(target, []):
                    seen[numbered[0]] = numbered
            routes = [
                numbered
                for _, numbered in sorted(seen.items())
                if any(refers_to_gateway(ref, gw) for ref in numbered[2].parent_refs)
            ]
            found = self._listeners[id(lst)] = _listener_routes(res, gw, lst, routes)
        return found


def _routes_by_gateway(res: Resources) -> dict[tuple[str, str], list[_Numbered]]:
    """(order, key, route) for each Route with a parentRef naming each (namespace,
    name); ``refers_to_gateway`` then decides which really reference it."""
    out: dict[tuple[str, str], list[_Numbered]] = {}
    for order, key in enumerate(sorted(res.httproutes)):
        route = res.httproutes[key]
        for target in sorted({(ref.namespace, ref.name) for ref in route.parent_refs}):
            out.setdefault(target, []).append((order, key, route))
    return out


def _listener_routes(
    res: Resources, gw: Gateway, lst: GatewayListener, routes: list[_Numbered]
) -> ListenerRoutes:
    refused: list[str] = []
    served: list[tuple[ServedRoute, list[tuple[IndexedMatch, str | None]]]] = []
    created = 0
    for order, key, route in routes:
        name = f"HTTPRoute {key[0]}/{key[1]}"
        problem = attachment_problem(res, gw, lst, route)
        if problem:
            refused.append(f"{name} does not serve {describe(lst)}: {problem}")
            continue
        dropped: list[str] = []
        valid: list[RouteRule] = []
        for rule in route.rules:
            why = rule_problem(rule)
            if why:
                dropped.append(f"{name} rule {rule.index} dropped: {why}")
            else:
                valid.append(rule)
        sr = ServedRoute(
            order, name, route, effective_hostnames(lst.hostname, route.hostnames), tuple(dropped)
        )
        matches = [
            (IndexedMatch(sr, rule, i, match, created + n), match_segment(match))
            for n, (rule, i, match) in enumerate(
                (rule, i, match) for rule in valid for i, match in enumerate(rule.matches)
            )
        ]
        created += len(matches)
        served.append((sr, matches))
    out = ListenerRoutes(lst, len(res.httproutes) - len(routes), tuple(refused))
    for sr, matches in served:
        out.file(sr, matches)
    return out
