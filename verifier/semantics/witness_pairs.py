"""Witnesses where two matches overlap: the requests precedence decides.

Envoy's first match and the spec's precedence can only disagree on a request
that several matches accept, and single-match witnesses rarely hit one. For
every pair of matches on the same host whose conditions are compatible, this
builds one request that satisfies both; which rule wins it is exactly what the
precedence rule judges. Pairs are only formed within a first-path-segment
bucket (plus root matches and regexes that leave their first segment open),
so the work grows with overlaps, not with the square of the route count.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from verifier.gatewayapi import model as m
from verifier.semantics.path_match import regex_segment
from verifier.semantics.request import (
    Request,
    normalize_headers,
    percent_encode,
    sendable_value,
)
from verifier.semantics.spec.match import regex_full_match

PRECEDENCE = "HTTPRouteMatchingPrecedence"
ROOT = ""  # bucket of matches every path may satisfy


@dataclass(frozen=True)
class Served:
    route: m.HTTPRoute
    rule: m.RouteRule
    index: int
    match: m.RouteMatch


def _segment(match: m.PathMatch) -> str:
    if match.type == "RegularExpression":
        # The segment every full match starts with; else paired with every match.
        return regex_segment(match.value) or ROOT
    parts = match.value.strip("/").split("/", 1)
    return parts[0] if parts[0] else ROOT


def _path_for(a: m.PathMatch, b: m.PathMatch) -> str | None:
    """A path both accept, or None when none exists (or is not easy to find)."""
    if a.type == "RegularExpression" or b.type == "RegularExpression":
        if a.type == b.type:
            return None
        regex, other = (a, b) if a.type == "RegularExpression" else (b, a)
        base = other.value if other.type == "Exact" else (other.value.rstrip("/") or "") + "/x"
        return base if regex_full_match(regex.value, base) else None
    if a.type == "Exact" and b.type == "Exact":
        return a.value if a.value == b.value else None
    if a.type == "Exact" or b.type == "Exact":
        exact, prefix = (a, b) if a.type == "Exact" else (b, a)
        return exact.value if _under(exact.value, prefix.value) else None
    longer, shorter = (a, b) if len(a.value) >= len(b.value) else (b, a)
    if not _under(longer.value.rstrip("/") or "/", shorter.value):
        return None
    return (longer.value.rstrip("/") or "") + "/x"


def _under(path: str, prefix: str) -> bool:
    base = prefix.rstrip("/")
    return not base or path == base or path.startswith(base + "/")


def _first_wins(values: tuple[m.ValueMatch, ...], fold: bool) -> list[m.ValueMatch]:
    """Of entries with equivalent names only the first counts (HTTPHeaderMatch)."""
    seen: set[str] = set()
    out = []
    for v in values:
        key = v.name.lower() if fold else v.name
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def _merge(
    a: tuple[m.ValueMatch, ...], b: tuple[m.ValueMatch, ...], fold: bool
) -> dict[str, str] | None:
    out: dict[str, str] = {}
    for v in (*_first_wins(a, fold), *_first_wins(b, fold)):
        if v.type != "Exact":
            return None
        key = v.name.lower() if fold else v.name
        if out.get(key, v.value) != v.value:
            return None
        out[key] = v.value
    return out


def pair_request(
    a: m.RouteMatch, b: m.RouteMatch, host: str, port: int, scheme: str
) -> Request | None:
    if a.method and b.method and a.method != b.method:
        return None
    path = _path_for(a.path, b.path)
    headers = _merge(a.headers, b.headers, fold=True)
    query = _merge(a.query_params, b.query_params, fold=False)
    if path is None or headers is None or query is None:
        return None
    if query:
        path += "?" + "&".join(f"{k}={percent_encode(v)}" for k, v in sorted(query.items()))
    return Request(
        method=a.method or b.method or "GET",
        scheme=scheme,
        host=host,
        port=port,
        path=path,
        headers=normalize_headers((k, sendable_value(v)) for k, v in headers.items()),
    )


def overlapping_pairs(served: list[Served]) -> Iterator[tuple[Served, Served]]:
    buckets: dict[str, list[Served]] = {}
    for s in served:
        buckets.setdefault(_segment(s.match.path), []).append(s)
    root = buckets.get(ROOT, [])
    for key, group in sorted(buckets.items()):
        others = group if key == ROOT else group + root
        for i, first in enumerate(group):
            for second in others[i + 1 :]:
                if first.route is not second.route or first.rule is not second.rule:
                    yield first, second
