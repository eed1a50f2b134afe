"""One ``RouteMatch``, compiled once, judged against a request as Envoy 1.40 does.

``RouteEntryImplBase::matchRoute`` plus the path matcher of each route type. Every
matcher is built in ``__init__`` (lower-cased names, compiled RE2) so a request only
pays for comparisons.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from verifier.errors import clip
from verifier.semantics.envoy.paths import first_query_values
from verifier.semantics.envoy.strings import (
    Match,
    ModelError,
    ascii_lower,
    compile_regex,
    describe_string_matcher,
    string_matcher,
)
from verifier.semantics.request import Caveat, Headers, Request
from verifier.xds import read
from verifier.xds.enums import FractionalPercentDenominatorType

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.route.v3 import (
        HeaderMatcher,
        QueryParameterMatcher,
        RouteMatch,
    )
    from envoy_data_plane.envoy.type.v3 import FractionalPercent

# FractionalPercent.DenominatorType: HUNDRED, TEN_THOUSAND, MILLION.
_D = FractionalPercentDenominatorType
DENOMINATORS: dict[int, int] = {_D.HUNDRED: 100, _D.TEN_THOUSAND: 10_000, _D.MILLION: 1_000_000}


def parts_per_million(fraction: FractionalPercent | None) -> int:
    """A FractionalPercent as parts per million, capped at 100%."""
    if fraction is None:
        return 1_000_000
    denominator = DENOMINATORS.get(int(fraction.denominator), 100)
    return min(1_000_000, fraction.numerator * (1_000_000 // denominator))


@dataclass
class MatchContext:
    """The request as the router sees it, after the HCM's path and host handling."""

    path: str  # :path with query, after normalization
    path_for_match: str  # path without query (and without ;params if configured)
    headers: dict[str, str]  # lower-cased name -> values joined by "," (incl. pseudo-headers)
    # Each value of a header received several times: Envoy 1.40 matches a value
    # matcher against each of them (checked: exact "first" matches the two
    # headers `x-dup: first` and `x-dup: second`, not one `x-dup: first,second`).
    values: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _query: dict[str, str] | None = field(default=None, repr=False)

    @property
    def query(self) -> dict[str, str]:
        if self._query is None:
            q = self.path.split("?", 1)[1] if "?" in self.path else ""
            self._query = first_query_values(q.split("#", 1)[0])
        return self._query


def router_view(
    request: Request,
    host: str,
    path: str,
    path_for_match: str,
    headers: Headers | None = None,
    set_by_hcm: Mapping[str, str] | None = None,
) -> MatchContext:
    """The request as the router matches it: its headers but Host (``headers``: as
    the HCM left them; by default the client's), joined by "," per name, the headers
    the HCM set (``set_by_hcm``: x-forwarded-proto, :scheme, x-envoy-internal) and
    the pseudo-headers for ``host`` and ``path`` (after the HCM's host and path
    handling)."""
    joined: dict[str, list[str]] = {}
    for name, values in request.headers if headers is None else headers:
        if name != "host":
            joined.setdefault(name, []).extend(values)
    for name, value in (set_by_hcm or {}).items():
        joined[name] = [value]
    view = {k: ",".join(v) for k, v in joined.items()}
    view.update(
        {
            # The client upper-cases the method (aiohttp, as the live pass
            # sends it; Envoy 1.40's codec answers a raw `put` with 400).
            ":method": request.method.upper(),
            ":path": path,
            ":authority": host,
            ":scheme": view.pop(":scheme", request.scheme.lower()),
        }
    )
    return MatchContext(path, path_for_match, view, {k: tuple(v) for k, v in joined.items()})


Check = Callable[[MatchContext], bool]

# RouteMatch conditions on what a request of ours does not say (TLS session details,
# other filters' metadata and state, cookies are not modelled).
ASSUMED_CONDITIONS = ("tls_context", "dynamic_metadata", "filter_state", "cookies")
GRPC_CONTENT_TYPE = "application/grpc"


