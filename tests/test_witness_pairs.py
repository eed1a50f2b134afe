"""Overlap witnesses: which pairs of matches are tried, and the request built for a pair."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import re2
from conftest import edge_scenarios, load_scenario

from verifier.gatewayapi import model as m
from verifier.semantics import witness as wt
from verifier.semantics import witness_pairs as wp
from verifier.semantics.request import wire_problem
from verifier.semantics.spec.model import DEFAULT_CONTROLLER


def _served(path_type: str, value: str) -> wp.Served:
    route: Any = object()  # distinct route and rule: every pair of two is a candidate
    match = m.RouteMatch(m.PathMatch(path_type, value), (), (), None)
    return wp.Served(route, route, 0, match)


def _paired(a: wp.Served, b: wp.Served) -> bool:
    return any({x, y} == {a, b} for x, y in wp.overlapping_pairs([a, b]))


@pytest.mark.parametrize(
    ("pattern", "other", "paired"),
    [
        # A regex that spells its first segment only meets matches under it...
        ("/r5/re4/[0-9]+", ("PathPrefix", "/r5"), True),
        ("/r5/re4/[0-9]+", ("PathPrefix", "/r6"), False),
        ("/r5/re4/[0-9]+", ("Exact", "/r6/re4/1"), False),
        # ...and root matches, which every path may satisfy.
        ("/r5/re4/[0-9]+", ("PathPrefix", "/"), True),
        # Anything that leaves the first segment open pairs with everything.
        ("/r5[0-9]/x", ("PathPrefix", "/r6"), True),
        ("/r5+/x", ("PathPrefix", "/r6"), True),
        ("(?i)/r5/x", ("PathPrefix", "/R5"), True),
        ("/r5/x|/r6/y", ("PathPrefix", "/r6"), True),
        ("^/r5/x", ("PathPrefix", "/r6"), False),  # under a full match "^" says nothing
        ("^/r5/x", ("PathPrefix", "/r5"), True),
    ],
)
def test_regexes_pair_only_where_a_path_could_satisfy_both(
    pattern: str, other: tuple[str, str], paired: bool
) -> None:
    assert _paired(_served("RegularExpression", pattern), _served(*other)) is paired


def test_a_regex_and_a_prefix_share_a_request_both_accept() -> None:
    regex = m.PathMatch("RegularExpression", "/r5/re4/[a-z]+")
    prefix = m.PathMatch("PathPrefix", "/r5/re4")
    a = m.RouteMatch(regex, (), (), None)
    b = m.RouteMatch(prefix, (), (), None)
    req = wp.pair_request(a, b, "h.example", 80, "http")
    assert req is not None
    assert re2.fullmatch(regex.value, req.path)
    assert req.path.startswith("/r5/re4/")


def test_an_invalid_regex_yields_no_pair_request() -> None:
    a = m.RouteMatch(m.PathMatch("RegularExpression", "/r5/(["), (), (), None)
    b = m.RouteMatch(m.PathMatch("PathPrefix", "/r5"), (), (), None)
    assert wp.pair_request(a, b, "h.example", 80, "http") is None


@pytest.mark.parametrize(
    ("pattern", "sample"),
    [
        # A raw é or space cannot be in a request target: the witness carries
        # what a client sends, so both models judge the same bytes Envoy sees.
        ("/caf[é]", "/caf%C3%A9"),
        ("/a\\sb", "/a%20b"),
        ("/a\\?b", "/a%3Fb"),
        ("/plain/[0-9]+", "/plain/0"),
    ],
)
def test_regex_path_samples_are_sent_percent_encoded(pattern: str, sample: str) -> None:
    variants = dict(
        (note, path) for path, note in wt.path_variants(m.PathMatch("RegularExpression", pattern))
    )
    assert variants["regex sample"] == sample


def test_header_samples_drop_what_the_codec_strips() -> None:
    match = m.RouteMatch(
        m.PathMatch("PathPrefix", "/"),
        (m.ValueMatch("RegularExpression", "x-a", "\\s+v\\s"),),
        (),
        None,
    )
    ((name, value),) = wt._base_headers(match)
    assert (name, value) == ("x-a", "v")


@pytest.mark.parametrize("scenario", edge_scenarios(), ids=lambda p: p.name)
def test_every_witness_can_be_sent(scenario: Path, repo_cwd: Path) -> None:
    res, _graph = load_scenario(scenario)
    unsendable = [
        (w.note, w.request.line(), problem)
        for w in wt.witnesses(res, DEFAULT_CONTROLLER)
        if (problem := wire_problem(w.request)) is not None
    ]
    assert unsendable == []
