"""Does an HTTPRouteMatch accept a request, and which matching rule wins?

Written from ``apis/v1/httproute_types.go`` (PathMatchType, HTTPHeaderMatch,
HTTPQueryParamMatch, HTTPRouteMatch, HTTPRouteRule.matches). Regular
expressions use RE2 (google-re2), the dialect the aether edge documents, with
full-match semantics on the path without its query string.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from verifier.gatewayapi.model import HTTPRoute, PathMatch, RouteMatch, RouteRule, ValueMatch
from verifier.semantics.path_match import full_match, path_accepts, program
from verifier.semantics.request import Request


@dataclass(frozen=True)
class Candidate:
    """One (route, rule, match) that accepts the request on the chosen Listener."""

    route: HTTPRoute
    rule: RouteRule
    match_index: int
    match: RouteMatch
    hostname_key: tuple[int, int]  # see spec.hostnames.route_hostname_key

    @property
    def route_key(self) -> str:
        return f"{self.route.meta.namespace}/{self.route.meta.name}"

    def describe(self) -> str:
        m = self.match
        parts = [f"{m.path.type} {m.path.value}"]
        if m.method:
            parts.append(f"method {m.method}")
        parts.extend(f"header {h.name}" for h in effective_headers(m))
        parts.extend(f"query {q.name}" for q in effective_query_params(m))
        return (
            f"{self.route_key} rule {self.rule.index} match {self.match_index} ({', '.join(parts)})"
        )


compile_regex = program  # the RE2 program, or None when RE2 rejects the pattern
regex_full_match = full_match


def path_matches(pm: PathMatch, path: str) -> bool:
    """PathMatchType.

    Exact: "Matches the URL path exactly and with case sensitivity ... an exact
    path match on `/abc` will only match requests to `/abc`, NOT `/abc/`,
    `/Abc`, or `/abcd`." PathPrefix: "Matching is case-sensitive and done on a
    path element by element basis ... When specified, a trailing `/` is ignored.
    For example, the paths `/abc`, `/abc/`, and `/abc/def` would all match the
    prefix `/abc`, but the path `/abcd` would not." RegularExpression: "Matches
    if the URL path matches the given regular expression with case sensitivity."
    So: an exact path, a segment prefix (a prefix of ``/`` alone: every path), a
    regex (``verifier.semantics.path_match`` says how each accepts a path).
    """
    found = path_kind(pm)
    return found is not None and path_accepts(*found, path)


def path_kind(pm: PathMatch) -> tuple[str, str] | None:
    """The path predicate (kind, value) of ``path_match``'s vocabulary that ``pm`` is."""
    if pm.type == "Exact":
        return "exact", pm.value
    if pm.type == "PathPrefix":
        prefix = pm.value.rstrip("/")  # "a trailing `/` is ignored"
        return ("segment_prefix", prefix) if prefix else ("prefix", "")
    if pm.type == "RegularExpression":
        return "regex", pm.value
    return None


def effective_headers(match: RouteMatch) -> tuple[ValueMatch, ...]:
    """HTTPHeaderMatch.name: "If multiple entries specify equivalent header
    names, only the first entry with an equivalent name MUST be considered for a
    match. Subsequent entries with an equivalent header name MUST be ignored.
    Due to the case-insensitivity of header names, "foo" and "Foo" are
    considered equivalent."
    """
    seen: set[str] = set()
    out: list[ValueMatch] = []
    for h in match.headers:
        if h.name.lower() not in seen:
            seen.add(h.name.lower())
            out.append(h)
    return tuple(out)


def effective_query_params(match: RouteMatch) -> tuple[ValueMatch, ...]:
    """HTTPQueryParamMatch.name: "This must be an exact string match ... If
    multiple entries specify equivalent query param names, only the first entry
    with an equivalent name MUST be considered for a match."
    """
    seen: set[str] = set()
    out: list[ValueMatch] = []
    for q in match.query_params:
        if q.name not in seen:
            seen.add(q.name)
            out.append(q)
    return tuple(out)


def query_params(request: Request) -> dict[str, str]:
    """Name -> first value, percent-decoded. "If a query param is repeated in an
    HTTP request, the behavior is purposely left undefined ... it is
    *recommended* that implementations should match against the first value"."""
    params: dict[str, str] = {}
    for part in request.query.split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        params.setdefault(unquote(name), unquote(value))
    return params


def _value_matches(vm: ValueMatch, value: str) -> bool:
    if vm.type == "Exact":
        return value == vm.value
    if vm.type == "RegularExpression":
        return regex_full_match(vm.value, value)
    return False


