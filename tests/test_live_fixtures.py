"""Every case of every scenario, through real Envoy running exactly the translator's xDS.

The static checks prove the translation matches our reading of the spec; this
proves real Envoy *does* what the cases say, so it is also the oracle the
Envoy model is later checked against. The traffic is the session's one
`edge-verify run fixtures/` (tests/live_suite.py; tests/test_live_cli.py holds
the command to its contract): each scenario in a network namespace of its own,
its xDS served unchanged over ADS (``verifier.live.isolated``), every case sent
until it met its expectations (``replay.live_unmet``) on the consecutive
attempts the run asks for. Each case is then its own test, which requires that
no attempt failed: the first answer met the case, as every later one did (so a
known bug can be an ``xfail(strict=True)`` on exactly that case). Where no
namespace can be made (not root) the runs fall back to the rewriting harness,
and ``test_every_run_ran_the_checked_xds`` says so.

A case listed in ``KNOWN`` fails for a reason outside the harness, with the
evidence in its reason; strictness makes the mark go red the day it is fixed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from conftest import edge_scenarios, load_scenario, mesh_scenarios
from live_suite import SuiteRun, attempts_without_a_failure

from verifier.live.envoy_process import envoy_available
from verifier.live.mesh_pods import mesh_pods
from verifier.live.mesh_runner import KUBE_PROXY

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not envoy_available(), reason="no envoy binary"),
]

# Cases that fail for a reason outside the harness; empty while none does.
KNOWN: dict[tuple[str, str], str] = {}


def _case_names(scenario: Path) -> list[str]:
    data = yaml.safe_load((scenario / "cases.yaml").read_text(encoding="utf-8"))
    return [str(item["name"]) for item in data or []]


def _params(scenarios: list[Path] | None = None) -> list[object]:
    params: list[object] = []
    for scenario in edge_scenarios() if scenarios is None else scenarios:
        if not (scenario / "cases.yaml").is_file():
            continue
        for name in _case_names(scenario):
            reason = KNOWN.get((scenario.name, name))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            params.append(pytest.param(scenario, name, id=f"{scenario.name}::{name}", marks=marks))
    return params or [pytest.param(None, None, marks=pytest.mark.skip(reason="no scenarios"))]


def test_every_run_ran_the_checked_xds(fixtures_run: SuiteRun) -> None:
    """Every scenario ran in a namespace of its own on the unchanged xDS (never the
    rewritten copy), with the access log as the only, reported, addition."""
    runs = fixtures_run.harnesses
    with_cases = {s.name for s in edge_scenarios() if (s / "cases.yaml").is_file()}
    assert sorted(with_cases - set(runs)) == []  # each had a data plane
    if os.geteuid() != 0 and any(r.rewritten for r in runs.values()):
        pytest.skip(next(r.notes[0] for r in runs.values() if r.rewritten))
    assert [name for name, r in runs.items() if r.rewritten] == []
    assert all(r.additions for r in runs.values())
    assert all(r.namespace is not None for r in runs.values())


@pytest.mark.parametrize(("scenario", "case_name"), _params())
def test_live_case(scenario: Path, case_name: str, fixtures_run: SuiteRun) -> None:
    case = fixtures_run.case(scenario.name, case_name)
    successes = fixtures_run.report["consistency"]["successes"]
    clean = attempts_without_a_failure(case, successes)
    if not case["passed"] or case["attempts"] != clean:
        pytest.fail(
            f"{scenario.name}::{case_name}: {case['request']}\n  "
            + "\n  ".join(case["problems"] or ["met its expectations only after a failed attempt"])
            + f"\n  passed: {case['passed']} after {case['attempts']} attempt(s), "
            f"{clean} without a failure" + f"\n  last answer: {case['observed']}",
            pytrace=False,
        )


@pytest.mark.parametrize(("scenario", "case_name"), _params(mesh_scenarios()))
def test_live_mesh_case(scenario: Path, case_name: str, fixtures_run: SuiteRun) -> None:
    """A mesh case, sent from its client pod through ``ForwardEcho`` (the same run),
    met its expectations on every attempt, and its answer is attributed: to its
    client's sidecar (the route that served it, or none matched: its 404), or, from a
    client outside the mesh, to none (kube-proxy delivered it; the Envoy model is not
    asked). A sidecar's mistake that kube-proxy happens to hide fails as passed by
    coincidence (tests/test_mesh_live.py)."""
    test_live_case(scenario, case_name, fixtures_run)
    case = fixtures_run.case(scenario.name, case_name)
    sent = re.search(r" \(from (\S+) to ", case["request"])  # Request.line()'s client
    assert sent is not None, case["request"]
    client = sent.group(1)
    pods = mesh_pods(load_scenario(scenario)[0])
    a = case["attribution"]
    assert a["verdict"] == "agrees" and a["route"] == a["model_route"], a
    if not next(p for p in pods if "/".join(p.client) == client).sidecar:
        assert (a["state"], a["why"]) == ("no-route", KUBE_PROXY), a
        assert case["envoy_model_agrees"] is None
    else:
        # its route, or none of its routes matched (a 404 is the sidecar's own answer)
        assert a["state"] in ("attributed", "no-route") and a["why"] is None, a
        assert case["envoy_model_agrees"] is True
    assert case["spec_agrees"] is True


def test_every_mesh_ran_unrewritten(fixtures_run: SuiteRun) -> None:
    """Each mesh scenario's sidecars ran their translate --proxy xDS unrewritten but for the
    access log, and the run says so, with what its start cost."""
    mesh = fixtures_run.report["mesh"]
    with_cases = {s.name for s in mesh_scenarios() if (s / "cases.yaml").is_file()}
    assert set(mesh) == with_cases
    for name, run in mesh.items():
        assert any("unrewritten but for an access log" in n for n in run["notes"]), name
        assert run["start_seconds"]["sidecars"] > 0, name
