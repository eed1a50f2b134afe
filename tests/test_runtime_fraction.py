"""Routes that take only a share of their requests (``runtime_fraction`` below 100%).

No Gateway API route matches some of its requests and lets the rest fall through,
so xDS with such a route (from any translator) must be judged on every answer a
request may get, not just the likelier one. Three halves of that proof:
real Envoy really answers both ways, `check` reports the route, and a fraction
whose fall-through answers the same is no finding.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator

import pytest
from conftest import FIXTURES, REPO_ROOT, load_scenario, translate_scenario
from envoy_data_plane.envoy.config.core.v3 import RuntimeFractionalPercent
from envoy_data_plane.envoy.type.v3 import FractionalPercent
from test_model_vs_live import decision_mismatches
from verifier.rules import RULES

from verifier.check import Context
from verifier.gatewayapi.resources import Resources
from verifier.live.echo_model import echo_reply
from verifier.live.envoy_process import envoy_available
from verifier.live.harness import EmbeddedHarness
from verifier.mutate.catalog import OPERATORS, Mutant, equivalent, mutants
from verifier.registry import run
from verifier.semantics import witness as wt
from verifier.semantics.directory import backend_directory_from
from verifier.semantics.envoy.model import EnvoyModel
from verifier.semantics.request import Outcome, Request
from verifier.xds.snapshot import Snapshot

SCENARIO = "httproute-path-prefix-matching"
CONTROLLER = "gateway.aether.io/edge"
SENDS = 40  # a 50% route missed by all of them: 2**-40


@pytest.fixture(scope="module", autouse=True)
def _repo_cwd() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(REPO_ROOT)
        yield


def _decision(o: Outcome) -> tuple[object, ...]:
    return (o.status, tuple((b.namespace, b.name, b.port) for b in o.backends))


def _fractional_mutants() -> tuple[Resources, Snapshot, list[Mutant]]:
    res, _ = load_scenario(FIXTURES / SCENARIO)
    snap = translate_scenario(FIXTURES / SCENARIO)
    (op,) = [o for o in OPERATORS if o.name == "fractional-route"]
    found = [m for m in mutants(snap, operators=(op,)) if not equivalent(snap, m)]
    assert found, "the scenario should have routes whose fall-through answers otherwise"
    return res, snap, found


def _two_way_witness(res: Resources, m: Mutant) -> tuple[Request, list[Outcome]] | None:
    """A witness the mutant answers in two distinguishable ways, and those answers."""
    model = EnvoyModel(m.snapshot, backend_directory_from(res))
    for w in wt.witnesses(res, CONTROLLER):
        outcome = model.evaluate(w.request, echo_reply(w.request), trace=False).outcome
        ways = outcome.possibilities()
        if len({_decision(o) for o in ways}) > 1:
            return w.request, ways
    return None


def test_check_reports_a_route_that_takes_only_a_share() -> None:
    res, _, found = _fractional_mutants()
    for m in found:
        ctx = Context(res=res, snapshot=m.snapshot)
        findings = run(RULES, ctx).findings
        route = m.xds_path.removesuffix(".match.runtime_fraction")
        assert any(f.xds_path == route and "runtime_fraction" in f.message for f in findings), (
            m.xds_path,
            [(f.code, f.xds_path, f.message) for f in findings],
        )


def test_a_share_whose_rest_gets_the_same_answer_is_no_finding() -> None:
    """Each route preceded by a 50% copy of itself: the rest reach the route itself."""
    res, _ = load_scenario(FIXTURES / SCENARIO)
    snap = copy.deepcopy(translate_scenario(FIXTURES / SCENARIO))
    for rc in snap.routes:
        for vh in rc.virtual_hosts:
            doubled = []
            for r in vh.routes:
                twin = copy.deepcopy(r)
                assert twin.match is not None
                twin.match.runtime_fraction = RuntimeFractionalPercent(
                    default_value=FractionalPercent(numerator=50)
                )
                doubled += [twin, r]
            vh.routes = doubled
    ctx = Context(res=res, snapshot=snap)
    assert [(f.code, f.xds_path, f.message) for f in run(RULES, ctx).findings] == []


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
def test_real_envoy_answers_both_ways() -> None:
    """What the model says a fractional route may do is what Envoy 1.40 does: over
    40 sends, every answer is one the model allows, and each one it allows occurs."""
    res, _, found = _fractional_mutants()
    pick = next(((m, w) for m in found if (w := _two_way_witness(res, m)) is not None), None)
    assert pick is not None
    m, (request, ways) = pick

    async def send_all() -> list[Outcome]:
        async with EmbeddedHarness(res, m.snapshot) as harness:
            sent = harness.effective_request(request)
            return [harness.to_outcome(await harness.send(sent)) for _ in range(SENDS)]

    lives = asyncio.run(send_all())
    seen = set()
    for live in lives:
        allowed = [o for o in ways if not decision_mismatches(o, live)]
        assert allowed, (request.line(), live, ways)
        seen |= {_decision(o) for o in allowed}
    assert seen == {_decision(o) for o in ways}, (request.line(), seen)