def match_accepts(match: RouteMatch, request: Request) -> bool:
    """HTTPRouteMatch: "Multiple match types are ANDed together, i.e. the match
    will evaluate to true only if all conditions are satisfied." Header values
    are compared case-sensitively; a header received several times is compared
    as its values joined with "," (RFC 7230 section 3.2.2)."""
    if not path_matches(match.path, request.path_only):
        return False
    if match.method is not None and match.method != request.method:
        return False
    for h in effective_headers(match):
        values = request.header(h.name)
        if not values or not _value_matches(h, ",".join(values)):
            return False
    params = query_params(request)
    return all(
        q.name in params and _value_matches(q, params[q.name])
        for q in effective_query_params(match)
    )


def rule_problem(rule: RouteRule) -> str | None:
    """Why a rule is invalid and dropped: a RegularExpression RE2 cannot compile.

    AllowedRoutes: "Invalid Route rules can be ignored ... even if a filter
    specified by a Route rule is invalid, the rest of the rules within that
    Route should still be supported."
    """
    for i, m in enumerate(rule.matches):
        patterns = [m.path.value] if m.path.type == "RegularExpression" else []
        patterns += [
            v.value for v in (*m.headers, *m.query_params) if v.type == "RegularExpression"
        ]
        for p in patterns:
            if compile_regex(p) is None:
                return f"match {i}: RE2 cannot compile {p!r}"
    return None


# The aether edge's place for RegularExpression paths ("Note: The precedence of
# RegularExpression path matches are implementation-specific."): after Exact,
# before PathPrefix; among regexes the longer pattern first.
PATH_TYPE_RANK = {"Exact": 0, "RegularExpression": 1, "PathPrefix": 2}


def _path_chars(c: Candidate) -> int:
    value = c.match.path.value
    return len(value.rstrip("/")) if c.match.path.type == "PathPrefix" else len(value)


def _timestamp(c: Candidate) -> tuple[int, float]:
    """Older first. A Route without (a readable) creationTimestamp has not been
    created by the API server yet, so it is the newest."""
    ts = c.route.meta.creation_timestamp
    try:
        when = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return (1, 0.0)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (0, when.timestamp())


# HTTPRouteSpec.hostnames: "In the event that multiple HTTPRoutes specify
# intersecting hostnames ..., precedence must be given to rules from the
# HTTPRoute with the largest number of: * Characters in a matching non-wildcard
# hostname. * Characters in a matching hostname. If ties exist across multiple
# Routes, the matching precedence rules for HTTPRouteMatches takes over."
# HTTPRouteRule.matches: "Across all rules specified on applicable Routes,
# precedence must be given to the match having: * "Exact" path match. *
# "Prefix" path match with largest number of characters. * Method match. *
# Largest number of header matches. * Largest number of query param matches.
# ... If ties still exist across multiple Routes, matching precedence MUST be
# determined in order of the following criteria, continuing on ties: * The
# oldest Route based on creation timestamp. * The Route appearing first in
# alphabetical order by "{namespace}/{name}". If ties still exist within an
# HTTPRoute, matching precedence MUST be granted to the FIRST matching rule (in
# list order) with a match meeting the above criteria."
# (criterion, key): the smallest key wins; the first differing criterion decides.
PRECEDENCE: tuple[tuple[str, Callable[[Candidate], Any]], ...] = (
    ("characters in a matching non-wildcard hostname", lambda c: -c.hostname_key[0]),
    ("characters in a matching hostname", lambda c: -c.hostname_key[1]),
    ("path match type (Exact > RegularExpression > PathPrefix)",
     lambda c: PATH_TYPE_RANK.get(c.match.path.type, 9)),
    ("path characters", lambda c: -_path_chars(c)),
    ("method match", lambda c: 0 if c.match.method else 1),
    ("number of header matches", lambda c: -len(effective_headers(c.match))),
    ("number of query param matches", lambda c: -len(effective_query_params(c.match))),
    ("oldest creationTimestamp", _timestamp),
    ('"{namespace}/{name}" alphabetical order', lambda c: c.route_key),
    ("rule order", lambda c: c.rule.index),
    ("match order", lambda c: c.match_index),
)  # fmt: skip


def precedence_key(c: Candidate) -> tuple[Any, ...]:
    return tuple(key(c) for _, key in PRECEDENCE)


def deciding_criterion(winner: Candidate, other: Candidate) -> str:
    """The first precedence criterion on which ``winner`` beats ``other``."""
    for name, key in PRECEDENCE:
        if key(winner) != key(other):
            return name
    return "identical"