def _grpc(ctx: MatchContext) -> bool:
    """RouteMatch.grpc: "If specified, only gRPC requests will be matched. The router
    will check that the content-type header has a application/grpc or one of the
    various application/grpc+ values." Grpc::Common::hasGrpcContentType: "Content
    type is gRPC if it is exactly "application/grpc" or starts with
    "application/grpc+". Specifically, something like application/grpc-web is not
    gRPC." Case-sensitive (checked on Envoy 1.40: "APPLICATION/GRPC" does not match)."""
    value = ctx.headers.get("content-type", "")
    return value == GRPC_CONTENT_TYPE or value.startswith(GRPC_CONTENT_TYPE + "+")


def _header_check(m: HeaderMatcher) -> tuple[Check, str]:
    """HeaderUtility::matchHeaders, per HeaderMatcher form (checked on Envoy 1.40).

    A missing header fails every value matcher, inverted or not, unless
    ``treat_missing_header_as_empty``; ``present_match`` is judged on presence and
    ``invert_match`` flips it. A header received several times matches when
    any of its values does.
    A legacy ``exact_match`` of "" matches any value.
    """
    name = m.name.lower()
    invert = bool(m.invert_match)
    kind, value = read.one_of(m, "header_match_specifier")
    if kind == "present_match" or not kind:
        want = True if not kind else bool(value)

        def present(ctx: MatchContext) -> bool:
            return ((name in ctx.headers) == want) != invert

        return present, f"header {name} {'present' if want else 'absent'}" + (
            " (inverted)" if invert else ""
        )
    test: Match
    if kind == "string_match":
        test = string_matcher(value)
        what = describe_string_matcher(value)
    elif kind == "safe_regex_match":
        test = compile_regex(value.regex).matches
        what = f"safe_regex {clip(repr(value.regex))}"
    elif kind == "range_match":
        start, end = value.start, value.end
        test = lambda v: v.lstrip("+-").isdigit() and start <= int(v) < end  # noqa: E731
        what = f"range [{start},{end})"
    else:
        expected = str(value)
        legacy: dict[str, Match] = {
            "exact_match": lambda v: not expected or v == expected,
            "prefix_match": lambda v: v.startswith(expected),
            "suffix_match": lambda v: v.endswith(expected),
            "contains_match": lambda v: expected in v,
        }
        test = legacy[kind]
        what = f"{kind} {expected!r}"
    missing_as_empty = bool(m.treat_missing_header_as_empty)

    def check(ctx: MatchContext) -> bool:
        got = ctx.headers.get(name)
        if got is None:
            if not missing_as_empty:
                return False
            got = ""
        values = ctx.values.get(name, (got,))
        return any(test(v) for v in values) != invert

    return check, f"header {name} {what}" + (" (inverted)" if invert else "")


def _query_check(m: QueryParameterMatcher) -> tuple[Check, str]:
    name = m.name
    if m.string_match is not None:
        test = string_matcher(m.string_match)
        what = describe_string_matcher(m.string_match)

        def check(ctx: MatchContext) -> bool:
            got = ctx.query.get(name)
            return got is not None and test(got)

        return check, f"query {name} {what}"
    want = m.present_match if m.present_match is not None else True

    def present(ctx: MatchContext) -> bool:
        return (name in ctx.query) == want

    return present, f"query {name} {'present' if want else 'absent'}"


