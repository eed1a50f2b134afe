"""`edge-verify explain`: both models' traces and outcomes, and its JSON contract.

explain is where a finding is investigated, so its JSON is a contract (asserted key by
key), its text shows both traces, a finding's request replayed through it shows the
disagreement, and a fixture's cases table replayed through it meets every expectation.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import BASE, FIXTURES, rel
from test_check_cli import (
    CLI,
    OUTCOME_KEYS,
    REQUEST_KEYS,
    Run,
    _doc_commands,
    _prefix_loses_boundary,
    run_process,
    scenario_args,
    translated,
    xds_route,
)
from user_scenario import write

from verifier.cli import build_parser, main

EXPLANATION_KEYS = {
    "name",
    "request",
    "spec",
    "envoy",
    "spec_meets_expectation",
    "envoy_meets_expectation",
    "judged",
    "agree",
    "differs_in",
    "caveats",
    "notes",
}
FORWARDED_KEYS = {"method", "host", "path", "headers"}
ROUTE_KEYS = {"xds_name", "httproute", "rule", "match", "xds_path"}
BACKEND_KEYS = {"namespace", "name", "port", "weight"}
REDIRECT_KEYS = {"scheme", "host", "port", "path"}
TIMEOUT_KEYS = {"request_ms", "backend_ms"}

HEADERS = "httproute-header-matching"
HOST = "header-matching.example.com"


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], repo_cwd: Path) -> CLI:
    """``edge-verify ARGS`` in this process, from the repo root."""

    def run(*args: str) -> Run:
        capsys.readouterr()
        rc = main(list(args))
        out, err = capsys.readouterr()
        return Run(rc, out, err)

    return run


def assert_outcome_shape(outcome: dict[str, Any]) -> None:
    assert set(outcome) == OUTCOME_KEYS
    assert all(set(b) == BACKEND_KEYS for b in outcome["backends"] + outcome["mirrors"])
    assert outcome["request"] is None or set(outcome["request"]) == FORWARDED_KEYS
    assert outcome["redirect"] is None or set(outcome["redirect"]) == REDIRECT_KEYS
    assert outcome["route"] is None or set(outcome["route"]) == ROUTE_KEYS
    assert set(outcome["timeouts"]) == TIMEOUT_KEYS


def assert_explanation_shape(doc: dict[str, Any]) -> None:
    assert set(doc) == EXPLANATION_KEYS
    assert set(doc["request"]) == REQUEST_KEYS
    assert_outcome_shape(doc["spec"])
    assert_outcome_shape(doc["envoy"])
    assert isinstance(doc["judged"], bool)
    assert isinstance(doc["agree"], bool) if doc["judged"] else doc["agree"] is None
    assert set(doc["notes"]) == {"spec", "envoy"}
    assert all(set(c) == {"subject", "assumption", "decides"} for c in doc["caveats"])


# ---------------------------------------------------------------- --request


def test_request_json_contract(cli: CLI) -> None:
    r = cli(
        "explain",
        *scenario_args(HEADERS),
        "--request",
        f"GET http://{HOST}/hdr",
        "-H",
        "Version: two",
        "--format",
        "json",
    )
    assert (r.rc, r.err) == (0, "")
    doc = r.json()
    assert_explanation_shape(doc)
    assert doc["agree"] is True
    # No cases table, so no expectation to meet.
    assert doc["spec_meets_expectation"] is None and doc["envoy_meets_expectation"] is None
    assert doc["request"] == {
        "method": "GET",
        "scheme": "http",
        "host": HOST,
        "port": 80,
        # edge-infra/same-namespace's own address (verifier.gatewayapi.addresses)
        "address": "192.0.2.244",
        "proxy_port": None,
        "path": "/hdr",
        "headers": {"version": ["two"]},
        "sni": None,
        "client_cert": None,
    }
    v2 = [{"namespace": "edge-infra", "name": "infra-backend-v2", "port": 8080, "weight": 1}]
    for side in ("spec", "envoy"):
        outcome = doc[side]
        assert outcome["status"] == 200 and outcome["backends"] == v2
        assert outcome["request"] == {
            "method": "GET",
            "host": HOST,
            "path": "/hdr",
            "headers": {"version": ["two"]},
        }
        assert outcome["redirect"] is None
        route = outcome["route"]
        assert (route["httproute"], route["rule"], route["match"]) == (
            "edge-infra/header-matching",
            1,
            0,
        )
    # Only the Envoy side names the xDS route that decided.
    assert doc["envoy"]["route"]["xds_name"] == "edge-infra/header-matching/rule/1/match/0"
    assert doc["envoy"]["route"]["xds_path"].startswith(
        f"routes[edge-edge-infra-same-namespace-80].virtual_hosts[{HOST}]"
    )
    assert doc["spec"]["route"]["xds_path"] is None


def test_redirect_outcome(cli: CLI) -> None:
    scenario = "httproute-303-redirect-status-code"
    r = cli(
        "explain",
        *scenario_args(scenario),
        "--request",
        "POST http://redirect-303.example.com/status-303/x?q=1",
        "--format",
        "json",
    )
    doc = r.json()
    assert_explanation_shape(doc)
    assert doc["agree"] is True
    for side in ("spec", "envoy"):
        assert doc[side]["status"] == 303
        assert doc[side]["request"] is None and doc[side]["backends"] == []
        assert doc[side]["redirect"] == {
            "scheme": "http",
            "host": "example.org",
            "port": 80,
            "path": "/status-303/x",
        }


def test_text_shows_both_traces() -> None:
    r = run_process(
        "explain",
        *scenario_args(HEADERS),
        "--request",
        f"GET http://{HOST}/hdr",
        "-H",
        "Version: two",
    )
    assert (r.rc, r.err) == (0, "")
    lines = r.out.splitlines()
    assert lines[0] == f"request: GET http://{HOST}/hdr (to 192.0.2.244:80) -H 'version: two'"
    spec, envoy = lines.index("spec model:"), lines.index("Envoy model:")
    assert spec < envoy
    for start in (spec, envoy):  # each trace: indented steps up to a blank line
        steps = lines[start + 1 : lines.index("", start)]
        assert steps and all(s.startswith("  ") for s in steps)
    assert any("infra-backend-v2" in s for s in lines[spec:envoy])
    assert any("edge-infra/header-matching/rule/1/match/0" in s for s in lines[envoy:])
    assert [ln.split(":")[0] for ln in lines[-3:-1]] == ["spec outcome", "Envoy outcome"]
    assert lines[-1] == "agree"


# ---------------------------------------------------------------- --cases


def _case_names(scenario: str) -> list[str]:
    cases = yaml.safe_load((FIXTURES / scenario / "cases.yaml").read_text(encoding="utf-8"))
    return [c["name"] for c in cases]


def explain_cases(cli: CLI, scenario: str) -> list[dict[str, Any]]:
    cases = rel(FIXTURES / scenario / "cases.yaml")
    r = cli("explain", *scenario_args(scenario), "--cases", cases, "--format", "json")
    assert (r.rc, r.err) == (0, ""), r.err
    docs: list[dict[str, Any]] = r.json()
    return docs


@pytest.mark.parametrize(
    "scenario",
    [
        "httproute-path-prefix-matching",
        HEADERS,
        "httproute-request-redirect",
        "httproute-weighted-backends",
        "httproute-request-mirror",
    ],
)
def test_cases_table_meets_every_expectation(scenario: str, cli: CLI) -> None:
    docs = explain_cases(cli, scenario)
    assert [d["name"] for d in docs] == _case_names(scenario)
    for doc in docs:
        assert_explanation_shape(doc)
        assert doc["spec_meets_expectation"] is True, doc["name"]
        assert doc["envoy_meets_expectation"] is True, doc["name"]
        assert doc["agree"] is True, doc["name"]


# These cases describe what the client sees from the echo backend (a `?delay=` answered
# 504 by a timeout, headers the echo pod adds to its response, a WebSocket echo).
# `check` (rule case-expectations) applies the echo model before judging a case;
# explain does not, so it says "not met" for cases check passes.
ECHO_DEPENDENT = [
    "httproute-backend-timeout",
    "httproute-request-timeout",
    "httproute-response-header-modification",
    "httproute-backend-protocol-websocket",
]


@pytest.mark.parametrize("scenario", ECHO_DEPENDENT)
def test_explain_judges_cases_as_check_does(scenario: str, cli: CLI) -> None:
    cases = rel(FIXTURES / scenario / "cases.yaml")
    assert cli("check", *scenario_args(scenario), "--cases", cases).rc == 0
    unmet = [
        d["name"]
        for d in explain_cases(cli, scenario)
        if not (d["spec_meets_expectation"] and d["envoy_meets_expectation"])
    ]
    assert unmet == []


def test_cases_text_says_whether_each_case_is_met(cli: CLI) -> None:
    scenario = "httproute-path-prefix-matching"
    r = cli("explain", *scenario_args(scenario), "--cases", rel(FIXTURES / scenario / "cases.yaml"))
    assert r.rc == 0
    verdicts = [ln for ln in r.out.splitlines() if ln.startswith("case expectation: ")]
    assert verdicts == ["case expectation: spec met, Envoy met"] * len(_case_names(scenario))


# ---------------------------------------------------------------- gateways


@pytest.fixture
def second_gateway_on_80(tmp_path: Path) -> Path:
    gw = tmp_path / "gateway.yaml"
    gw.write_text(
        "apiVersion: gateway.networking.k8s.io/v1\n"
        "kind: Gateway\n"
        "metadata: {name: second, namespace: edge-infra}\n"
        "spec:\n"
        "  gatewayClassName: aether\n"
        "  listeners:\n"
        "  - {name: http, port: 80, protocol: HTTP}\n",
        encoding="utf-8",
    )
    return gw


def test_ambiguous_gateway_asks_for_gateway(second_gateway_on_80: Path, cli: CLI) -> None:
    args = ["explain", rel(BASE), str(second_gateway_on_80), "--request", "GET http://a.example/"]
    (line,) = cli(*args).error_lines()
    assert line.startswith("--gateway: ") and line.endswith("[ambiguous]")
    assert "--gateway NAMESPACE/NAME" in line
    assert "edge-infra/same-namespace" in line and "edge-infra/second" in line

    named = cli(*args, "--gateway", "edge-infra/second", "--format", "json")
    assert named.rc == 0
    assert named.json()["spec"]["status"] == 404  # no route on the second Gateway

    (line,) = cli(*args, "--gateway", "edge-infra/nope").error_lines()
    assert line.startswith("--gateway: ") and line.endswith("[not-found]")


# ---------------------------------------------------------------- broken xDS


def test_findings_request_replayed_shows_the_disagreement(tmp_path: Path, cli: CLI) -> None:
    scenario = "httproute-path-prefix-matching"
    doc = translated(tmp_path / "xds.json", scenario)
    route, xds_path = xds_route(doc, "edge-infra/path-prefix/rule/0/match/0")
    _prefix_loses_boundary(route)
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(doc), encoding="utf-8")

    check = cli("check", *scenario_args(scenario), "--xds", str(broken), "--format", "json")
    (finding,) = check.json()["findings"]
    req = finding["request"]
    request = f"{req['method']} {req['scheme']}://{req['host']}{req['path']}"
    headers = [x for k, vs in req["headers"].items() for v in vs for x in ("-H", f"{k}: {v}")]
    args = ["explain", *scenario_args(scenario), "--request", request, *headers]

    r = cli(*args, "--xds", str(broken), "--format", "json")
    assert r.rc == 0  # explain explains; it does not judge
    explained = r.json()
    assert explained["agree"] is False
    assert explained["spec"] == finding["expected"]
    assert explained["envoy"] == finding["actual"]
    assert explained["envoy"]["route"]["xds_path"] == xds_path

    text = cli(*args, "--xds", str(broken)).out.splitlines()
    assert text[-1] == "DISAGREE on: backends"

    # The reference translation of the same resources gets it right.
    assert cli(*args, "--format", "json").json()["agree"] is True


def test_a_host_header_is_the_requests_host(cli: CLI) -> None:
    """-H 'Host: ...' (with a port the listener is not on) is the request's Host, as curl
    sends it; the URL still picks the Gateway port and, for https, the SNI."""
    r = cli(
        "explain", *scenario_args("httproute-scheme-redirect"),
        "--request", "GET http://scheme-redirect.example.com/scheme",
        "-H", "Host: scheme-redirect.example.com:8080", "--format", "json",
    )  # fmt: skip
    assert (r.rc, r.err) == (0, "")
    doc = r.json()
    assert (doc["request"]["host"], doc["request"]["port"], doc["request"]["headers"]) == (
        "scheme-redirect.example.com:8080",
        80,
        {},
    )
    assert doc["agree"] is True
    assert doc["spec"]["redirect"]["port"] == doc["envoy"]["redirect"]["port"] == 443


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("extra", "start", "code"),
    [
        (["--request", "GET /no-host"], "--request: ", "request"),
        (["--request", "GET ftp://a.example/"], "--request: ", "request"),
        (["--request", "GET http://a.example/", "-H", "no-colon"], "-H: ", "header"),
        ([], "explain: ", "required"),
        # Found by fuzzing explain --request: these ended in tracebacks.
        (["--request", " "], "--request: ", "request"),
        (["--request", "GET http://a.example:99999/"], "--request: ", "request"),
        (["--request", "GET http://a.example:x/"], "--request: ", "request"),
        (["--request", "GET http://a.example:0/"], "--request: ", "request"),
        (["--request", "G\x01T http://a.example/"], "--request: ", "request"),
    ],
    ids=[
        "no-host",
        "scheme",
        "header",
        "nothing-to-explain",
        "blank",
        "port-range",
        "port-text",
        "port-zero",
        "method-not-token",
    ],
)
def test_bad_request_exits_2(extra: list[str], start: str, code: str, cli: CLI) -> None:
    (line,) = cli("explain", *scenario_args(HEADERS), *extra).error_lines()
    assert line.startswith(start) and line.endswith(f"[{code}]"), line


def test_docs_explain_command_lines_parse() -> None:
    commands = _doc_commands("explain.md")
    assert len(commands) >= 3, "docs/explain.md lost its examples"
    parser = build_parser()
    for args in commands:
        try:
            parser.parse_args(args)
        except SystemExit:
            pytest.fail(f"docs/explain.md: edge-verify {shlex.join(args)} does not parse")


def test_request_with_a_client_certificate(cli: CLI) -> None:
    """--client-cert-issuer: the request presents a certificate of that CA; on the
    per-port validation only CA b's gets past the handshake (status 0: none)."""
    scenario = "gateway-frontend-client-certificate-validation"
    pki = FIXTURES / scenario
    statuses = {}
    for letter in ("a", "b"):
        r = cli(
            "explain",
            *scenario_args(scenario),
            "--request",
            "GET https://second.example.com:8452/",
            "--client-cert-issuer",
            rel(pki / f"client-ca-{letter}.crt"),
            "--format",
            "json",
        )
        assert r.rc == 0, r.err
        doc = json.loads(r.out)
        assert doc["agree"] is True and doc["request"]["client_cert"]["issuer"]
        statuses[letter] = (doc["spec"]["status"], doc["envoy"]["status"])
    assert statuses == {"a": (0, 0), "b": (200, 200)}
    r = cli(
        "explain",
        *scenario_args(scenario),
        "--request",
        "GET https://second.example.com:8452/",
        "--client-cert-issuer",
        rel(pki / "client-a.key"),
    )
    assert r.rc == 2 and "--client-cert-issuer" in r.err and "Traceback" not in r.err


