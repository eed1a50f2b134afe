"""Decision lists (issue 35): each model's list agrees with its own evaluation, and the
structural path of check changes no verdict.

The lists are trusted by check only where these hold: for drawn worlds and requests,
the first entry of a model's list that accepts a request is the route that model's
own ``evaluate`` answers with, and its action is that answer; and on every fixture,
its foreign re-encoding and every mutant, the findings are the same with the
structural path as with every witness asked (``EDGE_VERIFY_WITNESS_ONLY=1``).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import background
import pytest
from foreign import reencode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from verifier.rules import RULES

from verifier import pipeline, structural
from verifier.baseline import Baseline, Digests
from verifier.check import Context
from verifier.fuzz.requests import neighbours
from verifier.fuzz.trial import Translator
from verifier.fuzz.worlds import worlds
from verifier.mutate.catalog import equivalent, mutants
from verifier.registry import run
from verifier.semantics import decisions as d
from verifier.semantics import witness as wt
from verifier.semantics.directory import backend_directory_from
from verifier.semantics.envoy import decisions as envoy_lists
from verifier.semantics.request import Outcome
from verifier.semantics.spec import decisions as spec_lists
from verifier.semantics.spec.model import index_for

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _view(w: wt.Witness) -> d.View:
    r = w.request
    return d.View.of(r.path, r.method, ((k, v) for k, vs in r.headers for v in vs))


def _answers(entry: d.Entry, w: wt.Witness, outcome: Outcome) -> None:
    """``outcome`` is what ``entry``'s action says ``w`` gets."""
    a = entry.action
    backends, (invalid, unavailable) = d.reduced(
        ((b.namespace, b.name, b.port, b.weight) for b in outcome.backends),
        outcome.invalid_weight,
        outcome.unavailable_weight,
    )
    assert (outcome.status, backends, invalid, unavailable) == (
        a.status,
        a.backends,
        a.invalid_weight,
        a.unavailable_weight,
    ), w
    assert (outcome.request is not None) == a.forwarded, w
    if outcome.request is not None:
        r = w.request
        assert (outcome.request.host, outcome.request.path) == (r.host, r.path), w
        assert outcome.request.headers == d.with_effects(a.request_headers, r.headers), w
        timeouts = (outcome.request_timeout_ms, outcome.backend_timeout_ms)
        assert d.deadline_ms(*timeouts) == a.deadline_ms, w
    shown = tuple((k, v) for k, v in outcome.response_headers if any(v))
    assert (shown, tuple(sorted(set(outcome.response_headers_removed)))) == (
        a.response_headers,
        a.response_removed,
    ), w


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(world=worlds(), data=st.data())
def test_each_models_first_match_is_its_own_answer(world: object, data: st.DataObject) -> None:
    trial = Translator()(world)  # type: ignore[arg-type]
    ctx = trial.ctx
    if ctx.models_problem is not None:
        return
    drawn = data.draw(neighbours(ctx.witnesses, 16), label="requests")
    index = index_for(ctx.res)
    for w in [*ctx.witnesses, *drawn]:
        r = w.request
        if not structural._plain(r):
            continue
        spec_at = spec_lists.routing_of(ctx.res, index, w.gateway, r, ctx.controller_name)
        if not isinstance(spec_at, int):
            dl = spec_lists.decision_list(ctx.res, index, *spec_at, r.hostname)
            if dl.comparable:
                outcome = ctx.spec(w.gateway, r, trace=False).outcome
                i = d.first_match(dl, _view(w))
                assert d.Index(dl).first_match(_view(w)) == i
                if i is None:
                    assert outcome.status == 404 and outcome.route is None, w
                else:
                    ref = outcome.route
                    assert ref is not None, w
                    assert (ref.httproute, ref.rule, ref.match) == dl.entries[i].source, w
                    _answers(dl.entries[i], w, outcome)
        envoy_at, _why = envoy_lists.routing_of(ctx.envoy, r)
        if envoy_at is not None:
            dl = envoy_lists.decision_list(ctx.envoy, envoy_at, r)
            if dl.comparable:
                outcome = ctx.envoy.evaluate(r, trace=False).outcome
                i = d.first_match(dl, _view(w))
                assert d.Index(dl).first_match(_view(w)) == i
                if i is None:
                    assert outcome.status == 404 and outcome.route is None, w
                else:
                    assert outcome.route == dl.entries[i].source, w
                    _answers(dl.entries[i], w, outcome)


def _contexts() -> list[Context]:
    out = []
    for scn in pipeline.discover([str(FIXTURES)], pipeline.CheckOptions()):
        ctx, _ = pipeline.prepare(scn, pipeline.CheckOptions(), spec_cache={})
        if ctx is not None and ctx.models_problem is None:
            out.append(ctx)
    return out


@pytest.fixture(scope="module")
def contexts() -> list[Context]:
    return _contexts()


def _mutant_sweep() -> dict[str, Any]:
    """Every proven witness of every mutant of every fixture, asked of both models:
    how many mutants the lists served, how many witnesses they proved, and those the
    models disagree on when asked (a plain dict: it is pickled from the background)."""
    checked = proven = 0
    wrong: list[str] = []
    for base in _contexts():
        hostless = backend_directory_from(base.res).unready_names()
        for mutant in mutants(base.snapshot):
            if equivalent(base.snapshot, mutant, hostless):
                continue
            ctx = dataclasses.replace(base, snapshot=mutant.snapshot)
            if ctx.models_problem is not None or ctx.structural is None:
                continue
            # Witnesses come from the resources, which a mutant shares (those made from
            # the xDS's client CAs carry a certificate, which the lists never prove).
            ctx.__dict__["witnesses"] = base.witnesses
            checked += 1
            for w in ctx.witnesses:
                if ctx.structural.proven(w):
                    proven += 1
                    if ctx._judged(w) is not None:
                        wrong.append(f"{mutant.operator} {mutant.detail}: {w.request.line()}")
    return {"mutants": checked, "proven": proven, "disagreeing": wrong}


