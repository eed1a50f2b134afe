"""No xDS route is shadowed by an earlier route in its virtual host.

Why it matters: "The router ... uses the first route that matches" (Envoy HTTP routing),
so a route every one of whose requests an earlier route already matches never runs:
usually a precedence bug (the spec orders Exact before longer prefixes before shorter
ones, then by header and query matches) that sends its traffic to the wrong backend.

Only provable shadowing is reported. The earlier route must have no condition the
later one lacks: each of its header and query parameter matchers appears identically
in the later route, and it has none of runtime_fraction, cookies, grpc, tls_context,
dynamic_metadata, filter_state. Paths: ``prefix`` P covers a later ``prefix``,
``path`` or ``path_separated_prefix`` starting with P; ``path`` covers the same
``path``; ``path_separated_prefix`` S covers ``path`` S or S/..., and ``prefix`` or
``path_separated_prefix`` starting with S/. A case-insensitive earlier route compares
in lower case; a case-insensitive later route is only covered by a case-insensitive
one. A ``safe_regex`` route is only covered by ``prefix: /`` without conditions.
Not reported, because the spec itself makes one of the two unreachable and
httproute-precedence judges which: equivalent matches (the spec orders identical
matches of different HTTPRoutes by age, then name, and httproute-identical-matches
reports the loser at its YAML line, once, whether or not the xDS keeps its route); routes whose
``aether.io/route`` metadata names HTTPRoutes with different hostnames (the spec
ranks the matching hostname before the path, so ``/`` of ``foo.example.com`` beats
``/api`` of ``*.example.com`` for that host); and, metadata or not, a later route
whose requests the spec also gives to the earlier one: witness requests
that both routes match are answered by the earlier route, and the spec model
agrees with that answer, on every such witness. Otherwise the later route is reported
as dead configuration in that virtual host.

Example: ``prefix: /`` (no conditions) first, ``path_separated_prefix: /api`` second:
the second is unreachable.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import TYPE_CHECKING

from verifier.rules.support import walk

from verifier.check import Context, outcome_diff
from verifier.findings import Finding, new
from verifier.gatewayapi import model as m
from verifier.registry import Rule
from verifier.semantics.envoy.match import CompiledMatch, router_view
from verifier.semantics.envoy.model import ModelError
from verifier.semantics.request import Evaluation
from verifier.semantics.witness import Witness
from verifier.xds import read

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.route.v3 import HeaderMatcher, Route, RouteMatch

NAME = "unreachable-routes"
CODE = "EV402"
OTHER_CONDITIONS = (
    "runtime_fraction",
    "cookies",
    "grpc",
    "tls_context",
    "dynamic_metadata",
    "filter_state",
)
PATH_KINDS = ("prefix", "path", "path_separated_prefix", "safe_regex")


def _header_key(h: HeaderMatcher) -> tuple[str, bytes]:
    """Header names compare case-insensitively (Envoy lower-cases them)."""
    return h.name.lower(), read.canonical(h, without="name")


def _conditions_subsumed(early: RouteMatch, late: RouteMatch) -> bool:
    """Every condition of ``early`` also holds for every request ``late`` matches."""
    if any(getattr(early, f) for f in OTHER_CONDITIONS):
        return False
    late_headers = {_header_key(h) for h in late.headers}
    late_queries = {read.canonical(q) for q in late.query_parameters}
    return all(_header_key(h) in late_headers for h in early.headers) and all(
        read.canonical(q) in late_queries for q in early.query_parameters
    )


def _path_covered(early: RouteMatch, late: RouteMatch) -> bool:
    ek, early_value = read.one_of(early, "path_specifier")
    lk, late_value = read.one_of(late, "path_specifier")
    ev, lv = str(early_value), str(late_value)
    if ek not in PATH_KINDS or lk not in PATH_KINDS:
        return False
    if lk == "safe_regex" or ek == "safe_regex":
        return ek == "prefix" and ev == "/" and lk == "safe_regex"
    early_ci = early.case_sensitive is False
    if late.case_sensitive is False and not early_ci:
        return False
    e, lt = (ev.lower(), lv.lower()) if early_ci else (ev, lv)
    if ek == "prefix":
        return lt.startswith(e)
    if ek == "path":
        return lk == "path" and lt == e
    if lk == "path":
        return lt == e or lt.startswith(e + "/")
    if lk == "path_separated_prefix":
        return lt == e or lt.startswith(e + "/")
    return lt.startswith(e + "/")


def shadowed_by(early: RouteMatch, late: RouteMatch) -> bool:
    """Every request ``late`` matches is matched by ``early`` (provably)."""
    if not _path_covered(early, late) or not _conditions_subsumed(early, late):
        return False
    late_regex = read.one_of(late, "path_specifier")[0] == "safe_regex"
    return not (late_regex and (early.headers or early.query_parameters))


def _source(ctx: Context, route: Route) -> m.HTTPRoute | None:
    meta = route.metadata.filter_metadata.get(walk.ROUTE_METADATA) if route.metadata else None
    key = str(read.struct_json(meta).get("httproute", "")).split("/") if meta else []
    return ctx.res.httproutes.get((key[0], key[1])) if len(key) == 2 else None


def _hostname_precedence(ctx: Context, early: Route, late: Route) -> bool:
    """Both routes say (metadata) they come from HTTPRoutes with different hostnames."""
    a, b = _source(ctx, early), _source(ctx, late)
    return a is not None and b is not None and a is not b and a.hostnames != b.hostnames


PathInfo = tuple[str, str]  # (path specifier kind, value)


def _path_infos(routes: list[Route]) -> list[PathInfo | None]:
    out: list[PathInfo | None] = []
    for r in routes:
        if r.match is None:
            out.append(None)
            continue
        kind, value = read.one_of(r.match, "path_specifier")
        out.append((kind, value.regex if kind == "safe_regex" else str(value)))
    return out


def _may_cover(early: PathInfo | None, late: PathInfo) -> bool:
    """A cheap necessary condition for _path_covered, to skip most pairs of a
    large virtual host without building protobuf bytes (case folding aside)."""
    if early is None:
        return False
    kind, value = early
    if kind == "prefix":
        return value == "/" or late[1].lower().startswith(value.lower())
    return kind in ("path", "path_separated_prefix") and late[1].lower().startswith(value.lower())


class PathIndex:
    """The routes of a virtual host by lower-cased path value, so that the earlier routes
    that may cover a later one (``_may_cover``: its value a prefix of the later one's,
    or ``prefix: /``) are found by one lookup per prefix of the later path instead of a
    scan of every earlier route: the pair checks were quadratic per virtual host
    (995,000 at 10,000 rules). ``candidates`` gives exactly the indices, ascending,
    that the scan would have kept (tests/test_unreachable_index.py)."""

    def __init__(self, infos: list[PathInfo | None]) -> None:
        self.by_value: dict[str, list[int]] = {}
        self.any_path: list[int] = []  # prefix "/": may cover anything, a regex included
        for i, info in enumerate(infos):
            if info is None:
                continue
            kind, value = info
            if kind == "prefix" and value == "/":
                self.any_path.append(i)
            elif kind in ("prefix", "path", "path_separated_prefix"):
                self.by_value.setdefault(value.lower(), []).append(i)
        # Only prefixes of these lengths can be keys: one lookup per length, not per
        # character of the later path (a 1 MB regex took 5 minutes, quadratic slicing).
        self.lengths = sorted({len(value) for value in self.by_value})

    def candidates(self, late: PathInfo, before: int) -> list[int]:
        """Indices below ``before`` whose route may cover ``late``, ascending."""
        found = self.any_path[: bisect.bisect_left(self.any_path, before)]
        text = late[1].lower()
        for k in self.lengths:
            if k > len(text):
                break
            same = self.by_value.get(text[:k])
            if same:
                found = found + same[: bisect.bisect_left(same, before)]
        return sorted(set(found))


class _SpecAgrees:
    """Whether the spec gives a shadowed route's requests to the route that shadows it,
    judged on the witness requests (built lazily: most configurations never ask)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._by_route: dict[str, list[tuple[Witness, Evaluation]]] | None = None

    def _answered(self) -> dict[str, list[tuple[Witness, Evaluation]]]:
        if self._by_route is None:
            self._by_route = {}
            for w in self.ctx.witnesses:
                ev = self.ctx.envoy.evaluate(w.request, trace=False)
                ref = ev.outcome.route
                if ref is not None and ref.xds_path:
                    self._by_route.setdefault(ref.xds_path, []).append((w, ev))
        return self._by_route

    def __call__(self, early_path: str, late: RouteMatch) -> bool:
        if self.ctx.models_problem is not None:
            return False
        try:
            matcher = CompiledMatch(late)
        except ModelError:
            return False
        seen = False
        for w, ev in self._answered().get(early_path, []):
            r = w.request
            if matcher.matches(router_view(r, r.host, r.path, r.path.split("?", 1)[0])):
                spec = self.ctx.spec(w.gateway, w.request, trace=False)
                if outcome_diff(spec.outcome, ev.outcome):
                    return False
                seen = True
        return seen


