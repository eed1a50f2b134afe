"""Two decision lists that order the same entries differently, yet answer alike.

Another translator writes a virtual host's routes in another order than the spec's
precedence (by kind, by name, as its own data structures hold them). A first-match
list decides a request by its first accepting entry, so swapping two entries changes
an answer only for a request both accept, and only when their actions differ. Two
lists holding the same entries are equivalent when every pair the two orders rank
differently is *disjoint* (no request accepts both) or acts alike: then each
request's first accepting entry is the same on both sides, or one with the same
action. No witness is needed for such a host.

Disjointness is proven from the predicates alone, conservatively: paths whose first
segments differ, exact paths outside another's prefix, methods or exact header and
query values that differ, a regex's literal head that no path of the other can start
with. Anything else counts as overlapping (the witnesses are asked then).
"""

from __future__ import annotations

from collections.abc import Sequence

from verifier.semantics.decisions import (
    DecisionList,
    Entry,
    PathPred,
    Predicate,
    ValuePred,
    accepts_path,
)
from verifier.semantics.path_match import first_segment

# Characters that stand for themselves in RE2 outside a class (the rest is syntax).
_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_~/%:@!,;=' -")
_QUANTIFIERS = frozenset("?*+{")


def regex_head(pattern: str) -> str:
    """A string every RE2 full match of ``pattern`` starts with ("" when unsure): its
    leading plain characters, less one a quantifier follows; nothing where an
    alternation may start elsewhere."""
    if "|" in pattern:
        return ""
    body = pattern[1:] if pattern.startswith("^") else pattern
    n = 0
    while n < len(body) and body[n] in _PLAIN:
        n += 1
    if n < len(body) and body[n] in _QUANTIFIERS:
        n -= 1
    return body[: max(n, 0)]


def _key(p: PathPred) -> str | None:
    """The first path segment every path ``p`` accepts has, if one does."""
    if p.kind in ("exact", "segment_prefix"):
        return first_segment(p.value) if p.value.startswith("/") else None
    head = p.value if p.kind == "prefix" else regex_head(p.value)
    if head.startswith("/") and "/" in head[1:]:
        return first_segment(head)
    return None


def _starts(p: PathPred) -> tuple[str, ...] | None:
    """Strings one of which every path ``p`` accepts starts with, or equals; None for an
    exact path (its one value is tested instead)."""
    if p.kind == "exact":
        return None
    if p.kind == "segment_prefix":
        return (p.value + "/", p.value)
    if p.kind == "prefix":
        return (p.value,)
    return (regex_head(p.value),)


def _paths_disjoint(a: PathPred, b: PathPred) -> bool:
    if a.kind == "exact" and b.kind == "exact":
        return a.value != b.value
    if a.kind == "exact" or b.kind == "exact":
        exact, other = (a, b) if a.kind == "exact" else (b, a)
        return not accepts_path(other, exact.value)
    heads_a, heads_b = _starts(a), _starts(b)
    assert heads_a is not None and heads_b is not None
    if a.kind == "segment_prefix" and b.kind == "segment_prefix":
        return not (
            a.value == b.value
            or a.value.startswith(b.value + "/")
            or b.value.startswith(a.value + "/")
        )
    # Two sets of strings, each "starts with one of these heads" (a segment prefix: or
    # equals its value): they can meet only where one head extends another.
    return not any(x.startswith(y) or y.startswith(x) for x in heads_a for y in heads_b)


def _values_disjoint(a: tuple[ValuePred, ...], b: tuple[ValuePred, ...]) -> bool:
    exact = {v.name: v.value for v in a if v.kind == "exact"}
    return any(v.kind == "exact" and exact.get(v.name, v.value) != v.value for v in b)


def disjoint(a: Predicate, b: Predicate) -> bool:
    """Whether no request is accepted by both (False: perhaps one is)."""
    if a.method is not None and b.method is not None and a.method != b.method:
        return True
    if _values_disjoint(a.headers, b.headers) or _values_disjoint(a.query, b.query):
        return True
    return _paths_disjoint(a.path, b.path)


def _swaps_harmless(first: Entry, then: Entry) -> bool:
    return first.action == then.action or disjoint(first.predicate, then.predicate)


def equivalent(a: DecisionList, b: DecisionList) -> bool:
    """Whether ``a`` and ``b`` hold the same entries, each pair they order differently
    disjoint or acting alike (module docstring): the same answer to every request."""
    if not (a.comparable and b.comparable) or len(a.entries) != len(b.entries):
        return False
    if a.entries == b.entries:
        return True
    where = {e: i for i, e in enumerate(b.entries)}
    if len(where) != len(b.entries) or any(e not in where for e in a.entries):
        return False  # other entries, or an entry twice
    at = [where[e] for e in a.entries]  # each entry of ``a``'s place in ``b`` (hashed once)
    # Entries under different first segments never meet: only pairs in one group, or
    # with an entry no segment bounds, are compared.
    groups: dict[str | None, list[int]] = {}
    for i, e in enumerate(a.entries):
        key = _key(e.predicate.path)
        earlier: Sequence[int] = (
            [x for xs in groups.values() for x in xs]
            if key is None
            else [*groups.get(key, ()), *groups.get(None, ())]
        )
        for x in earlier:
            if at[x] > at[i] and not _swaps_harmless(a.entries[x], e):
                return False
        groups.setdefault(key, []).append(i)
    return True