# About 45 s of one core on a loaded 2-core machine: computed on the core the other
# tests leave idle (tests/background.py), as the mutation score is.
BACKGROUND = {"mutant_sweep": _mutant_sweep}


# Every rule but Envoy's own validation of the xDS, which reads no witness (and
# starts an Envoy per context).
JUDGING = [r for r in RULES if r.name != "envoy-accepts-config"]


def _findings(ctx: Context) -> list[dict[str, object]]:
    return [f.to_json() for f in run(JUDGING, ctx).findings]


def test_fixtures_and_their_foreign_encodings_get_the_same_findings_either_way(
    contexts: list[Context], monkeypatch: pytest.MonkeyPatch
) -> None:
    proven = {"ours": 0, "foreign": 0}
    witnesses = 0
    for ctx in contexts:
        for kind, snap in (("ours", ctx.snapshot), ("foreign", reencode(ctx.snapshot, ctx.res))):
            monkeypatch.delenv(structural.SWITCH, raising=False)
            fast = dataclasses.replace(ctx, snapshot=snap)
            with_lists = _findings(fast)
            monkeypatch.setenv(structural.SWITCH, "1")
            slow = dataclasses.replace(ctx, snapshot=snap)
            assert _findings(slow) == with_lists, kind
            assert slow.proven == 0 and slow.asked == fast.asked + fast.proven
            # The proven requests that were never made into witnesses are exactly the
            # ones missing from what the lists leave to ask.
            asked = {(w.gateway, w.request) for w in fast.to_ask}
            assert asked <= {(w.gateway, w.request) for w in slow.to_ask}, kind
            assert len(fast.to_ask) + fast.settled == len(slow.to_ask) == fast.requests, kind
            proven[kind] += fast.proven
        witnesses += len(ctx.witnesses)
        _untouched_when_plain(ctx)
    # The lists prove a good share of our encoding, and still some of the foreign one
    # (its regex rewrites and reordered routes leave regions to ask).
    assert proven["ours"] > witnesses // 3, (proven, witnesses)
    assert proven["foreign"] > 0, proven


def _untouched_when_plain(ctx: Context) -> None:
    """What ``structural`` reads instead of ``envoy.decisions.untouched`` for a plain
    request: the HCM passes it on as sent unless it carries an internal-only header."""
    for w in ctx.witnesses:
        r = w.request
        routing, _why = envoy_lists.connection_routing(ctx.envoy, r)
        if routing is None or not structural._plain(r):
            continue
        internal = any(k in routing.config.internal_only for k, _ in r.headers)
        assert (envoy_lists.untouched(routing, r) == "") == (not internal), w


def test_every_witness_the_lists_prove_on_a_mutant_agrees_when_asked() -> None:
    """The structural path only skips witnesses; it changes no verdict if every one it
    skips agrees when asked (and is not an assumed answer). So on every mutant of every
    fixture, each proven witness is asked of both models."""
    sweep = background.result(f"{__name__}:mutant_sweep", _mutant_sweep)
    assert sweep["disagreeing"] == []
    assert sweep["mutants"] > 1000, sweep
    assert sweep["proven"] > 10 * sweep["mutants"], sweep


def _benchmark_shape(tmp: Path) -> Context:
    """The configuration benchmarks/ times (generate.py), at 100 rules."""
    sys.path.insert(0, str(FIXTURES.parent / "benchmarks"))
    try:
        from generate import write
    finally:
        sys.path.pop(0)
    write(100, tmp / "rules")
    scenario = pipeline.Scenario("bench", (str(FIXTURES / "base"), str(tmp / "rules")))
    ctx, _ = pipeline.prepare(scenario, pipeline.CheckOptions(), spec_cache={})
    assert ctx is not None
    return ctx


def test_a_baseline_run_does_no_more_work_than_a_full_run(
    contexts: list[Context], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 35, item 3, as work rather than time (times are noise on a shared machine):
    with a baseline, the lists prove what a full run's prove, before making the
    witnesses alike, no witness is made or asked that a full run would not make or
    ask, and only the witnesses the lists leave are digested; on every fixture and on
    the benchmark's shape."""
    digested = 0
    real_of = Digests.of

    def counted(self: Digests, w: wt.Witness) -> bytes:
        nonlocal digested
        digested += 1
        return real_of(self, w)

    monkeypatch.setattr(Digests, "of", counted)
    bench = _benchmark_shape(tmp_path)
    for ctx in [*contexts, bench]:
        recording = dataclasses.replace(ctx, record_agreement=True)
        _ = recording.comparisons
        full = dataclasses.replace(ctx)
        _ = full.comparisons
        again = dataclasses.replace(ctx, baseline=Baseline(recording.agreed))
        digested = 0
        assert again.comparisons == full.comparisons
        assert again.proven == full.proven and again.settled == full.settled
        assert again.asked <= full.asked
        assert len(again.to_ask) <= len(full.to_ask)
        assert digested <= len(again.to_ask) - (again.proven - again.settled)
    # On the benchmark's shape the lists prove all but the Host spellings in capitals
    # before any witness is made, and a baseline run asks none of those again.
    left = len(bench.to_ask)  # sets bench.settled
    assert bench.settled > 9 * left, (bench.settled, left)