def check(ctx: Context) -> Iterable[Finding]:
    spec_agrees = _SpecAgrees(ctx)
    indexes: dict[int, tuple[list[PathInfo | None], PathIndex]] = {}
    for ref in walk.routes(ctx.snapshot):
        late = ref.route.match
        if late is None or ctx.unjudged.has(ref):
            continue
        found = indexes.get(id(ref.vhost))
        if found is None:
            infos = _path_infos(ref.vhost.routes)
            found = indexes[id(ref.vhost)] = (infos, PathIndex(infos))
        late_info = found[0][ref.index]
        if late_info is None:
            continue
        for i in found[1].candidates(late_info, ref.index):
            earlier = ref.vhost.routes[i]
            if earlier.match is None or not shadowed_by(earlier.match, late):
                continue
            if shadowed_by(late, earlier.match) or _hostname_precedence(ctx, earlier, ref.route):
                continue
            base = ref.path.rsplit("[", 1)[0]
            if spec_agrees(f"{base}[{i}]", late):
                continue
            yield new(
                CODE,
                NAME,
                **walk.route_where(ctx, ref),
                xds_path=ref.path,
                route=ref.label,
                earlier=earlier.name or f"{base}[{i}]",
            )
            break


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("HTTPRoute",),
    spec_ref="https://www.envoyproxy.io/docs/envoy/v1.40.0/intro/arch_overview/http/http_routing",
    doc=(__doc__ or "").strip(),
    check=check,
)
