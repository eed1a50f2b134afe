"""Route-match algebra for the mutation equivalence proofs: disjointness and subsumption.

Everything here answers "provably yes" or "don't know" (False), never a guess. It is a
deliberately small, independent model of Envoy's route matching (it shares no decision code
with the checker or the translator, so it cannot inherit their bugs):

- A route's path condition is a set of strings (the ``:path`` without query and fragment,
  after the same normalisation for every route, since all path matchers of one RouteConfiguration
  see the same sanitised path). ``path: p`` is {p}; ``prefix: p`` is every string starting with
  p; ``path_separated_prefix: p`` is {p} plus every string starting with ``p/``. With
  ``case_sensitive: false`` strings are compared after ASCII lower-casing (absl's
  ``EqualsIgnoreCase``/``StartsWithIgnoreCase``). A ``safe_regex`` must match the whole path,
  so its literal prefixes bound what it accepts (an over-approximation, used only where that
  is safe); ``connect_matcher`` and ``path_match_policy`` are opaque.
- A header matcher sees one string per request: all values of the header joined with ``,``
  (Envoy's ``getAllOfHeaderAsString``), or nothing when absent (``""`` with
  ``treat_missing_header_as_empty``). Names are case-insensitive.
- A query-parameter matcher sees the first value of the parameter (Envoy's ``getFirstValue``).
- Only ``exact`` and ``prefix`` string matchers are modelled (with ``ignore_case``); suffix,
  contains, regex, range and present matches are opaque, and so is ``invert_match``.
- A route matches when all its conditions hold; the first matching route of a virtual host wins.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Final

from envoy_data_plane.envoy.config.route.v3 import (
    HeaderMatcher,
    QueryParameterMatcher,
    Route,
    RouteMatch,
)
from envoy_data_plane.envoy.type.matcher.v3 import StringMatcher

from verifier.mutate.regex_prefixes import (
    regex_any_after,
    regex_literal,
    regex_prefixes,
    regex_segment_prefix,
)

# --- string sets ---------------------------------------------------------------------------------

EXACT: Final = "exact"
PREFIX: Final = "prefix"

_UPPER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_lower(s: str) -> str:
    """Envoy's case folding (``absl::AsciiStrToLower``): ASCII letters only."""
    return s.translate(_UPPER)


def has_ascii_letters(s: str) -> bool:
    """Whether case-insensitive matching of ``s`` can differ from case-sensitive matching."""
    return any(c.isascii() and c.isalpha() for c in s)


@dataclass(frozen=True)
class StrSet:
    """A union of atoms (``exact`` value or ``prefix``), ASCII-case-folded when ``fold``."""

    atoms: tuple[tuple[str, str], ...]
    fold: bool = False

    @staticmethod
    def of(atoms: tuple[tuple[str, str], ...], fold: bool) -> StrSet:
        # Folding a set whose values have no letters changes nothing: normalise it away.
        return StrSet(atoms, fold and any(has_ascii_letters(v) for _, v in atoms))

    def universal(self) -> bool:
        return (PREFIX, "") in self.atoms


def _atoms_overlap(a: tuple[str, str], b: tuple[str, str]) -> bool:
    (ka, va), (kb, vb) = a, b
    if ka == EXACT and kb == EXACT:
        return va == vb
    if ka == EXACT:
        return va.startswith(vb)
    if kb == EXACT:
        return vb.startswith(va)
    return va.startswith(vb) or vb.startswith(va)


def _atom_within(inner: tuple[str, str], outer: tuple[str, str]) -> bool:
    (ki, vi), (ko, vo) = inner, outer
    if ko == EXACT:
        return ki == EXACT and vi == vo
    return vi.startswith(vo)


def _folded(s: StrSet, fold: bool) -> tuple[tuple[str, str], ...]:
    return tuple((k, ascii_lower(v)) for k, v in s.atoms) if fold else s.atoms


def strings_disjoint(a: StrSet, b: StrSet) -> bool:
    """No string is in both (comparing folded forms when either side folds is sound)."""
    fold = a.fold or b.fold
    return not any(_atoms_overlap(x, y) for x in _folded(a, fold) for y in _folded(b, fold))


def strings_subset(inner: StrSet, outer: StrSet) -> bool:
    """Every string of ``inner`` is in ``outer`` (each inner atom inside one outer atom)."""
    if outer.universal():
        return True
    fold = outer.fold
    if inner.fold and not outer.fold:
        # A case-folded set fits only in a set closed under case changes: one without letters.
        if any(has_ascii_letters(v) for _, v in outer.atoms):
            return False
        fold = True
    outs = _folded(outer, fold)
    return all(any(_atom_within(i, o) for o in outs) for i in _folded(inner, fold))


