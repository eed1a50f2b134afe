"""`edge-verify run fixtures/`, once per session, for every test that reads its answers.

The README's first command sends every case of every fixture through a real
Envoy, each scenario in a network namespace of its own. tests/test_cli.py runs
the README's commands as written, tests/test_live_cli.py holds this one to its
contract (exit code, report, every case passed), tests/test_live_fixtures.py
gives each case a test of its own and asserts how each scenario's data plane was
had. All three read this one run: the traffic is sent once.

The run is the command as the README writes it, in this process
(``verifier.cli.main``). What the tests read besides its exit code and output is
recorded on the way, by wrapping two functions of the live pass: the report it
returns (rendered as ``--format json`` renders it, by ``report.live.render_json``)
and, per scenario, how the harness was had (the namespace each Envoy ran in, what
was added to the served xDS), which no report carries. The run is not changed,
only watched.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Awaitable, Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from typing import Any

import pytest
from conftest import REPO_ROOT

from verifier.cli import main
from verifier.gatewayapi.resources import Resources
from verifier.live import runner
from verifier.live.harness import EmbeddedHarness
from verifier.live.isolated import Isolated
from verifier.live.results import LiveReport
from verifier.report.live import render_json
from verifier.xds.snapshot import Snapshot


@dataclass(frozen=True)
class Harness:
    """How one scenario's data plane was had (``verifier.live.isolated.Isolated``)."""

    rewritten: bool
    notes: tuple[str, ...]
    additions: tuple[str, ...]
    namespace: int | None
    namespace_setup: float
    harness_start: float
    envoy_to_ack: float


@dataclass(frozen=True)
class SuiteRun:
    """The command's exit code, its output, its JSON report, and each scenario's harness."""

    code: int
    out: str
    err: str
    report: dict[str, Any]  # the live pass's report, as `--format json` writes it
    harnesses: dict[str, Harness]
    seconds: float

    def case(self, scenario: str, name: str) -> dict[str, Any]:
        """The report's entry for one case of one scenario."""
        if not self.report:
            why = f"run fixtures/ made no live report (exit {self.code}):\n{self.err[-3000:]}"
            pytest.fail(why, pytrace=False)
        (found,) = [
            c
            for c in self.report.get("cases", [])
            if c["scenario"] == scenario and c["name"] == name and c["kind"] == "case"
        ]
        return found


STATISTICAL = ("samples", "status_ratio", "backend_ratio")


def attempts_without_a_failure(case: dict[str, Any], successes: int) -> int:
    """How many attempts a case takes when none of them fails: ``successes`` in a row,
    or one for a case judged statistically over its samples (``runner._consistent``;
    the report's ``expected`` lists ``samples`` and the ratios only when they are set)."""
    return 1 if any(key in case["expected"] for key in STATISTICAL) else successes


def run_fixtures() -> SuiteRun:
    """``edge-verify run fixtures/`` from the repo root, its live report and each
    scenario's harness recorded (by its snapshot, which the live pass serves as is)."""
    names: dict[int, str] = {}  # id of a prepared scenario's snapshot -> its name
    harnesses: dict[str, Harness] = {}
    reports: list[LiveReport] = []
    prepare_all = runner.prepare_all
    with_isolated_harness = runner.with_isolated_harness
    run_live = runner.run_live

    def prepared(*args: Any, **kwargs: Any) -> list[Any]:
        found = prepare_all(*args, **kwargs)
        names.update((id(p.ctx.snapshot), p.scenario.name) for p in found)
        return found

    async def watched(
        res: Resources,
        snap: Snapshot,
        work: Callable[[EmbeddedHarness], Awaitable[Any]],
        **kwargs: Any,
    ) -> Isolated[Any]:
        done = await with_isolated_harness(res, snap, work, **kwargs)
        harnesses[names[id(snap)]] = Harness(
            done.rewritten,
            done.notes,
            done.additions,
            done.namespace,
            done.namespace_setup,
            done.harness_start,
            done.envoy_to_ack,
        )
        return done

    def reported(*args: Any, **kwargs: Any) -> LiveReport:
        reports.append(run_live(*args, **kwargs))
        return reports[-1]

    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(REPO_ROOT)
        mp.setattr(runner, "prepare_all", prepared)
        mp.setattr(runner, "with_isolated_harness", watched)
        mp.setattr(runner, "run_live", reported)
        with redirect_stdout(out), redirect_stderr(err):
            code = main(["run", "fixtures/"])
    seconds = time.monotonic() - started
    doc = json.loads(render_json(reports[0])) if reports else {}
    run = SuiteRun(code, out.getvalue(), err.getvalue(), doc, harnesses, seconds)
    _print_costs(run)
    return run


def _print_costs(run: SuiteRun) -> None:
    """The measured figures (printed with -s; never asserted: no timed assertions)."""
    print(f"\nrun fixtures/: {run.seconds:.1f}s wall, {len(run.harnesses)} scenario(s) live")
    timed = [h for h in run.harnesses.values() if not h.rewritten]
    if not timed:
        return
    n = len(timed)
    print(
        f"live: namespace setup {sum(h.namespace_setup for h in timed) / n * 1000:.0f} ms, "
        f"harness start {sum(h.harness_start for h in timed) / n * 1000:.0f} ms, "
        f"Envoy start to every ACK {sum(h.envoy_to_ack for h in timed) / n * 1000:.0f} ms "
        f"(mean of {n}; max {max(h.envoy_to_ack for h in timed) * 1000:.0f} ms)"
    )
