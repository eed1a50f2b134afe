"""Decision lists in another order (verifier.semantics.decision_order) and the regex
normal forms of verifier.semantics.decisions: what lets a foreign encoding's hosts be
proven without witnesses is held to first-match evaluation itself."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from verifier.semantics import decision_order as order
from verifier.semantics import decisions as d

SEGMENTS = ["a", "ab", "b", "a.b"]


def _path() -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(SEGMENTS), min_size=0, max_size=3).map(
        lambda segs: "/" + "/".join(segs)
    ) | st.sampled_from(["/a/", "/ab/", "/a/b/"])


def _path_pred() -> st.SearchStrategy[d.PathPred]:
    literal = _path()
    return st.one_of(
        literal.map(lambda p: d.PathPred("exact", p)),
        literal.filter(lambda p: p != "/" and not p.endswith("/")).map(
            lambda p: d.PathPred("segment_prefix", p)
        ),
        literal.map(lambda p: d.PathPred("prefix", p)),
        literal.map(lambda p: d.PathPred("regex", p.replace(".", "\\.") + "[0-9a-z/]*")),
        literal.map(lambda p: d.PathPred("regex", p.replace(".", "\\.") + "x?")),
        st.sampled_from([d.PathPred("regex", "/(a|b)/.*"), d.PathPred("regex", "^/a.*")]),
    )


def _predicate() -> st.SearchStrategy[d.Predicate]:
    values = st.sampled_from(["1", "2"])
    return st.builds(
        d.Predicate,
        _path_pred(),
        st.sampled_from([None, "GET", "POST"]),
        st.one_of(st.just(()), values.map(lambda v: (d.ValuePred("x-v", "exact", v),))),
        st.one_of(st.just(()), values.map(lambda v: (d.ValuePred("q", "exact", v),))),
    )


def _view() -> st.SearchStrategy[d.View]:
    return st.builds(
        lambda path, method, header, query: d.View.of(
            path + (f"?q={query}" if query else ""),
            method,
            [("x-v", header)] if header else [],
        ),
        _path() | _path().map(lambda p: p + "x") | _path().map(lambda p: p + "/7"),
        st.sampled_from(["GET", "POST"]),
        st.sampled_from(["", "1", "2"]),
        st.sampled_from(["", "1", "2"]),
    )


@settings(max_examples=400, deadline=None)
@given(a=_predicate(), b=_predicate(), views=st.lists(_view(), min_size=1, max_size=8))
def test_disjoint_predicates_never_accept_one_request(
    a: d.Predicate, b: d.Predicate, views: list[d.View]
) -> None:
    if order.disjoint(a, b):
        assert not any(d.accepts(a, v) and d.accepts(b, v) for v in views)


def _entries() -> st.SearchStrategy[list[d.Entry]]:
    actions = st.sampled_from([d.Action(200), d.Action(503)])
    return st.lists(st.builds(d.Entry, _predicate(), actions), min_size=1, max_size=6, unique=True)


@settings(max_examples=300, deadline=None)
@given(entries=_entries(), data=st.data())
def test_equivalent_lists_give_every_request_the_same_action(
    entries: list[d.Entry], data: st.DataObject
) -> None:
    shuffled = data.draw(st.permutations(entries), label="other order")
    a, b = d.DecisionList(tuple(entries)), d.DecisionList(tuple(shuffled))
    if not order.equivalent(a, b):
        return
    for view in data.draw(st.lists(_view(), min_size=1, max_size=10), label="requests"):
        i, j = d.first_match(a, view), d.first_match(b, view)
        assert (i is None) == (j is None)
        if i is not None and j is not None:
            assert a.entries[i].action == b.entries[j].action


def test_a_swap_of_overlapping_entries_that_act_apart_is_not_equivalent() -> None:
    wide = d.Entry(d.Predicate(d.PathPred("segment_prefix", "/a")), d.Action(200))
    narrow = d.Entry(d.Predicate(d.PathPred("exact", "/a/b")), d.Action(503))
    other = d.Entry(d.Predicate(d.PathPred("exact", "/b")), d.Action(503))
    assert not order.equivalent(
        d.DecisionList((narrow, wide, other)), d.DecisionList((wide, narrow, other))
    )
    assert order.equivalent(
        d.DecisionList((narrow, wide, other)), d.DecisionList((other, narrow, wide))
    )


def test_regexes_another_translator_writes_are_stated_in_the_normal_form() -> None:
    assert d.path_pred("regex", "^/api/v1\\.json$") == d.PathPred("exact", "/api/v1.json")
    assert d.path_pred("regex", "/api(/.*)?") == d.PathPred("segment_prefix", "/api")
    assert d.path_pred("regex", "^/api(/.*)?$") == d.PathPred("segment_prefix", "/api")
    assert d.path_pred("regex", "/.*") == d.PathPred("prefix", "/")
    assert d.path_pred("regex", "/api.*") == d.PathPred("prefix", "/api")
    # An anchor inside, an escaped dollar, an alternation: not a literal.
    assert d.path_pred("regex", "/api$(/.*)?").kind == "regex"
    assert d.path_pred("regex", "/a\\$") == d.PathPred("exact", "/a$")
    assert d.path_pred("regex", "^/a|/b$").kind == "regex"
    assert d.value_pred("x", "regex", "^v1\\.2$") == d.ValuePred("x", "exact", "v1.2")
