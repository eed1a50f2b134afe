"""`edge-verify live` and `edge-verify run` as users and CI meet them.

The whole fixture suite runs once per session, in-process (``verifier.cli.main``),
through `run` (tests/live_suite.py): every case must pass live, and every report
must say Envoy ran the xDS as checked (in a network namespace of the run's own,
not rewritten). tests/test_live_fixtures.py asserts each case of that same run on
its own; this is the command's contract: exit codes, the JSON shape, the three-way verdict
on a broken xDS, and the ConformanceReport held to the upstream Go type.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import aiohttp
import pytest
import yaml
from conftest import BASE, FIXTURES, REPO_ROOT, edge_scenarios, mesh_scenarios, rel
from live_suite import SuiteRun

from verifier.cli import main
from verifier.live.echo import EchoBackend, EchoPort
from verifier.live.echo_model import echo_reply
from verifier.live.envoy_process import envoy_available
from verifier.live.results import CaseResult, LiveReport, ScenarioRun
from verifier.report import live
from verifier.report.conformance import Implementation, conformance_report
from verifier.semantics.request import Request


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str


CLI = Callable[..., Run]


@pytest.fixture
def repo_cwd(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(REPO_ROOT)
    return REPO_ROOT


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], repo_cwd: Path) -> CLI:
    """``edge-verify ARGS`` in this process, from the repo root."""

    def run(*args: str) -> Run:
        capsys.readouterr()
        rc = main(list(args))
        out, err = capsys.readouterr()
        return Run(rc, out, err)

    return run


def scenario_args(name: str) -> list[str]:
    return [rel(BASE), rel(FIXTURES / name)]


# The JSON report's contract (issue 13): these keys, no others.
CASE_KEYS = {"name", "passed", "attempts", "expected", "observed", "spec_agrees"}
CASE_KEYS |= {"envoy_model_agrees", "xds_route", "scenario", "kind", "skipped", "request"}
CASE_KEYS |= {"odd_one_out", "problems", "attribution"}
SUMMARY_KEYS = {"passed", "failed", "skipped", "seconds", "rewritten", "remote", "unattributed"}
ATTRIBUTION_KEYS = {"state", "route", "cluster", "routes", "model_route", "spec_route"}
ATTRIBUTION_KEYS |= {"verdict", "why"}


def assert_report_shape(doc: dict[str, Any]) -> None:
    # "mesh": how each scenario's mesh ran, when its mesh cases were sent through sidecars
    assert set(doc) - {"mesh"} == {"cases", "findings", "additions", "consistency", "summary"}
    assert set(doc["summary"]) == SUMMARY_KEYS
    assert doc["consistency"] == {
        "successes": 3,
        "budget_seconds": 60.0,
        "request_timeout_seconds": 10.0,
    }
    for case in doc["cases"]:
        assert set(case) == CASE_KEYS, case["name"]
        assert isinstance(case["passed"], bool)
        assert isinstance(case["attempts"], int)
        assert case["spec_agrees"] in (True, False, None)
        assert case["envoy_model_agrees"] in (True, False, None)
        assert isinstance(case["xds_route"], str)
        if not case["skipped"]:
            assert set(case["attribution"]) == ATTRIBUTION_KEYS, case["name"]


def _all_cases(scenarios: list[Path]) -> int:
    total = 0
    for scenario in scenarios:
        data = yaml.safe_load((scenario / "cases.yaml").read_text(encoding="utf-8"))
        total += len(data or [])
    return total


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
def test_run_passes_every_case_of_every_fixture(fixtures_run: SuiteRun) -> None:
    """`edge-verify run fixtures/`, the README's first command: check clean, every case
    passes live (3 in a row each), with Envoy running exactly the checked xDS in a
    network namespace of its own (`rewritten: false`), the mesh cases from their
    client pods through their sidecars, served unrewritten too. The session's one run
    (tests/live_suite.py), whose cases tests/test_live_fixtures.py asserts one by one;
    its report as `--format json` writes it."""
    r = fixtures_run
    assert r.code == 0, r.err[-3000:]
    # Clean: no failure, no finding, nothing skipped (the summaries are on stderr).
    assert r.out == ""
    assert r.err.count(live.summary_line(r.report["summary"])) == 1
    doc = r.report
    assert_report_shape(doc)
    cases = doc["cases"]
    failed = [f"{c['scenario']}::{c['name']}: {c['problems']}" for c in cases if not c["passed"]]
    assert failed == []
    every = _all_cases(edge_scenarios()) + _all_cases(mesh_scenarios())
    assert doc["summary"]["passed"] == len(cases) == every
    assert doc["summary"]["skipped"] == 0
    assert doc["summary"]["rewritten"] is False  # Envoy ran exactly the checked xDS
    assert doc["findings"] == []
    meshed = {s.name for s in mesh_scenarios()}
    assert all(
        c["spec_agrees"] and c["envoy_model_agrees"] for c in cases if c["scenario"] not in meshed
    )
    # Mesh cases went through their client's sidecar (the Envoy model asked: it agrees),
    # or, from a client outside the mesh, by kube-proxy alone (the Envoy model not asked).
    mesh = [c for c in cases if c["scenario"] in meshed]
    assert all(c["spec_agrees"] and c["envoy_model_agrees"] in (True, None) for c in mesh)
    assert set(doc["mesh"]) == {c["scenario"] for c in mesh}
    # Every answer is attributed, from Envoy's (or the client sidecar's) access log, to
    # the route the Envoy model chose (a 404 to none, a refused handshake to none: no
    # route ran; a mesh request no sidecar routed: kube-proxy delivered it), and the
    # reported xds_route is the logged one; the log is listed as the one addition.
    assert doc["summary"]["unattributed"] == 0
    stray = [f"{c['scenario']}::{c['name']}: {c['attribution']}" for c in cases]
    odd = [s for c, s in zip(cases, stray, strict=True) if not _attributed(c, c in mesh)]
    assert odd == []
    assert set(doc["additions"]) == {c["scenario"] for c in cases}
    assert all("access log added" in a for adds in doc["additions"].values() for a in adds)
    assert "edge-verify check: " in r.err and "edge-verify live: " in r.err


def _attributed(case: dict[str, Any], mesh: bool) -> bool:
    """The case's answers came through the route the Envoy model chose, says the log
    (a mesh case's ``xds_route``: the sidecar's route by name)."""
    a = case["attribution"]
    if a["verdict"] != "agrees" or a["route"] != a["model_route"]:
        return False
    if a["state"] == "no-route":
        return case["xds_route"] == "" and a["route"] is None
    logged = case["xds_route"] == a["route"] if mesh else case["xds_route"].startswith("routes[")
    return a["state"] == "attributed" and logged


def _mutated_prefix(tmp_path: Path, cli: CLI) -> Path:
    """The path-prefix scenario's xDS with the `/foo` match's segment boundary lost."""
    dump = tmp_path / "xds.json"
    r = cli("translate", *scenario_args("httproute-path-prefix-matching"), "-o", str(dump))
    assert r.code == 0, r.err
    text = dump.read_text(encoding="utf-8")
    broken = text.replace('"path_separated_prefix": "/foo"', '"prefix": "/foo"', 1)
    assert broken != text
    out = tmp_path / "mutated.json"
    out.write_text(broken, encoding="utf-8")
    return out


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
def test_lost_segment_boundary_fails_exactly_its_case_and_blames_the_xds(
    cli: CLI, tmp_path: Path
) -> None:
    mutated = _mutated_prefix(tmp_path, cli)
    r = cli(
        "live",
        *scenario_args("httproute-path-prefix-matching"),
        "--xds",
        str(mutated),
        "--format",
        "json",
        "--consistency-budget",
        "2",
    )
    assert r.code == 1, r.err
    doc = json.loads(r.out)
    failed = [c for c in doc["cases"] if not c["passed"]]
    assert [c["name"] for c in failed] == ["prefix-respects-segment-boundary"]
    case = failed[0]
    # The Envoy model differs from the spec, and real Envoy does what it says.
    assert (case["spec_agrees"], case["envoy_model_agrees"]) == (False, True)
    assert case["odd_one_out"] == "xds"
    assert case["xds_route"].endswith("routes[0]")
    assert [(f["code"], f["rule"]) for f in doc["findings"]] == [("EV803", "live-three-way")]
    finding = doc["findings"][0]
    assert finding["location"].endswith("httproute-path-prefix-matching/resources.yaml:39")
    assert finding["xds_path"] == case["xds_route"]


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
def test_nothing_to_run_is_bad_input(cli: CLI) -> None:
    """Fail closed: a Gateway with no cases and no --witnesses checks nothing live."""
    r = cli("live", rel(BASE))
    assert r.code == 2
    assert "[nothing-to-run]" in r.err


# ---------------------------------------------------------------- the ConformanceReport

# The upstream Go type, conformance/apis/v1 (conformancereport.go, profilereport.go;
# Result and Statistics as in the v1beta1 package they were moved from). Each struct:
# JSON name -> (type, required). A field is required unless its tag says omitempty;
# an embedded struct with `json:",inline"` contributes its fields; Statistics has no
# json tags, so Go's encoder writes its field names as they are.
STR, INT, LIST, OBJ = "string", "integer", "list", "object"
TYPE_META = {"apiVersion": (STR, False), "kind": (STR, False)}  # metav1.TypeMeta, omitempty
IMPLEMENTATION = {
    "organization": (STR, True),
    "project": (STR, True),
    "url": (STR, True),
    "version": (STR, True),
    "contact": (LIST, True),
}
CONFORMANCE_REPORT = {
    **TYPE_META,
    "implementation": (OBJ, True),
    "date": (STR, True),
    "gatewayAPIVersion": (STR, True),
    "mode": (STR, True),
    "gatewayAPIChannel": (STR, True),
    "profiles": (LIST, True),
}
PROFILE_REPORT = {
    "name": (STR, True),
    "summary": (STR, True),
    "core": (OBJ, True),
    "extended": (OBJ, False),
}
STATUS = {
    "result": (STR, True),
    "statistics": (OBJ, True),
    "skippedTests": (LIST, False),
    "failedTests": (LIST, False),
}
EXTENDED_STATUS = {
    **STATUS,
    "supportedFeatures": (LIST, False),
    "unsupportedFeatures": (LIST, False),
}
STATISTICS = {"Passed": (INT, True), "Skipped": (INT, True), "Failed": (INT, True)}
RESULTS = {"success", "partial", "failure"}  # var Success/Partial/Failure Result
PYTHON = {STR: str, INT: int, LIST: list, OBJ: dict}


def conforms(doc: Any, shape: dict[str, tuple[str, bool]], where: str) -> list[str]:
    """Why ``doc`` is not an instance of the Go struct ``shape``; empty when it is."""
    if not isinstance(doc, dict):
        return [f"{where}: not an object"]
    problems = [f"{where}.{k}: not a field of the type" for k in doc if k not in shape]
    for name, (kind, required) in shape.items():
        if name not in doc:
            if required:
                problems.append(f"{where}.{name}: required")
            continue
        value = doc[name]
        if not isinstance(value, PYTHON[kind]) or isinstance(value, bool):
            problems.append(f"{where}.{name}: expected {kind}, got {type(value).__name__}")
        elif kind == LIST and not all(isinstance(v, str) or name == "profiles" for v in value):
            problems.append(f"{where}.{name}: expected a list of strings")
    return problems


def report_problems(doc: Any) -> list[str]:
    problems = conforms(doc, CONFORMANCE_REPORT, "$")
    if not isinstance(doc, dict):
        return problems
    problems += conforms(doc.get("implementation"), IMPLEMENTATION, "$.implementation")
    for i, profile in enumerate(doc.get("profiles") or []):
        at = f"$.profiles[{i}]"
        problems += conforms(profile, PROFILE_REPORT, at)
        for level, shape in (("core", STATUS), ("extended", EXTENDED_STATUS)):
            status = profile.get(level)
            if status is None:
                continue
            problems += conforms(status, shape, f"{at}.{level}")
            if status.get("result") not in RESULTS:
                problems.append(f"{at}.{level}.result: {status.get('result')!r} not a Result")
            problems += conforms(status.get("statistics"), STATISTICS, f"{at}.{level}.statistics")
    return problems


def test_the_conformance_check_catches_what_the_type_forbids() -> None:
    """The check itself: a missing required field, an unknown one, a bad enum value."""
    good = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "ConformanceReport",
        "implementation": {
            "organization": "o",
            "project": "p",
            "url": "u",
            "version": "v",
            "contact": [],
        },
        "date": "d",
        "gatewayAPIVersion": "v1.5.0",
        "mode": "default",
        "gatewayAPIChannel": "standard",
        "profiles": [
            {
                "name": "GATEWAY-HTTP",
                "summary": "s",
                "core": {
                    "result": "success",
                    "statistics": {"Passed": 1, "Failed": 0, "Skipped": 0},
                },
            }
        ],
    }
    assert report_problems(good) == []
    bad = json.loads(json.dumps(good))
    del bad["mode"]
    bad["profiles"][0]["core"]["result"] = "passed"
    bad["profiles"][0]["core"]["statistics"]["passed"] = 1
    assert len(report_problems(bad)) == 3


def _scenario(name: str, passed: bool, mesh: bool) -> ScenarioRun:
    result = CaseResult(name, "c", "case", passed, 1, "GET /", {}, {}, True, True, "")
    return ScenarioRun(name, (result,), rewritten=False, mesh=mesh)


def test_mesh_scenarios_are_the_mesh_http_profile() -> None:
    """Scenarios of mesh cases are MESH-HTTP tests, apart from GATEWAY-HTTP's, their
    extended features read from their names (mesh-rewrite-path:
    MeshHTTPRouteRewritePath; mesh-consumer-route: MeshConsumerRoute)."""
    runs = [
        _scenario("httproute-query-param-matching", True, mesh=False),
        _scenario("mesh-basic", True, mesh=True),
        _scenario("mesh-rewrite-path", True, mesh=True),
        _scenario("mesh-consumer-route", False, mesh=True),
    ]
    doc = conformance_report(LiveReport(runs), Implementation())
    assert report_problems(doc) == []
    gateway, mesh = doc["profiles"]
    assert (gateway["name"], mesh["name"]) == ("GATEWAY-HTTP", "MESH-HTTP")
    assert gateway["extended"]["supportedFeatures"] == ["HTTPRouteQueryParamMatching"]
    assert mesh["core"]["statistics"] == {"Passed": 1, "Failed": 0, "Skipped": 0}
    assert mesh["extended"]["result"] == "failure"
    assert mesh["extended"]["failedTests"] == ["MeshConsumerRoute"]
    assert mesh["extended"]["supportedFeatures"] == [
        "MeshConsumerRoute",
        "MeshHTTPRouteRewritePath",
    ]
    assert "MeshHTTPRouteRedirectPort" in mesh["extended"]["unsupportedFeatures"]
    only_mesh = conformance_report(LiveReport(runs[1:]), Implementation())
    assert [p["name"] for p in only_mesh["profiles"]] == ["MESH-HTTP"]


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
def test_conformance_report_follows_the_upstream_type(cli: CLI, tmp_path: Path) -> None:
    out = tmp_path / "report.yaml"
    r = cli(
        "live",
        *scenario_args("httproute-query-param-matching"),
        "--format",
        "conformance",
        "-o",
        str(out),
        "--implementation-organization",
        "acme",
        "--implementation-contact",
        "@acme/edge",
        "--implementation-version",
        "v9.9.9",
    )
    assert r.code == 0, r.err
    doc = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert report_problems(doc) == []
    assert doc["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert doc["kind"] == "ConformanceReport"
    assert doc["gatewayAPIVersion"].startswith("v1.5.")
    assert doc["implementation"]["organization"] == "acme"
    assert doc["implementation"]["contact"] == ["@acme/edge"]
    assert doc["implementation"]["version"] == "v9.9.9"
    (profile,) = doc["profiles"]
    assert profile["name"] == "GATEWAY-HTTP"
    extended = profile["extended"]
    assert extended["result"] == "success"
    assert extended["statistics"] == {"Passed": 1, "Failed": 0, "Skipped": 0}
    assert extended["supportedFeatures"] == ["HTTPRouteQueryParamMatching"]
    assert "HTTPRouteMethodMatching" in extended["unsupportedFeatures"]
    assert "rewritten" not in profile["summary"]  # said only when Envoy ran a rewritten copy


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
def test_junit_and_text_reports(cli: CLI) -> None:
    r = cli("live", *scenario_args("httproute-method-matching"), "--format", "junit")
    assert r.code == 0, r.err
    root = ET.fromstring(r.out)
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "httproute-method-matching"
    assert suite.get("failures") == "0" and int(suite.get("tests") or 0) > 0
    assert root.find("properties/property[@name='rewritten']").get("value") == "false"  # type: ignore[union-attr]
    r = cli("live", *scenario_args("httproute-method-matching"))
    assert r.code == 0, r.err
    assert r.out.splitlines()[-1].startswith("edge-verify live: ")
    assert "(Envoy ran the xDS as checked)" in r.out


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
def test_run_ends_with_one_summary_of_each_pass(cli: CLI) -> None:
    """``run`` writes check's summary, then the live pass's, once each, on stderr; the
    text report on stdout holds only failures and findings (empty when clean)."""
    r = cli("run", *scenario_args("httproute-method-matching"))
    assert r.code == 0, r.err
    assert r.out == ""
    summaries = [ln for ln in (r.out + r.err).splitlines() if ln.startswith("edge-verify ")]
    assert [s.split(":")[0] for s in summaries] == ["edge-verify check", "edge-verify live"]


# ---------------------------------------------------------------- echo-basic's own handlers


def test_echo_answers_status_and_health_as_echo_basic_and_the_model_agrees() -> None:
    async def scenario() -> dict[str, tuple[int, str]]:
        backend = EchoBackend("ns", "svc", "127.0.0.1", [EchoPort(0)])
        async with backend:
            port = backend.bound[0]
            got = {}
            async with aiohttp.ClientSession() as session:
                for path in ("/status/503", "/status/503?x=1", "/status/abc", "/health", "/x"):
                    async with session.get(f"http://127.0.0.1:{port}{path}") as resp:
                        got[path] = (resp.status, await resp.text())
            assert len(backend.records) == 1  # only the echo is logged, as echo-basic
            return got

    got = asyncio.run(scenario())
    assert got["/status/503"] == (503, "")
    assert got["/status/503?x=1"][0] == 400  # echo-basic matches the whole RequestURI
    assert got["/status/abc"][0] == 400
    assert got["/health"] == (200, "OK")
    body = json.loads(got["/x"][1])
    assert body["service"] == "svc" and body["namespace"] == "ns"
    for path, (status, _) in got.items():
        reply = echo_reply(Request(path=path))
        assert (reply.status or 200) == status, path


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
def test_a_nack_is_a_finding_with_envoys_words_not_a_traceback(cli: CLI, tmp_path: Path) -> None:
    """A cluster with a negative connect_timeout: the models do not read it, real
    Envoy rejects it over ADS. The scenario's cases fail with Envoy's message."""
    r = cli("translate", *scenario_args("httproute-method-matching"))
    doc = json.loads(r.out)
    clusters = next(c for c in doc["configs"] if c["@type"].endswith("ClustersConfigDump"))
    clusters["dynamic_active_clusters"][0]["cluster"]["connect_timeout"] = "-1s"
    xds = tmp_path / "nack.json"
    xds.write_text(json.dumps(doc), encoding="utf-8")
    r = cli(
        "live", *scenario_args("httproute-method-matching"), "--xds", str(xds), "--format", "json"
    )
    assert r.code == 1, r.err
    assert "Traceback" not in r.err
    report = json.loads(r.out)
    (finding,) = report["findings"]
    assert finding["code"] == "EV806"
    assert "Expected positive duration" in finding["message"]  # Envoy's own words
    assert report["cases"] and not any(c["passed"] for c in report["cases"])
