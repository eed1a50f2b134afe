"""Mutation operators on route matching and route order.

Every operator here changes one route (or swaps/drops routes) of one virtual host; each one's
doc says which Gateway API rule a faithful checker should catch it with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from envoy_data_plane.envoy.config.core.v3 import RuntimeFractionalPercent
from envoy_data_plane.envoy.config.route.v3 import HeaderMatcher, Route, RouteMatch, VirtualHost
from envoy_data_plane.envoy.type.matcher.v3 import RegexMatcher, StringMatcher
from envoy_data_plane.envoy.type.v3 import FractionalPercent, FractionalPercentDenominatorType

from verifier.mutate.algebra import has_ascii_letters
from verifier.mutate.core import (
    Edit,
    Operator,
    Site,
    each_vhost,
    on_routes,
    vhost_path,
    with_vhost,
)
from verifier.mutate.proofs import (
    prove_drop_route,
    prove_method_case,
    prove_route_local,
    prove_swap,
)
from verifier.xds.snapshot import Snapshot

METHOD = ":method"
MUTANT = "-mutant"

# --- path specifiers -----------------------------------------------------------------------------


def _set_path_specifier(kind: str, value: str) -> Callable[[Route], None]:
    def apply(r: Route) -> None:
        assert r.match is not None
        m = r.match
        m.prefix = m.path = m.path_separated_prefix = None
        m.safe_regex = m.connect_matcher = m.path_match_policy = None
        setattr(m, kind, value)

    return apply


def _path_kind(m: RouteMatch | None) -> tuple[str, str] | None:
    if m is None:
        return None
    for kind in ("path", "prefix", "path_separated_prefix"):
        value = getattr(m, kind)
        if value is not None:
            return kind, value
    return None


def _respecify(
    sources: tuple[str, ...], target: str
) -> Callable[[Snapshot, Route], Iterator[Edit]]:
    def edits(snap: Snapshot, r: Route) -> Iterator[Edit]:
        found = _path_kind(r.match)
        if found and found[0] in sources and found[1]:
            kind, value = found
            yield Edit(
                f".match.{kind}",
                f"{kind} {value!r} -> {target} {value!r}",
                _set_path_specifier(target, value),
            )

    return edits


def _case_insensitive_path(snap: Snapshot, r: Route) -> Iterator[Edit]:
    found = _path_kind(r.match)
    if (
        found
        and r.match is not None
        and r.match.case_sensitive is not False
        and has_ascii_letters(found[1])
    ):

        def apply(x: Route) -> None:
            assert x.match is not None
            x.match.case_sensitive = False

        yield Edit(".match.case_sensitive", f"{found[0]} {found[1]!r} made case-insensitive", apply)


# --- header and query matchers -------------------------------------------------------------------


def _string_value(sm: StringMatcher) -> tuple[str, str] | None:
    for kind in ("exact", "prefix", "suffix", "contains"):
        value = getattr(sm, kind)
        if value is not None:
            return kind, value
    if sm.safe_regex is not None:
        return "safe_regex", sm.safe_regex.regex
    return None


def _headers(r: Route, *, method: bool) -> Iterator[tuple[int, HeaderMatcher]]:
    for k, h in enumerate(r.match.headers if r.match else []):
        if (h.name.lower() == METHOD) == method:
            yield k, h


def _drop_at(field: str, k: int) -> Callable[[Route], None]:
    def apply(r: Route) -> None:
        assert r.match is not None
        del getattr(r.match, field)[k]

    return apply


def _edit_string_match(
    field: str, k: int, fn: Callable[[StringMatcher], None]
) -> Callable[[Route], None]:
    def apply(r: Route) -> None:
        assert r.match is not None
        sm = getattr(r.match, field)[k].string_match
        assert sm is not None
        fn(sm)

    return apply


def _altered(sm: StringMatcher) -> None:
    found = _string_value(sm)
    assert found is not None
    kind, value = found
    if kind == "safe_regex":
        sm.safe_regex = RegexMatcher(regex=f"(?:{value}){MUTANT}")
    else:
        setattr(sm, kind, value + MUTANT)


def _to_prefix(sm: StringMatcher) -> None:
    sm.prefix, sm.exact = sm.exact, None


def _ignore_case(sm: StringMatcher) -> None:
    sm.ignore_case = True


def _drop_matchers(field: str, *, method: bool) -> Callable[[Snapshot, Route], Iterator[Edit]]:
    def edits(snap: Snapshot, r: Route) -> Iterator[Edit]:
        items = (
            _headers(r, method=method)
            if field == "headers"
            else enumerate(r.match.query_parameters if r.match else [])
        )
        for k, h in items:
            yield Edit(
                f".match.{field}[{k}]", f"{field} matcher {h.name!r} dropped", _drop_at(field, k)
            )

    return edits


def _string_edits(
    field: str,
    applies: Callable[[StringMatcher], bool],
    fn: Callable[[StringMatcher], None],
    what: str,
) -> Callable[[Snapshot, Route], Iterator[Edit]]:
    def edits(snap: Snapshot, r: Route) -> Iterator[Edit]:
        items = (
            _headers(r, method=False)
            if field == "headers"
            else enumerate(r.match.query_parameters if r.match else [])
        )
        for k, h in items:
            if h.string_match is not None and applies(h.string_match):
                yield Edit(
                    f".match.{field}[{k}].string_match",
                    f"{field} matcher {h.name!r}: {what}",
                    _edit_string_match(field, k, fn),
                )

    return edits


def _has_value(sm: StringMatcher) -> bool:
    return _string_value(sm) is not None


def _exact(sm: StringMatcher) -> bool:
    return sm.exact is not None


def _case_sensitive_letters(sm: StringMatcher) -> bool:
    found = _string_value(sm)
    return (
        not sm.ignore_case
        and found is not None
        and found[0] != "safe_regex"
        and has_ascii_letters(found[1])
    )


def _case_insensitive_header(snap: Snapshot, r: Route) -> Iterator[Edit]:
    for k, h in enumerate(r.match.headers if r.match else []):
        if h.string_match is not None and _case_sensitive_letters(h.string_match):
            yield Edit(
                f".match.headers[{k}].string_match.ignore_case",
                f"header matcher {h.name!r} made case-insensitive",
                _edit_string_match("headers", k, _ignore_case),
            )


def _method_value(h: HeaderMatcher) -> str | None:
    if h.string_match is not None and h.string_match.exact is not None:
        return h.string_match.exact
    return h.exact_match


def _alter_method(snap: Snapshot, r: Route) -> Iterator[Edit]:
    for k, h in _headers(r, method=True):
        old = _method_value(h)
        if old is None:
            continue
        new = "POST" if old == "GET" else "GET"

        def apply(x: Route, k: int = k, new: str = new) -> None:
            assert x.match is not None
            x.match.headers[k].exact_match = None
            x.match.headers[k].string_match = StringMatcher(exact=new)

        yield Edit(f".match.headers[{k}]", f":method {old} -> {new}", apply)


def _fractional(snap: Snapshot, r: Route) -> Iterator[Edit]:
    if r.match is None or r.match.runtime_fraction is not None:
        return

    def apply(x: Route) -> None:
        assert x.match is not None
        x.match.runtime_fraction = RuntimeFractionalPercent(
            default_value=FractionalPercent(
                numerator=50, denominator=FractionalPercentDenominatorType.HUNDRED
            ),
            runtime_key="edge-verifier.mutant",
        )

    yield Edit(".match.runtime_fraction", "route takes only 50% of its requests", apply)


# --- order ---------------------------------------------------------------------------------------


def _swapped(k: int) -> Callable[[VirtualHost], None]:
    def apply(v: VirtualHost) -> None:
        v.routes[k], v.routes[k + 1] = v.routes[k + 1], v.routes[k]

    return apply


def _without(k: int) -> Callable[[VirtualHost], None]:
    def apply(v: VirtualHost) -> None:
        del v.routes[k]

    return apply


def _vhost_builder(
    snap: Snapshot, i: int, j: int, fn: Callable[[VirtualHost], None]
) -> Callable[[], Snapshot]:
    return lambda: with_vhost(snap, i, j, fn)


def _swap_sites(snap: Snapshot) -> Iterator[Site]:
    for i, j, vh in each_vhost(snap):
        base = vhost_path(snap.routes[i], vh)
        for k in range(len(vh.routes) - 1):
            if vh.routes[k] != vh.routes[k + 1]:
                yield Site(
                    f"{base}.routes[{k}]",
                    f"routes[{k}] and routes[{k + 1}] swapped",
                    _vhost_builder(snap, i, j, _swapped(k)),
                )


def _drop_sites(snap: Snapshot) -> Iterator[Site]:
    for i, j, vh in each_vhost(snap):
        base = vhost_path(snap.routes[i], vh)
        for k, r in enumerate(vh.routes):
            yield Site(
                f"{base}.routes[{k}]",
                f"route {r.name or k!r} dropped",
                _vhost_builder(snap, i, j, _without(k)),
            )


_on_routes = on_routes


OPERATORS: tuple[Operator, ...] = (
    Operator(
        "prefix-to-exact",
        "Path prefix (or segment prefix) match turned into an exact match: sub-paths stop "
        "matching. PathPrefix semantics (httproute-path-matching) should catch it.",
        _on_routes(_respecify(("prefix", "path_separated_prefix"), "path")),
        prove_route_local,
    ),
    Operator(
        "exact-to-prefix",
        "Exact path match turned into a plain prefix match: /foo also takes /foobar and "
        "/foo/x. Exact path semantics (httproute-path-matching) should catch it.",
        _on_routes(_respecify(("path",), "prefix")),
        prove_route_local,
    ),
    Operator(
        "drop-segment-boundary",
        "path_separated_prefix turned into a plain prefix: /foo then matches /foobar, which "
        "PathPrefix must not (element-wise prefix). httproute-path-matching should catch it.",
        _on_routes(_respecify(("path_separated_prefix",), "prefix")),
        prove_route_local,
    ),
    Operator(
        "case-insensitive-path",
        "Path match made case-insensitive (case_sensitive: false); Gateway API path matching "
        "is case-sensitive. Skipped for values without letters and regexes, where it is a "
        "no-op. httproute-path-matching should catch it.",
        _on_routes(_case_insensitive_path),
        prove_route_local,
    ),
    Operator(
        "drop-header-matcher",
        "One header matcher (not :method) removed: the route takes requests without that "
        "header. httproute-header-matching should catch it.",
        _on_routes(_drop_matchers("headers", method=False)),
        prove_route_local,
    ),
    Operator(
        "alter-header-value",
        "A header matcher's value changed: the intended requests miss the route. "
        "httproute-header-matching should catch it.",
        _on_routes(_string_edits("headers", _has_value, _altered, "value altered")),
        prove_route_local,
    ),
    Operator(
        "header-exact-to-prefix",
        "An exact header match turned into a prefix match: longer values match too. "
        "httproute-header-matching should catch it.",
        _on_routes(_string_edits("headers", _exact, _to_prefix, "exact -> prefix")),
        prove_route_local,
    ),
    Operator(
        "case-insensitive-header",
        "A header value match made case-insensitive (ignore_case); Gateway API header values "
        "match case-sensitively. Skipped where it is a no-op (no letters, regex). "
        "httproute-header-matching / httproute-method-matching should catch it. "
        "Equivalent on an upper-case `:method`: Envoy upper-cases methods.",
        _on_routes(_case_insensitive_header),
        prove_method_case,
    ),
    Operator(
        "drop-method-matcher",
        "The :method matcher removed: every method takes the route. "
        "httproute-method-matching should catch it.",
        _on_routes(_drop_matchers("headers", method=True)),
        prove_route_local,
    ),
    Operator(
        "alter-method-matcher",
        "The :method matcher's method changed (GET <-> POST). httproute-method-matching "
        "should catch it.",
        _on_routes(_alter_method),
        prove_route_local,
    ),
    Operator(
        "drop-query-matcher",
        "One query parameter matcher removed. httproute-query-param-matching should catch it.",
        _on_routes(_drop_matchers("query_parameters", method=False)),
        prove_route_local,
    ),
    Operator(
        "alter-query-value",
        "A query parameter matcher's value changed. httproute-query-param-matching should "
        "catch it.",
        _on_routes(_string_edits("query_parameters", _has_value, _altered, "value altered")),
        prove_route_local,
    ),
    Operator(
        "case-insensitive-query",
        "A query parameter value match made case-insensitive. "
        "httproute-query-param-matching should catch it.",
        _on_routes(
            _string_edits(
                "query_parameters", _case_sensitive_letters, _ignore_case, "made case-insensitive"
            )
        ),
        prove_route_local,
    ),
    Operator(
        "swap-adjacent-routes",
        "Two neighbouring routes of a virtual host swapped: the precedence order is broken. "
        "httproute-precedence should catch it. Equivalent when the two routes accept no common "
        "request (different exact paths, non-overlapping prefixes, different values of one "
        "header or query parameter, ...), have the same action, or one of them is shadowed by "
        "the routes before both.",
        _swap_sites,
        prove_swap,
    ),
    Operator(
        "drop-route",
        "A route removed: its requests fall through to later routes or 404. The owning "
        "feature's rule (or no-route-default-404 / httproute-precedence) should catch it. "
        "Equivalent when the route is shadowed by an earlier one (its match is included in an "
        "earlier, condition-free-enough match) or a later route with the same action takes "
        "all its requests and the routes in between take none of them.",
        _drop_sites,
        prove_drop_route,
    ),
    Operator(
        "fractional-route",
        "A route made to take only half of the requests it matches (runtime_fraction 50%): "
        "the rest fall through to later routes or 404, which no Gateway API route does. "
        "The owning feature's rule should catch it. Equivalent when dropping the route "
        "changes nothing.",
        _on_routes(_fractional),
        prove_route_local,
    ),
)