def test_request_on_a_listener_set_port(cli: CLI) -> None:
    """A port only a ListenerSet's listener uses still picks its Gateway."""
    r = cli(
        "explain",
        *scenario_args("listener-set"),
        "--request",
        "GET http://a.ls.example:8171/",
        "--format",
        "json",
    )
    assert r.rc == 0, r.err
    doc = json.loads(r.out)
    assert doc["agree"] is True
    assert [b["name"] for b in doc["spec"]["backends"]] == ["infra-backend-v2"]


@pytest.mark.parametrize(
    ("host", "path", "reason"),
    [
        ("cart.shop.example.com", "/nothing/here", "hostnames match but no match fits"),
        ("pay.shop.example.com", "/cart/1", "no hostname matching 'pay.shop.example.com'"),
    ],
)
def test_the_index_says_why_it_skipped_a_route(
    host: str, path: str, reason: str, tmp_path: Path, cli: CLI
) -> None:
    """A second new user was told a route was skipped for "no hostname matches ... or no
    match fits the path's first segment" when its hostname did match: one of the two is
    named, with the segment that fitted nothing."""
    r = cli("explain", str(write(tmp_path / "shop")), "--request", f"GET http://{host}{path}")
    assert r.rc == 0, r.err
    (line,) = [ln for ln in r.out.splitlines() if "skipped by the index" in ln]
    assert reason in line and " or " not in line, line
    assert ("'/nothing'" in line) == (host.startswith("cart")), line