def string_matcher_set(sm: StringMatcher) -> StrSet | None:
    if sm.safe_regex is not None:  # ignore_case has no effect on a regex
        literal = regex_literal(sm.safe_regex.regex)
        if literal is not None:
            return StrSet.of(((EXACT, literal),), False)
        head = regex_any_after(sm.safe_regex.regex)
        return None if head is None else StrSet.of(((PREFIX, head),), False)
    if sm.exact is not None:
        return StrSet.of(((EXACT, sm.exact),), sm.ignore_case)
    if sm.prefix is not None:
        return StrSet.of(((PREFIX, sm.prefix),), sm.ignore_case)
    return None


def path_set(match: RouteMatch) -> StrSet | None:
    """Exactly the paths a RouteMatch's path specifier accepts, or None when opaque."""
    fold = match.case_sensitive is False
    if match.path is not None:
        return StrSet.of(((EXACT, match.path),), fold)
    if match.prefix is not None:
        return StrSet.of(((PREFIX, match.prefix),), fold)
    p = match.path_separated_prefix
    if p is not None:
        return StrSet.of(((EXACT, p), (PREFIX, p + "/")), fold)
    if match.safe_regex is not None:  # case_sensitive has no effect on a regex
        regex = match.safe_regex.regex
        literal = regex_literal(regex)
        if literal is not None:
            return StrSet.of(((EXACT, literal),), False)
        seg = regex_segment_prefix(regex)
        if seg is not None:
            return StrSet.of(((EXACT, seg), (PREFIX, seg + "/")), False)
        head = regex_any_after(regex)
        if head is not None:
            return StrSet.of(((PREFIX, head),), False)
    return None


def path_superset(match: RouteMatch) -> StrSet | None:
    """A set containing every path the match accepts: exact, or a regex's literal prefixes.

    Only for the side of a comparison where more is safe (disjointness, the narrower match).
    """
    if match.safe_regex is not None:
        exact = path_set(match)
        if exact is not None:
            return exact
        prefixes = regex_prefixes(match.safe_regex.regex)  # case_sensitive: ignored for regexes
        return None if prefixes is None else StrSet(tuple((PREFIX, p) for p in prefixes))
    return path_set(match)


# --- header and query conditions -----------------------------------------------------------------


@dataclass(frozen=True)
class Cond:
    """One header or query condition: the strings it accepts (None: opaque)."""

    name: str
    values: StrSet | None
    invert: bool = False
    missing_as_empty: bool = False
    present: bool = False  # a plain "is present" query match


def header_cond(h: HeaderMatcher) -> Cond:
    values: StrSet | None = None
    if h.string_match is not None:
        values = string_matcher_set(h.string_match)
    elif h.exact_match is not None:
        values = StrSet.of(((EXACT, h.exact_match),), False)
    elif h.prefix_match is not None:
        values = StrSet.of(((PREFIX, h.prefix_match),), False)
    return Cond(ascii_lower(h.name), values, h.invert_match, h.treat_missing_header_as_empty)


def query_cond(q: QueryParameterMatcher) -> Cond:
    if q.string_match is not None:
        return Cond(q.name, string_matcher_set(q.string_match))
    return Cond(q.name, None, present=q.present_match is True)


def conds_disjoint(a: Cond, b: Cond) -> bool:
    """No request satisfies both: same input string, disjoint accepted sets, no inversion."""
    if a.name != b.name or a.invert or b.invert or a.values is None or b.values is None:
        return False
    return strings_disjoint(a.values, b.values)


def cond_implies(b: Cond, a: Cond) -> bool:
    """Every request satisfying ``b`` satisfies ``a``."""
    if a.name != b.name or a.invert or b.invert:
        return False
    if a.present:
        return b.present or b.values is not None  # any value match needs the parameter
    if a.values is None or b.values is None:
        return False
    if b.missing_as_empty and not a.missing_as_empty:
        return False
    return strings_subset(b.values, a.values)


# --- whole route matches -------------------------------------------------------------------------

# RouteMatch fields this model understands; any other set field makes a match opaque as the
# *wider* side of a subsumption (it may reject requests we would think it accepts).
_MODELLED: Final = (
    "prefix",
    "path",
    "path_separated_prefix",
    "safe_regex",
    "connect_matcher",
    "path_match_policy",
    "case_sensitive",
    "headers",
    "query_parameters",
)


def only_modelled_conditions(m: RouteMatch) -> bool:
    rest = copy.copy(m)
    for name in _MODELLED:
        setattr(rest, name, [] if name in ("headers", "query_parameters") else None)
    return rest == RouteMatch() and not m._unknown_fields


