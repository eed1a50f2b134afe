"""Every entry point of the CLI, fed damaged copies of valid inputs, ends in a report
or an input error: exit 0, 1 or 2, no traceback, in bounded time and memory, and an
exit 2 names the damaged file (or option). Issue 12, item 3.

test_fuzz_inputs.py damages two inputs of one command; bad input reaches the tool
through every command and every file it reads (cases tables, mesh registries,
per-type xDS directories, CA certificates, standard input, option values), and
each reader had its own crash in issue 12's list. Here each entry point gets a
share of a few thousand examples by its cost (tests/entry_points.py has the list
and the counts, printed at the end of the session). Derandomized when CI=true, so a
CI failure is the same failure everywhere; elsewhere each run draws anew and keeps
failures in .hypothesis/ to replay first. benchmarks/fuzz_inputs.py runs the same
property for longer.

Hypothesis runs one example at a time, and an example is mostly its child process
running: one entry point keeps one core busy. The entry points are independent, so
a module fixture runs each one's property in a forked worker
(``verifier.forked.map_forked``, costliest first so the cores finish together) and
each entry point's test reports how its property ended there: the same examples and
the same property on every core. (An example's child, forked from a worker, checks
serially where it could have forked helpers of its own: the same answers,
tests/test_parallel_check.py.)
"""

from __future__ import annotations

import os
import time
import traceback
from functools import partial
from pathlib import Path

import entry_points
import pytest
from entry_points import ENTRY_POINTS, survives_damage, warm, workspace

from verifier.forked import can_fork, map_forked

# Seconds each entry point's examples took one after another in a full run on the
# 2-core CI machine (2026-12-01; scaled to the example counts cut on 2026-12-02, and
# to the third fewer of 2026-12-03, to keep CI well under 30 minutes on a loaded
# host): only the order the workers take them in (costliest
# first, so that the cores finish together) depends on it.
MEASURED_S = {
    "--gateway-address": 12.1,
    "translate": 12.7,
    "status": 9.1,
    "--gateway-cidr": 6.8,
    "explain --request": 6.1,
    "explain --client-cert-issuer": 9.1,
    "translate --mesh-registry": 5.1,
    "explain -H": 5.1,
    "status (stdin)": 4.5,
    "explain --cases": 7.5,
    "check --xds (config_dump)": 7.4,
    "check --cases": 6.6,
    "check": 6.4,
    "check --xds (per-type directory)": 4.4,
    "check --xds - (stdin)": 3.0,  # estimated (new on 2026-12-03)
    "check --baseline": 3.9,  # estimated (new on 2026-12-02)
    "mutate --xds": 1.5,
}


@pytest.fixture(scope="module")
def valid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The valid inputs, every entry point run once on them (warm for the forks)."""
    ws = workspace(tmp_path_factory.mktemp("valid"))
    warm(ws)
    return ws


# What one entry point's property run sends back from its worker: how many inputs
# it fed, the seconds they took, and the failure Hypothesis raised (None: it held).
Ended = tuple[int, float, str | None]


def _run_property(valid: Path, derandomize: bool, name: str) -> Ended:
    """``name``'s property, run to the end (shrinking included) wherever this is called
    (a worker, or here when no worker could); a failure is returned as Hypothesis
    reported it, so that it reaches the test. The counts are returned, not kept, so
    that the caller adds them once wherever the property ran."""
    before, spent = entry_points.COUNTS[name], entry_points.SECONDS[name]
    try:
        survives_damage(name, valid, ENTRY_POINTS[name].examples, derandomize=derandomize)()
        failure = None
    except Exception as exc:  # the falsifying example and its problem, in the notes
        failure = "".join(traceback.format_exception(exc))
    fed, seconds = entry_points.COUNTS[name] - before, entry_points.SECONDS[name] - spent
    entry_points.COUNTS[name], entry_points.SECONDS[name] = before, spent
    return fed, seconds, failure


@pytest.fixture(scope="module")
def properties(request: pytest.FixtureRequest, valid: Path) -> dict[str, str | None]:
    """Every selected entry point's property, run once, spread over the cores: entry
    point -> its failure, None when every example held. The counts and seconds
    each worker measured are added to this process's, for the session summary."""
    wanted = sorted(
        {
            item.callspec.params["name"]
            for item in request.session.items
            if getattr(item, "module", None) is request.module and hasattr(item, "callspec")
        },
        key=lambda n: (-MEASURED_S.get(n, 0.0), n),
    )
    run = partial(_run_property, valid, os.environ.get("CI") == "true")
    forking = can_fork()
    started = time.monotonic()
    ended: dict[str, str | None] = {}
    for name, (fed, seconds, failure) in zip(
        wanted, map_forked(run, wanted, min_items=2), strict=True
    ):
        entry_points.COUNTS[name] += fed
        entry_points.SECONDS[name] += seconds
        ended[name] = failure
    where = f"forked workers ({os.cpu_count()} cores)" if forking else "this process"
    print(f"\n{len(wanted)} entry points in {time.monotonic() - started:.1f}s, in {where}")
    return ended


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_damaged_input_ends_in_a_report_or_an_input_error(
    name: str, properties: dict[str, str | None]
) -> None:
    failure = properties[name]
    if failure is not None:
        pytest.fail(f"{name}:\n{failure}", pytrace=False)
