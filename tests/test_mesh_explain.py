"""`edge-verify explain --from NS/WORKLOAD`: both answers to a mesh request.

The spec model's, and the one check holds it to: the client's sidecar (the Envoy model
on the reference translator's xDS for it, the connection redirected to it), or
kube-proxy when no sidecar captures the connection. With `--xds DUMP --proxy
NS/WORKLOAD` the sidecar is that dump; a request from another client is then
answered by the spec model alone, and explain says why rather than show an answer it
does not have. Mesh cases of a cases table are explained the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES, rel
from test_check_cli import CLI, REQUEST_KEYS, Run, scenario_args
from test_explain_cli import EXPLANATION_KEYS, assert_outcome_shape
from test_mesh_check_xds import route_table, sidecar_dump

from verifier.cli import main


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


def test_text_shows_both_traces_from_the_clients_sidecar(explain: CLI) -> None:
    r = explain(*scenario_args(CONSUMER), "--from", "mesh-client/client", "--request", URL)
    assert r.rc == 0, r.err
    assert "(from mesh-client/client to 10.96.41.2:80)" in r.out
    assert "frontend: Service mesh-apps/echo-v2 port 80" in r.out
    assert "consumer route(s) of namespace mesh-client" in r.out
    assert "Envoy model (sidecar mesh-client/client):" in r.out
    assert "redirected to 127.0.0.1:15001 (capture)" in r.out
    assert "filter chain mesh-apps/echo-v2/80" in r.out
    assert "route #0 'mesh-client/echo-v2-consumer/rule/0/match/0' matches" in r.out
    assert "presents spiffe://cluster.local/ns/mesh-apps/sa/echo-v2, accepted" in r.out
    assert r.out.endswith("\nagree\n")


def test_json_keeps_the_explanation_contract(explain: CLI) -> None:
    r = explain(
        *scenario_args(CONSUMER), "--from", "mesh-apps/client", "--request", URL,
        "--format", "json",
    )  # fmt: skip
    assert r.rc == 0, r.err
    doc = json.loads(r.out)
    assert set(doc) == EXPLANATION_KEYS | {"answered_by"}
    assert set(doc["request"]) == REQUEST_KEYS | {"source"}
    assert doc["request"]["source"] == {"namespace": "mesh-apps", "workload": "client"}
    assert_outcome_shape(doc["spec"])
    assert_outcome_shape(doc["envoy"])
    assert (doc["answered_by"], doc["judged"], doc["agree"]) == (
        "sidecar mesh-apps/client",
        True,
        True,
    )
    # The producer route answers mesh-apps' client (the consumer route is mesh-client's).
    assert doc["spec"]["response_headers"] == doc["envoy"]["response_headers"]
    assert doc["spec"]["response_headers"] == {"x-header-set": ["producer"]}


def test_a_client_without_a_sidecar_is_answered_as_kube_proxy_would(explain: CLI) -> None:
    r = explain(*scenario_args(CONSUMER), "--from", "edge-web/client", "--request", URL)
    assert r.rc == 0, r.err
    assert "kube-proxy (the Envoy model is not asked):" in r.out
    assert "DNAT to a ready endpoint of Service mesh-apps/echo-v2:80" in r.out
    assert r.out.endswith("\nagree\n")


def test_a_sidecar_dump_from_elsewhere_is_explained_and_other_clients_are_not(
    explain: CLI, tmp_path: Path
) -> None:
    """A consumer route leaked into mesh-apps/client's sidecar: explain shows the
    disagreement; mesh-client/client's request is the spec model's alone."""
    doc = sidecar_dump(tmp_path / "apps.json", CONSUMER, "mesh-apps/client")
    other = sidecar_dump(tmp_path / "client.json", CONSUMER, "mesh-client/client")
    table = "outbound/mesh-apps/echo-v2/80"
    route_table(doc, table)["routes"] = route_table(other, table)["routes"]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(doc), encoding="utf-8")
    given = ("--xds", str(broken), "--proxy", "mesh-apps/client")
    url = "GET http://echo-v2.mesh-apps.svc.cluster.local/x"
    r = explain(*scenario_args(CONSUMER), *given, "--from", "mesh-apps/client", "--request", url)
    assert r.rc == 0, r.err
    assert "no route of virtual host 'mesh-apps/echo-v2/80' matches: 404" in r.out
    assert "DISAGREE on: status" in r.out
    r = explain(*scenario_args(CONSUMER), *given, "--from", "mesh-client/client", "--request", url)
    assert r.rc == 0, r.err
    assert "not asked: --xds is the sidecar of mesh-apps/client (--proxy)" in r.out
    assert "NOT JUDGED: one model's answer only" in r.out
    r = explain(
        *scenario_args(CONSUMER), *given[2:], "--from", "mesh-apps/client", "--request", url
    )
    assert r.rc == 2 and r.err.startswith("--proxy:"), r.err


def test_a_host_header_is_the_requests_host_its_port_included(explain: CLI, tmp_path: Path) -> None:
    """curl's -H 'Host: ...': the URL picks the Service and port (echo:80), the Host
    (echo's name with :8080) is what both models read. A scheme redirect without
    port_redirect keeps that port in Envoy, where the spec says 443."""
    scenario = "mesh-scheme-redirect"
    url = "GET http://echo.mesh-apps.svc.cluster.local/scheme"
    host = ("-H", "Host: echo.mesh-apps.svc.cluster.local:8080")
    sent = ("--from", "mesh-apps/client", "--request", url, *host, "--format", "json")
    r = explain(*scenario_args(scenario), *sent)
    assert r.rc == 0, r.err
    doc = json.loads(r.out)
    request = doc["request"]
    assert (request["host"], request["port"], request["address"], request["headers"]) == (
        "echo.mesh-apps.svc.cluster.local:8080",
        80,
        "10.96.41.3",
        {},
    )
    assert doc["agree"] is True
    assert doc["spec"]["redirect"]["port"] == doc["envoy"]["redirect"]["port"] == 443
    dump = sidecar_dump(tmp_path / "apps.json", scenario, "mesh-apps/client")
    for route in route_table(dump, "outbound/mesh-apps/echo/80")["routes"]:
        if "host_redirect" not in route.get("redirect", {"host_redirect": ""}):
            del route["redirect"]["port_redirect"]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(dump), encoding="utf-8")
    given = ("--xds", str(broken), "--proxy", "mesh-apps/client")
    doc = json.loads(explain(*scenario_args(scenario), *given, *sent).out)
    assert doc["agree"] is False
    assert (doc["spec"]["redirect"]["port"], doc["envoy"]["redirect"]["port"]) == (443, 8080)
    two = ("-H", "Host: a.example")
    r = explain(*scenario_args(scenario), *sent, *two)
    assert r.rc == 2 and r.err.startswith("-H:"), r.err


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
    assert all(d["spec_meets_expectation"] and d["envoy_meets_expectation"] for d in docs)
    # Each by its client's sidecar, but the edge-web client's: kube-proxy's.
    assert {d["answered_by"] for d in docs} == {
        "sidecar mesh-apps/client", "sidecar mesh-client/client", "kube-proxy",
    }  # fmt: skip
    text = explain(*scenario_args(CONSUMER), "--cases", table)
    assert text.out.count("case expectation: spec met, Envoy met") == 7


def test_a_mistyped_service_or_port_in_the_url_says_what_was_meant(explain: CLI) -> None:
    """A trial's: a typo in the Service got no suggestion (every other lookup has one),
    and a wrong port was told to "put the port in the URL", where it already was."""
    sent = ("--from", "mesh-client/client", "--request")
    r = explain(*scenario_args(CONSUMER), *sent, "GET http://ech.mesh-apps/x")
    assert r.rc == 2 and "did you mean echo.mesh-apps?" in r.err, r.err
    r = explain(*scenario_args(CONSUMER), *sent, "GET http://echo.mesh-apps:81/x")
    assert r.rc == 2 and "name one of them in the URL (http://echo.mesh-apps:" in r.err, r.err
