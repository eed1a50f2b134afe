"""`check` on mesh scenarios: mesh requests and cases judged by the spec model and by
their client's sidecar (the Envoy model on the reference translator's xDS for it) or
kube-proxy; the mesh's configuration mistakes declared by their scenario; and a
profile that does not claim the mesh (gateway-api) leaving those unasked, its mesh
cases judged by the spec model alone (EV701 when it misses one)."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import BASE, FIXTURES
from verifier.rules import RULES

from verifier import pipeline

STATUS = FIXTURES / "mesh-status-no-matching-parent"
CONSUMER = FIXTURES / "mesh-consumer-route"


def _check(*paths: Path, profile: str = "aether-edge") -> pipeline.ScenarioResult:
    opts = pipeline.CheckOptions(profile=profile)
    (scenario,) = pipeline.discover([str(p) for p in paths], opts)
    return pipeline.check_scenario(scenario, opts, RULES)


def test_declared_mesh_mistakes_are_reported_and_expected() -> None:
    result = _check(BASE, STATUS)
    assert result.input_errors == [] and result.findings == []
    assert sorted(f.code for f in result.expected) == ["EV916", "EV917", "EV917", "EV918"]
    # Every mesh request and case judged by both sides: none by the spec model alone.
    assert result.mesh_requests > 0 and result.mesh_unjudged == 0 and result.mesh_cases == 0


def test_a_profile_without_the_mesh_skips_its_rule_and_its_declared_findings() -> None:
    result = _check(BASE, STATUS, profile="gateway-api")
    assert result.input_errors == [] and result.findings == [] and result.expected == []
    skipped = {name for name, _why in result.skipped}
    assert {"mesh-route-accepted", "mesh-consumer-route", "mesh-mtls"} <= skipped
    assert result.mesh_requests == 0 and result.mesh_cases == 4  # the spec model's alone


def _wrong_case(tmp_path: Path) -> Path:
    """mesh-consumer-route with one case expecting the producer's header where the
    consumer route answers."""
    shutil.copy(CONSUMER / "resources.yaml", tmp_path / "resources.yaml")
    table = (CONSUMER / "cases.yaml").read_text()
    wrong = table.replace("X-Header-Set: consumer}}", "X-Header-Set: producer}}", 1)
    assert wrong != table
    (tmp_path / "cases.yaml").write_text(wrong)
    return tmp_path


def test_a_mesh_case_both_sides_miss_is_an_ev703_at_its_line(tmp_path: Path) -> None:
    result = _check(BASE, _wrong_case(tmp_path))
    assert [(f.code, f.line, f.resource) for f in result.findings] == [
        ("EV703", 1, "case consumer-namespace-gets-its-consumer-route")
    ]


def test_without_the_mesh_a_case_the_spec_model_misses_is_an_ev701(tmp_path: Path) -> None:
    result = _check(BASE, _wrong_case(tmp_path), profile="gateway-api")
    assert [(f.code, f.line, f.resource) for f in result.findings] == [
        ("EV701", 1, "case consumer-namespace-gets-its-consumer-route")
    ]
    assert "the spec model does not meet" in result.findings[0].message
