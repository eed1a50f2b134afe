"""Every case of every scenario, through real Envoy running the translator's xDS.

The static checks prove the translation matches our reading of the spec; this
proves real Envoy *does* what the cases say, so it is also the oracle the
Envoy model is later checked against. One embedded harness per scenario; the
scenarios needed by the selected tests are all run once, concurrently, by a
module fixture, and each case is then its own test (so a known bug can be an
``xfail(strict=True)`` on exactly that case).

A case listed in ``KNOWN`` fails for a reason outside the harness, with the
evidence in its reason; strictness makes the mark go red the day it is fixed.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import yaml
from conftest import valid_scenarios

from verifier.live.envoy_process import envoy_available
from verifier.live.replay import CaseRun, live_unmet, run_scenario

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


Runs = dict[str, "list[CaseRun] | Exception"]


async def _run_all(scenarios: list[Path]) -> Runs:
    limit = asyncio.Semaphore(PARALLEL_SCENARIOS)

    async def one(scenario: Path) -> list[CaseRun] | Exception:
        async with limit:
            try:
                return await run_scenario(scenario)
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
    return runs


@pytest.mark.parametrize(("scenario", "case_name"), _params())
def test_live_case(scenario: Path, case_name: str, live_runs: Runs) -> None:
    runs = live_runs[scenario.name]
    if isinstance(runs, Exception):
        pytest.fail(f"{scenario.name}: harness failed:\n{runs}", pytrace=False)
    run = next(r for r in runs if r.case.case.name == case_name)
    problems = live_unmet(run)
    if problems:
        first = run.responses[0]
        pytest.fail(
            f"{scenario.name}::{case_name}: {run.case.case.request.line()}\n  "
            + "\n  ".join(problems)
            + f"\n  first answer: {first.status} {first.error or ''} {first.body[:300]!r}",
            pytrace=False,
        )