def matches_disjoint(a: RouteMatch | None, b: RouteMatch | None) -> bool:
    """Provably no request matches both."""
    if a is None or b is None:
        return False
    pa, pb = path_superset(a), path_superset(b)
    if pa is not None and pb is not None and strings_disjoint(pa, pb):
        return True
    for ha in a.headers:
        for hb in b.headers:
            if conds_disjoint(header_cond(ha), header_cond(hb)):
                return True
    for qa in a.query_parameters:
        for qb in b.query_parameters:
            if conds_disjoint(query_cond(qa), query_cond(qb)):
                return True
    return False


def subsumes(wide: RouteMatch | None, narrow: RouteMatch | None) -> bool:
    """Provably every request matching ``narrow`` also matches ``wide``."""
    if wide is None or narrow is None or not only_modelled_conditions(wide):
        return False
    pw = path_set(wide)
    if pw is None:
        return False
    if not pw.universal():
        pn = path_superset(narrow)
        if pn is None or not strings_subset(pn, pw):
            return False
    n_headers = [header_cond(h) for h in narrow.headers]
    if not all(any(cond_implies(n, header_cond(w)) for n in n_headers) for w in wide.headers):
        return False
    n_query = [query_cond(q) for q in narrow.query_parameters]
    return all(any(cond_implies(n, query_cond(w)) for n in n_query) for w in wide.query_parameters)


# --- canonical forms -----------------------------------------------------------------------------


def _canonical_string_matcher(sm: StringMatcher) -> StringMatcher:
    out = copy.deepcopy(sm)
    value = next((v for v in (sm.exact, sm.prefix, sm.suffix, sm.contains) if v is not None), None)
    if sm.safe_regex is not None or (value is not None and not has_ascii_letters(value)):
        out.ignore_case = False  # no effect on regexes, nor on values without letters
    return out


def canonical_match(m: RouteMatch) -> RouteMatch:
    """A RouteMatch accepting exactly the same requests, in a normal form for comparison.

    Folds ``case_sensitive``/``ignore_case`` flags that have no effect, lower-cases header
    names, and sorts and de-duplicates header and query conditions (they are a conjunction).
    """
    out = copy.deepcopy(m)
    value = next((v for v in (m.path, m.prefix, m.path_separated_prefix) if v is not None), None)
    no_effect = m.safe_regex is not None or (value is not None and not has_ascii_letters(value))
    if out.case_sensitive is True or no_effect:
        out.case_sensitive = None  # default true; ignored for regex and letterless values
    headers: list[HeaderMatcher] = []
    for h in out.headers:
        h.name = ascii_lower(h.name)
        if h.string_match is not None:
            h.string_match = _canonical_string_matcher(h.string_match)
        if h not in headers:
            headers.append(h)
    out.headers = sorted(headers, key=bytes)
    query: list[QueryParameterMatcher] = []
    for q in out.query_parameters:
        if q.string_match is not None:
            q.string_match = _canonical_string_matcher(q.string_match)
        if q not in query:
            query.append(q)
    out.query_parameters = sorted(query, key=bytes)
    return out


def canonical_route(r: Route) -> Route:
    out = copy.copy(r)
    if r.match is not None:
        out.match = canonical_match(r.match)
    return out


def action_of(r: Route, *, names_observable: bool) -> Route:
    """The route without its match: what happens once it is selected.

    Name, metadata and stat prefix are not seen by requests unless a header formatter can
    read them (``%ROUTE_NAME%``, ``%METADATA(ROUTE:...)%``), which ``names_observable`` says.
    """
    out = copy.copy(r)
    out.match = None
    if not names_observable:
        out.name = ""
        out.metadata = None
        out.stat_prefix = ""
    return out


def same_action(a: Route, b: Route, *, names_observable: bool) -> bool:
    return action_of(a, names_observable=names_observable) == action_of(
        b, names_observable=names_observable
    )


# --- reachability within a virtual host ----------------------------------------------------------


def shadowed(routes: list[Route], i: int) -> bool:
    """Route ``i`` is never selected: an earlier route accepts every request it accepts."""
    return any(subsumes(routes[k].match, routes[i].match) for k in range(i))


def covered_later(routes: list[Route], i: int, *, names_observable: bool) -> bool:
    """Without route ``i``, every request it would take gets the same action from later routes.

    Holds when a later route with the same action accepts all of route ``i``'s requests and
    every route in between either accepts none of them or has the same action too.
    """
    me = routes[i]
    for j in range(i + 1, len(routes)):
        other = routes[j]
        if same_action(me, other, names_observable=names_observable):
            if subsumes(other.match, me.match):
                return True
        elif not matches_disjoint(me.match, other.match):
            return False
    return False


def droppable(routes: list[Route], i: int, *, names_observable: bool) -> bool:
    """Removing route ``i`` changes no request's outcome."""
    return shadowed(routes, i) or covered_later(routes, i, names_observable=names_observable)
