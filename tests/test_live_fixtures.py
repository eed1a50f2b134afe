"""Every case of every scenario, through real Envoy running exactly the translator's xDS.

The static checks prove the translation matches our reading of the spec; this
proves real Envoy *does* what the cases say, so it is also the oracle the
Envoy model is later checked against. Each scenario runs in a network namespace
of its own, its xDS served unchanged over ADS (``verifier.live.isolated``);
the scenarios needed by the selected tests are all run once, concurrently, by
a module fixture, and each case is then its own test (so a known bug can be an
``xfail(strict=True)`` on exactly that case). Where no namespace can be made
(not root) the runs fall back to the rewriting harness, and
``test_every_run_ran_the_checked_xds`` says so.

A case listed in ``KNOWN`` fails for a reason outside the harness, with the
evidence in its reason; strictness makes the mark go red the day it is fixed.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
import yaml
from conftest import valid_scenarios

from verifier.live.envoy_process import envoy_available
from verifier.live.isolated import LiveRun, run_cases_isolated_async
from verifier.live.replay import live_unmet, load_cases, load_scenario

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not envoy_available(), reason="no envoy binary"),
]

# Scenarios run at once; each is one Envoy plus a handful of echo servers.
PARALLEL_SCENARIOS = 8

# Cases that fail for a reason outside the harness; empty while none does.
KNOWN: dict[tuple[str, str], str] = {}


def _case_names(scenario: Path) -> list[str]:
    data = yaml.safe_load((scenario / "cases.yaml").read_text(encoding="utf-8"))
    return [str(item["name"]) for item in data or []]


def _params() -> list[object]:
    params: list[object] = []
    for scenario in valid_scenarios():
        if not (scenario / "cases.yaml").is_file():
            continue
        for name in _case_names(scenario):
            reason = KNOWN.get((scenario.name, name))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            params.append(pytest.param(scenario, name, id=f"{scenario.name}::{name}", marks=marks))
    return params or [pytest.param(None, None, marks=pytest.mark.skip(reason="no scenarios"))]


Runs = dict[str, "LiveRun | Exception"]


async def _run_all(scenarios: list[Path]) -> Runs:
    limit = asyncio.Semaphore(PARALLEL_SCENARIOS)

    async def one(scenario: Path) -> LiveRun | Exception:
        async with limit:
            try:
                res, snap = load_scenario(scenario)
                return await run_cases_isolated_async(res, snap, load_cases(scenario, res))
            except Exception as exc:  # reported by each of the scenario's tests
                return exc

    results = await asyncio.gather(*(one(s) for s in scenarios))
    return {s.name: r for s, r in zip(scenarios, results, strict=True)}


@pytest.fixture(scope="module")
def live_runs(request: pytest.FixtureRequest) -> Runs:
    """Run every scenario that a selected test of this module needs, all at once."""
    wanted: dict[str, Path] = {}
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if getattr(item, "module", None) is request.module and callspec is not None:
            scenario = callspec.params.get("scenario")
            if isinstance(scenario, Path):
                wanted[scenario.name] = scenario
    started = time.monotonic()
    runs = asyncio.run(_run_all(sorted(wanted.values())))
    print(f"\nlive: {len(runs)} scenario(s) in {time.monotonic() - started:.1f}s")
    _print_costs([r for r in runs.values() if isinstance(r, LiveRun)])
    return runs


def _print_costs(runs: list[LiveRun]) -> None:
    """The measured figures (printed with -s; never asserted: no timed assertions)."""
    timed = [r.timings for r in runs if r.timings is not None]
    if not timed:
        return
    n = len(timed)
    requests = sum(t.requests for t in timed)
    sending = sum(t.cases for t in timed)
    print(
        f"live: namespace setup {sum(t.namespace_setup for t in timed) / n * 1000:.0f} ms, "
        f"harness start {sum(t.harness_start for t in timed) / n * 1000:.0f} ms, "
        f"Envoy start to every ACK {sum(t.envoy_to_ack for t in timed) / n * 1000:.0f} ms "
        f"(mean of {n}; max {max(t.envoy_to_ack for t in timed) * 1000:.0f} ms); "
        f"{requests} requests in {sending:.1f} s of sending ({requests / sending:.0f}/s per run)"
    )


def test_every_run_ran_the_checked_xds(live_runs: Runs) -> None:
    """Every scenario ran in a namespace of its own on the unchanged xDS (never the
    rewritten copy), with the access log as the only, reported, addition."""
    runs = {name: r for name, r in live_runs.items() if isinstance(r, LiveRun)}
    if os.geteuid() != 0 and any(r.rewritten for r in runs.values()):
        pytest.skip(next(r.notes[0] for r in runs.values() if r.rewritten))
    assert [name for name, r in runs.items() if r.rewritten] == []
    assert all(r.additions for r in runs.values())
    assert all(r.namespace is not None for r in runs.values())


@pytest.mark.parametrize(("scenario", "case_name"), _params())
def test_live_case(scenario: Path, case_name: str, live_runs: Runs) -> None:
    runs = live_runs[scenario.name]
    if isinstance(runs, Exception):
        pytest.fail(f"{scenario.name}: harness failed:\n{runs}", pytrace=False)
    run = next(r for r in runs.runs if r.case.case.name == case_name)
    problems = live_unmet(run)
    if problems:
        first = run.responses[0]
        pytest.fail(
            f"{scenario.name}::{case_name}: {run.case.case.request.line()}\n  "
            + "\n  ".join(problems)
            + f"\n  first answer: {first.status} {first.error or ''} {first.body[:300]!r}",
            pytrace=False,
        )