class CompiledMatch:
    """A route's match, as cheap predicates plus what the path index needs."""

    def __init__(self, match: RouteMatch) -> None:
        self.notes: list[str] = []
        kind, value = read.one_of(match, "path_specifier")
        self.kind = kind or "none"
        self.value = value.regex if kind == "safe_regex" else value
        self.case_sensitive = match.case_sensitive is not False
        self.never = False
        # Parts per million of matching requests when below 100% (runtime_fraction).
        self.fraction: int | None = None
        self.path_check = self._path_check(kind, value)
        self.checks: list[tuple[Check, str]] = []
        self._runtime(match)
        self.checks += [_header_check(h) for h in match.headers]
        self.checks += [_query_check(q) for q in match.query_parameters]
        if read.is_set(match.grpc):  # an empty message is falsy, yet set
            self.checks.append((_grpc, "gRPC (content-type application/grpc)"))
        # Conditions on what a request of ours does not carry: taken to hold, and an
        # answer this route gives rests on that (its caveats).
        self.assumed: list[Caveat] = [
            Caveat(f"route match on {extra}", "not modelled: taken to match")
            for extra in ASSUMED_CONDITIONS
            if read.is_set(getattr(match, extra))
        ]
        # Header names a check reads, for answers that depend on what the HCM sets.
        self.reads = frozenset(h.name.lower() for h in match.headers)

    def _path_check(self, kind: str, value: object) -> Callable[[str], bool]:
        if kind == "safe_regex":
            return compile_regex(str(self.value)).matches
        if kind == "connect_matcher":
            self.notes.append("connect_matcher matches only CONNECT requests")
            self.never = True
            return lambda p: False
        if kind == "path_match_policy":
            self.notes.append("path_match_policy (URI templates) not modelled; never matches")
            self.never = True
            return lambda p: False
        if kind not in ("prefix", "path", "path_separated_prefix"):
            raise ModelError("RouteMatch without a path specifier")
        expected = str(value)
        fold = not self.case_sensitive
        if fold:
            expected = ascii_lower(expected)
        if kind == "prefix":
            if fold:
                return lambda p: p.lower().startswith(expected)
            return lambda p: p.startswith(expected)
        if kind == "path":
            if fold:
                return lambda p: p.lower() == expected
            return lambda p: p == expected
        size = len(expected)

        # path_separated_prefix: "the prefix must match ... and the path must be
        # either exactly the prefix or the prefix followed by /" (query excluded).
        def separated(p: str) -> bool:
            head = p[:size].lower() if fold else p[:size]
            return head == expected and (len(p) == size or p[size] == "/")

        return separated

    def _runtime(self, match: RouteMatch) -> None:
        """RuntimeFractionalPercent: "Runtime key to get value for comparison. This
        value is used if defined", else ``default_value``. A share strictly between 0
        and 100% is answered both ways (the model gives each answer), so a runtime
        layer holding the key changes only how often each comes; at 0% or 100% it
        would change the answer itself: the answer rests on the default (a caveat
        that decides)."""
        fraction = match.runtime_fraction
        self.runtime: Caveat | None = None
        self.dormant = False
        if fraction is None:
            return
        ppm = parts_per_million(fraction.default_value)
        key = fraction.runtime_key or ""
        share = f"runtime_fraction {ppm / 10_000:g}%"
        # Off by default, yet a runtime layer may turn it on: a request it would take
        # gets its answer from later routes on that assumption (RouteTable.dormant).
        self.dormant = bool(key) and ppm == 0 and not self.never
        if ppm == 0:
            self.never = True
            self.notes.append("runtime_fraction is 0%: never matches")
        elif ppm < 1_000_000:
            self.fraction = ppm
            self.notes.append(
                f"{share}: matches only a share of requests; the rest go on to later routes"
            )
        if key:
            decides = ppm in (0, 1_000_000)
            self.runtime = Caveat(
                f"{share} with runtime key {key!r}",
                "taken at its default_value (a runtime layer holding the key overrides it)"
                if decides
                else "both answers given; a runtime layer holding the key changes how often",
                decides=decides,
            )

    def matches(self, ctx: MatchContext) -> bool:
        if self.never or not self.path_check(ctx.path_for_match):
            return False
        return all(check(ctx) for check, _ in self.checks)

    def would_match(self, ctx: MatchContext) -> bool:
        """Whether a ``dormant`` route would take the request if its runtime key
        turned it on."""
        return self.path_check(ctx.path_for_match) and all(check(ctx) for check, _ in self.checks)

    def why_not(self, ctx: MatchContext) -> str:
        if self.never:
            return "; ".join(self.notes)
        if not self.path_check(ctx.path_for_match):
            case = "" if self.case_sensitive else " (case-insensitive)"
            return f"path {ctx.path_for_match!r} does not match {self.kind} {self.value!r}{case}"
        for check, what in self.checks:
            if not check(ctx):
                return f"{what} does not match"
        return "matches"

    def describe(self) -> str:
        parts = [f"{self.kind} {self.value!r}"]
        parts += [what for _, what in self.checks]
        if self.fraction is not None:
            parts.append(f"runtime_fraction {self.fraction / 10_000:g}% of these requests")
        return ", ".join(parts)
