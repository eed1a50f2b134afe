"""Route tables: Envoy's first-match order, with an index that skips impossible routes.

VirtualHost.routes: "The list of routes that will be matched, in order, for incoming
requests. The first route that matches will be used." The index never changes that
order: it only proves, from the path alone, that some routes cannot match. A
case-sensitive ``path`` route can only match its own path, and a case-sensitive
``path_separated_prefix``, or ``prefix`` whose value holds a second `/`, can only
match paths whose first segment is the one it names; so can a ``safe_regex`` whose
leading literal (a full match must start with it) holds a second `/`. Every other
route is checked
for every request. Candidates from the buckets are merged back into config order.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from verifier.semantics.envoy.headers import HeaderParser, header_parser
from verifier.semantics.envoy.match import CompiledMatch, MatchContext
from verifier.semantics.envoy.strings import ModelError
from verifier.semantics.request import RouteRef
from verifier.xds import read

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.route.v3 import Route

ROUTE_MATCH = "envoy.config.route.v3.RouteMatch"
ROUTE_METADATA_KEY = "aether.io/route"  # informational only: RouteRef, never decisions
TRACE_LIMIT = 20


def route_ref(route: Route) -> RouteRef:
    fields: dict[str, object] = {}
    if route.metadata is not None:
        struct = route.metadata.filter_metadata.get(ROUTE_METADATA_KEY)
        if struct is not None:
            fields = read.struct_json(struct)

    def text(key: str) -> str | None:
        v = fields.get(key)
        return v if isinstance(v, str) else None

    def number(key: str) -> int | None:
        """A whole number; None for any other (JSON's 1e400 reads as infinity)."""
        v = fields.get(key)
        return int(v) if isinstance(v, float) and math.isfinite(v) else None

    return RouteRef(route.name or None, text("httproute"), number("rule"), number("match"))


@dataclass
class CompiledRoute:
    index: int
    route: Route
    match: CompiledMatch
    ref: RouteRef
    request_headers: HeaderParser
    response_headers: HeaderParser

    @classmethod
    def build(cls, index: int, route: Route) -> CompiledRoute:
        label = f"route {route.name or index}"
        return cls(
            index,
            route,
            CompiledMatch(route.match or read.empty(ROUTE_MATCH)),
            route_ref(route),
            header_parser(
                label, route.request_headers_to_add, route.request_headers_to_remove, request=True
            ),
            header_parser(
                label,
                route.response_headers_to_add,
                route.response_headers_to_remove,
                request=False,
            ),
        )

    @property
    def label(self) -> str:
        return f"#{self.index} {self.route.name!r}" if self.route.name else f"#{self.index}"


_REGEX_META = frozenset("\\.[](){}*+?|^$")
_QUANTIFIERS = frozenset("*+?{")


def regex_literal_prefix(pattern: str) -> str:
    """A literal every full match must start with ("" when unsure): the leading run of
    plain characters, less one if a quantifier follows it; no prefix with a `|`."""
    if "|" in pattern:
        return ""
    body = pattern[1:] if pattern.startswith("^") else pattern
    end = 0
    while end < len(body) and body[end] not in _REGEX_META:
        end += 1
    if end < len(body) and body[end] in _QUANTIFIERS:
        end -= 1
    return body[: max(end, 0)]


def first_segment(path: str) -> str:
    """`/foo/bar` -> `foo`; `/foo` -> `foo`; the segment after the leading slash."""
    end = path.find("/", 1)
    return path[1:] if end == -1 else path[1:end]


@dataclass
class RouteTable:
    routes: list[CompiledRoute]
    exact: dict[str, list[int]] = field(default_factory=dict)
    segment: dict[str, list[int]] = field(default_factory=dict)
    generic: list[int] = field(default_factory=list)
    dormant: list[int] = field(default_factory=list)  # 0% runtime_fraction with a key

    @classmethod
    def build(cls, routes: list[Route]) -> RouteTable:
        compiled = []
        for i, r in enumerate(routes):
            try:
                compiled.append(CompiledRoute.build(i, r))
            except ModelError as exc:
                raise ModelError(f"routes[{i}]: {exc}") from None
        table = cls(compiled)
        for cr in table.routes:
            m = cr.match
            value = m.value if isinstance(m.value, str) else ""
            if m.never:
                if m.dormant:
                    table.dormant.append(cr.index)
                continue  # cannot match any request
            if m.kind == "safe_regex":
                # A full match starts with the literal prefix; case_sensitive does not
                # apply to regexes ("This has no effect for the safe_regex match").
                literal = regex_literal_prefix(value)
                if literal.startswith("/") and literal.find("/", 1) != -1:
                    table.segment.setdefault(first_segment(literal), []).append(cr.index)
                else:
                    table.generic.append(cr.index)
            elif m.case_sensitive and m.kind == "path":
                table.exact.setdefault(value, []).append(cr.index)
            elif (
                m.case_sensitive
                and value.startswith("/")
                and (
                    (m.kind == "path_separated_prefix" and len(value) > 1)
                    or (m.kind == "prefix" and value.find("/", 1) != -1)
                )
            ):
                table.segment.setdefault(first_segment(value), []).append(cr.index)
            else:
                table.generic.append(cr.index)
        return table

    def candidates(self, path: str) -> Iterable[int]:
        lists = [self.generic]
        exact = self.exact.get(path)
        if exact:
            lists.append(exact)
        seg = self.segment.get(first_segment(path))
        if seg:
            lists.append(seg)
        lists = [x for x in lists if x]
        if len(lists) == 1:
            return lists[0]
        return heapq.merge(*lists)

    def find(self, ctx: MatchContext, after: int = -1) -> CompiledRoute | None:
        """The first route that matches, among those after index ``after``."""
        for i in self.candidates(ctx.path_for_match):
            if i <= after:
                continue
            cr = self.routes[i]
            if cr.match.matches(ctx):
                return cr
        return None

    def dormant_before(self, ctx: MatchContext, upto: int) -> list[CompiledRoute]:
        """The routes off by default (0% runtime_fraction with a runtime key) before
        index ``upto`` that would take the request if turned on."""
        return [
            self.routes[i]
            for i in self.dormant
            if i < upto and self.routes[i].match.would_match(ctx)
        ]

    def reads_before(self, name: str, upto: int) -> bool:
        """Whether a route up to index ``upto`` (included) has a header matcher on
        ``name``: the answer then depends on that header."""
        return any(name in cr.match.reads for cr in self.routes[: upto + 1])

    def explain_misses(self, ctx: MatchContext, upto: int) -> list[str]:
        """Why each route before ``upto`` did not match: the first TRACE_LIMIT, then a count."""
        lines = [
            f"  route {cr.label} not matched: {cr.match.why_not(ctx)}"
            for cr in self.routes[: min(upto, TRACE_LIMIT)]
        ]
        if upto > TRACE_LIMIT:
            lines.append(f"  ... and {upto - TRACE_LIMIT} more routes not matched")
        return lines
