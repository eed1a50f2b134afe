"""The checker catches at least 98% of non-equivalent xDS mutants of every fixture.

This is the measure of the checker's strength: every mutation operator is a
plausible translator mistake, applied to the translated xDS of every fixture
scenario, and `check`'s rules (with each scenario's cases) must report it.
The unmutated configurations must produce no finding at all, or a kill would
mean nothing.
"""

from __future__ import annotations

from pathlib import Path

import background
import pytest
from verifier.rules import CONFIGURATION, RULES

from verifier import pipeline
from verifier.mutate.run import MutationReport, mutate_all

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TARGET = 0.98


def _mutation_report() -> MutationReport:
    # The edge's xDS only: the sidecars' bar is tests/test_mutate_sidecars.py's, on one
    # mesh scenario (every sidecar of every mesh fixture would take minutes).
    return mutate_all([str(FIXTURES)], pipeline.CheckOptions(), RULES, sidecars=False)


# The score depends on nothing the session does first: it is computed on the core the
# other tests leave idle, from the start of the session (tests/background.py).
BACKGROUND = {"report": _mutation_report}


@pytest.fixture(scope="module")
def report() -> MutationReport:
    return background.result(f"{__name__}:report", _mutation_report)


def test_unmutated_fixtures_have_no_findings(report: MutationReport) -> None:
    assert report.baseline_findings == []


def test_mutation_score(report: MutationReport) -> None:
    survivors = "\n".join(
        f"{s['scenario']}: {s['operator']} {s['xds_path']}: {s['detail']}" for s in report.survived
    )
    print(
        f"\n{report.total} mutants, {report.equivalent} equivalent, {report.killed} killed, "
        f"score {report.score:.2%}\n{survivors}"
    )
    assert report.total > 1000
    assert report.score >= TARGET, survivors


# Rules whose firing is shown elsewhere: their inputs are not produced by the
# mutation operators (they judge Envoy's own verdict, input cases, or xDS
# shapes no operator writes); tests/test_rules_xds.py and test_check_cli.py
# make each of them fire on purpose-built input.
FIRED_ELSEWHERE = {
    "envoy-accepts-config",
    "case-expectations",
    "regex-program-size",
    "host-rewrite-with-host-header",
    "unique-names",
    "envoy-invalid-values",
    "httproute-named-route-rule",
    "no-orphan-clusters",
    "no-missing-clusters",
    # No operator writes xDS the Envoy model does not model: test_rules_xds does.
    "unmodelled-xds",
    # No fixture sets spec.tls.backend: test_check_cli shows it firing.
    "unchecked-gateway-fields",
    # No operator writes a route condition the Envoy model can only assume (dynamic
    # metadata, a runtime key at 0% or 100%, an internal-address range): they are not
    # mistakes a translator makes; tests/test_assumed_answers.py makes it fire.
    "assumed-answers",
    # The catch-all: every mutant is owned by a feature rule, which is the
    # point; tests/test_ownership.py shows what falls through to it.
    "whole-config-equivalence",
    # The rules of a sidecar's xDS: tests/test_mutate_sidecars.py makes each fire on the
    # mutants of a sidecar (this test mutates the edge's xDS only).
    "mesh-cluster-ip-matching",
    "mesh-consumer-route",
    "mesh-identity",
    "mesh-inbound",
    "mesh-mtls",
    "mesh-no-route-kube-proxy",
    "mesh-passthrough",
    # Configuration mistakes: they read the resources, never the xDS, so no mutant
    # changes them; the scenarios' expected-findings.yaml and
    # tests/test_config_mistakes.py make each of them fire.
    *(r.name for r in CONFIGURATION),
}


def test_every_rule_fires_somewhere_and_is_silent_on_the_fixtures(report: MutationReport) -> None:
    """Each rule has inputs where it fires (a mutant) and where it is silent (every fixture)."""
    never = sorted(
        r.name for r in RULES if r.name not in report.fired and r.name not in FIRED_ELSEWHERE
    )
    print("\nfired:", report.fired)
    assert never == [], f"rules no mutant made fire: {never}"
    assert report.baseline_findings == []
