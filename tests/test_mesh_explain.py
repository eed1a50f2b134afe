"""`edge-verify explain --from NS/WORKLOAD`: the spec model's answer to a mesh request.

The sidecar's Envoy model does not answer mesh requests yet; explain says so in its
place (text and JSON) rather than show an answer it does not have. Mesh cases of a
cases table are explained the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES, rel
from test_check_cli import CLI, REQUEST_KEYS, Run, scenario_args
from test_explain_cli import EXPLANATION_KEYS, assert_outcome_shape

from verifier.cli import main
from verifier.explain import ENVOY_NOT_YET


@pytest.fixture
def explain(capsys: pytest.CaptureFixture[str], repo_cwd: Path) -> CLI:
    """``edge-verify explain ARGS`` in this process, from the repo root."""

    def run(*args: str) -> Run:
        capsys.readouterr()
        rc = main(["explain", *args])
        return Run(rc, *capsys.readouterr())

    return run


CONSUMER = "mesh-consumer-route"
URL = "GET http://echo-v2.mesh-apps.svc.cluster.local/only-consumer/x"


def test_text_shows_the_spec_trace_and_says_the_envoy_model_is_not_asked(explain: CLI) -> None:
    r = explain(*scenario_args(CONSUMER), "--from", "mesh-client/client", "--request", URL)
    assert r.rc == 0, r.err
    assert "(from mesh-client/client to 10.96.41.2:80)" in r.out
    assert "frontend: Service mesh-apps/echo-v2 port 80" in r.out
    assert "consumer route(s) of namespace mesh-client" in r.out
    assert f"Envoy model: not asked: {ENVOY_NOT_YET}" in r.out
    assert "NOT JUDGED: one model's answer only" in r.out
    assert "\nagree\n" not in r.out and "DISAGREE" not in r.out  # no verdict it cannot give


def test_json_keeps_the_explanation_contract(explain: CLI) -> None:
    r = explain(
        *scenario_args(CONSUMER), "--from", "mesh-apps/client", "--request", URL,
        "--format", "json",
    )  # fmt: skip
    assert r.rc == 0, r.err
    doc = json.loads(r.out)
    assert set(doc) == EXPLANATION_KEYS | {"envoy_model"}
    assert set(doc["request"]) == REQUEST_KEYS | {"source"}
    assert doc["request"]["source"] == {"namespace": "mesh-apps", "workload": "client"}
    assert_outcome_shape(doc["spec"])
    assert doc["envoy"] is None and doc["judged"] is False and doc["agree"] is None
    # The producer route answers mesh-apps' client (the consumer route is mesh-client's).
    assert doc["spec"]["response_headers"] == {"x-header-set": ["producer"]}


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--from", "mesh-client", "--request", URL], "--from"),
        (["--from", "mesh-client/nobody", "--request", URL], "--from"),
        (["--from", "mesh-client/client", "--request", "GET http://nowhere.example/"], "--request"),
        (
            ["--from", "mesh-client/client", "--request", "GET http://echo.mesh-apps:81/"],
            "--request",
        ),
        (["--from", "mesh-client/client", "--request", "GET https://echo.mesh-apps/"], "--request"),
        (["--from", "mesh-client/client", "--request", URL, "--gateway", "a/b"], "--gateway"),
        (["--from", "mesh-client/client", "--cases", "x.yaml"], "--from"),
    ],
)
def test_bad_mesh_requests_are_input_errors(explain: CLI, args: list[str], field: str) -> None:
    r = explain(*scenario_args(CONSUMER), *args)
    assert r.rc == 2, r.out
    assert r.err.startswith(f"{field}:"), r.err
    assert "Traceback" not in r.err


def test_a_mesh_cases_table_is_explained_and_met(explain: CLI) -> None:
    table = rel(FIXTURES / CONSUMER / "cases.yaml")
    r = explain(*scenario_args(CONSUMER), "--cases", table, "--format", "json")
    assert r.rc == 0, r.err
    docs = json.loads(r.out)
    assert len(docs) == 7
    assert all(d["spec_meets_expectation"] and d["envoy"] is None for d in docs)
    text = explain(*scenario_args(CONSUMER), "--cases", table)
    assert text.out.count("case expectation: spec met") == 7
