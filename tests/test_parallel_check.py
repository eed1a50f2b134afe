"""Splitting witnesses across processes changes nothing but the time taken."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import background
import pytest
from verifier.rules import RULES

from verifier import check, pipeline, registry
from verifier.mutate.catalog import mutants
from verifier.registry import run

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _context(snapshot: object | None = None) -> check.Context:
    scn = next(
        s
        for s in pipeline.discover([str(FIXTURES)], pipeline.CheckOptions())
        if s.name == "httproute-header-matching"
    )
    ctx, _ = pipeline.prepare(scn, pipeline.CheckOptions())
    assert ctx is not None
    if snapshot is not None:
        ctx = check.Context(ctx.res, snapshot, cases=ctx.cases)  # type: ignore[arg-type]
    return ctx


def test_parallel_and_serial_checks_find_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    base = _context()
    broken = [m for m in mutants(base.snapshot) if m.operator == "drop-header-matcher"][:3]
    assert broken
    for mutant in broken:
        monkeypatch.setattr(check, "PARALLEL_MIN_WITNESSES", 10**9)
        serial = run(RULES, _context(mutant.snapshot)).findings
        monkeypatch.setattr(check, "PARALLEL_MIN_WITNESSES", 0)
        parallel = run(RULES, _context(mutant.snapshot)).findings
        assert serial, mutant.detail
        assert [f.to_json() for f in parallel] == [f.to_json() for f in serial]


def test_config_rules_in_a_child_find_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rules that only read the config may run in a child beside the witness
    comparisons; the report is the same, byte for byte."""
    aside = {r.name for r in RULES if not r.reads_models and r.background is None}
    base = _context()
    started: list[int] = []
    real = registry.ForkedCall
    monkeypatch.setattr(registry, "ForkedCall", lambda fn: started.append(1) or real(fn))
    # Mutants that config rules report (unreachable routes, backend shapes,
    # listeners, domains, orphan clusters), one per operator.
    operators = {"drop-header-matcher", "add-upstream-tls", "force-http2", "drop-listener"}
    operators |= {"drop-domain", "add-wildcard-domain"}
    compared: set[str] = set()
    for mutant in mutants(base.snapshot):
        if mutant.operator not in operators or mutant.operator in compared:
            continue
        monkeypatch.setattr(registry, "PARALLEL_MIN_ROUTES", 10**9)
        serial = run(RULES, _context(mutant.snapshot)).findings
        if not any(f.rule in aside for f in serial):
            continue
        before = len(started)
        monkeypatch.setattr(registry, "PARALLEL_MIN_ROUTES", 0)
        beside = run(RULES, _context(mutant.snapshot)).findings
        assert len(started) == before + 1  # the config rules did run in a child
        assert [f.to_json() for f in beside] == [f.to_json() for f in serial], mutant.detail
        compared.add(mutant.operator)
    assert compared == operators


def all_contexts() -> list[check.Context]:
    """A check context per fixture scenario (also used by test_witness_stamping)."""
    out = []
    for scn in pipeline.discover([str(FIXTURES)], pipeline.CheckOptions()):
        ctx, _ = pipeline.prepare(scn, pipeline.CheckOptions())
        if ctx is not None:
            out.append(ctx)
    return out


def test_untraced_evaluations_decide_the_same() -> None:
    """check asks both models without traces; only the trace may differ."""
    contexts = all_contexts()
    assert len(contexts) > 40
    asked = 0
    for ctx in contexts:
        for w in ctx.witnesses:
            full_e, short_e = (
                ctx.envoy.evaluate(w.request),
                ctx.envoy.evaluate(w.request, trace=False),
            )
            assert short_e.outcome == full_e.outcome, w
            assert len(short_e.trace) <= len(full_e.trace)
            full_s = ctx.spec(w.gateway, w.request)
            short_s = ctx.spec(w.gateway, w.request, trace=False)
            assert short_s.outcome == full_s.outcome, w
            assert len(short_s.trace) <= len(full_s.trace)
            asked += 1
    assert asked > 2000


Checked = tuple[list[tuple[Any, ...]], list[tuple[int, int, str]]]


def _suite_checked(min_scenarios: int) -> Checked:
    """fixtures/ checked against one scenario's xDS (judged against every scenario: many
    findings), with scenarios spread over the cores from ``min_scenarios`` of them on
    (10**9: one after another): the results as data, and the progress calls."""
    from verifier.cli import main

    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.chdir(FIXTURES.parent)
        xds = Path(tmp) / "one-scenario.json"
        args = ["translate", "fixtures/base", "fixtures/httproute-header-matching", "-o", str(xds)]
        assert main(args) == 0
        opts = pipeline.CheckOptions(xds=str(xds))
        mp.setattr(pipeline, "PARALLEL_MIN_SCENARIOS", min_scenarios)
        calls: list[tuple[int, int, str]] = []
        results = pipeline.check_all(
            ["fixtures"], opts, RULES, lambda i, n, r: calls.append((i, n, r.scenario.name))
        )
        flat = [
            (r.scenario.name, [f.to_json() for f in r.findings], r.input_errors, r.warnings)
            for r in results
        ]
    return flat, calls


def _suite_checked_in_turn() -> Checked:
    return _suite_checked(10**9)


MUTATED = [
    "base",
    "httproute-header-matching",
    "httproute-cors",
    "httproute-query-param-matching",
    "httproute-matching-precedence",
]


def _suite_mutated(serial: bool) -> dict[str, Any]:
    """``mutate_all`` over a suite of a few fixtures: on several cores (where
    ``can_fork``), or one scenario after another."""
    import verifier.forked
    from verifier.mutate.run import mutate_all

    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        suite = Path(tmp) / "suite"
        suite.mkdir()
        for name in MUTATED:
            (suite / name).symlink_to(FIXTURES / name, target_is_directory=True)
        if serial:
            mp.setattr(verifier.forked, "can_fork", lambda: False)
        return mutate_all([str(suite)], pipeline.CheckOptions(), RULES).to_json()


def _suite_mutated_in_turn() -> dict[str, Any]:
    return _suite_mutated(serial=True)


# The runs one scenario after another depend on nothing the session does first: they
# are computed on the core the other tests leave idle (tests/background.py); the runs
# over the cores are made here.
BACKGROUND = {"checked": _suite_checked_in_turn, "mutated": _suite_mutated_in_turn}


def test_a_suite_checked_on_several_cores_reports_as_one_checked_in_turn() -> None:
    """Scenarios of a suite are checked in worker processes; the results, their
    order and the progress calls are those of a serial run."""
    serial = background.result(f"{__name__}:checked", _suite_checked_in_turn)
    parallel = _suite_checked(0)
    assert sum(len(entry[1]) for entry in serial[0]) > 100
    assert parallel == serial


def test_mutating_a_suite_on_several_cores_reports_as_in_turn() -> None:
    parallel = _suite_mutated(serial=False)
    serial = background.result(f"{__name__}:mutated", _suite_mutated_in_turn)
    assert serial["total"] > 100
    assert parallel == serial


@pytest.mark.parametrize(("count", "workers"), [(1, 2), (7, 2), (8, 2), (100, 3), (20_001, 2)])
def test_runs_hand_out_every_witness_once_in_order(count: int, workers: int) -> None:
    runs = check._runs(count, workers)
    assert [i for r in runs for i in r] == list(range(count))
    assert all(len(r) > 0 for r in runs)
    assert len(runs) == min(count, workers * check.RUNS_PER_WORKER)
    lengths = [len(r) for r in runs]
    assert max(lengths) - min(lengths) <= 1  # about equal, so none holds the others up
