"""Which xDS route served each live answer: read from Envoy's access log, never guessed.

Every fixture's answers are attributed to the route the Envoy model chose in the
session's one `run fixtures/` (tests/test_live_cli.py). Here the served xDS is
made to differ from the checked one: the path-prefix scenario is served with a
copy of its first route, under another name, in front of it. Every answer stays
right (same backend, same request), but for the requests of that route Envoy
takes the copy, which the Envoy model, reading the checked xDS, does not know:
attribution disagrees (EV810), a failure in every format the live pass reports.
Then its xDS (`--xds`, read by the Envoy model too) puts the catch-all rule's
route first, sending to the /foo rule's backend: the /foo cases still get the
answer they expect, which both models predict, through a route made from
another rule than the spec model chose: passed by coincidence (EV811).
The access log reader is held to its memory bound on a log it did not expect.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from conftest import BASE, FIXTURES
from verifier.rules import RULES

from verifier.cli import main
from verifier.live import isolated
from verifier.live.access_log import MAX_LINE, AccessLogReader
from verifier.live.attribution import NO_HTTP, by_coincidence, judge
from verifier.live.client import AccessEntry, LiveResponse
from verifier.live.envoy_process import envoy_available
from verifier.live.results import (
    ATTRIBUTED,
    COINCIDENCE,
    NO_ROUTE,
    UNATTRIBUTED,
    CaseResult,
    LiveReport,
)
from verifier.live.runner import LIVE_CODES, RULE, LiveOptions, run_live
from verifier.pipeline import CheckOptions
from verifier.report import conformance, live, sarif
from verifier.report.scenario import ScenarioReport
from verifier.semantics.request import Evaluation, Outcome, Request, RouteRef
from verifier.xds.codec import from_json_dict, to_json_dict
from verifier.xds.snapshot import Snapshot

SCENARIO = "httproute-path-prefix-matching"
FIRST = "edge-infra/path-prefix/rule/0/match/0"  # PathPrefix /foo -> infra-backend-v1
SHADOW = "injected/shadow-of-rule-0"
# The cases rule 0 answers (resources.yaml), which the shadow now serves.
SHADOWED = {
    "prefix-matches-itself",
    "prefix-matches-with-trailing-slash",
    "prefix-matches-subpath",
    "prefix-matches-deep-subpath",
    "prefix-ignores-query-string",
}


def _shadowed(snap: Snapshot) -> Snapshot:
    """``snap`` with a copy of route FIRST, named SHADOW, in front of it: the same
    match and action, so every answer is the same, through another route."""
    routes = []
    for rc in snap.routes:
        doc = to_json_dict(rc)
        for vh in doc.get("virtual_hosts", []):
            found = [r for r in vh.get("routes", []) if r.get("name") == FIRST]
            if found:
                vh["routes"].insert(0, {**found[0], "name": SHADOW})
        moved, skipped = from_json_dict(type(rc), doc)
        assert not skipped
        routes.append(moved)
    assert routes != list(snap.routes)
    return Snapshot(snap.clusters, snap.endpoints, snap.listeners, tuple(routes), snap.secrets)


@pytest.fixture(scope="module")
def shadowed() -> LiveReport:
    """The scenario's live pass with SHADOW served and the checked xDS modelled."""
    if not envoy_available():
        pytest.skip("no envoy binary")
    served = isolated.with_access_log

    def altered(snap: Snapshot, path: Path) -> tuple[Snapshot, list[str]]:
        return served(_shadowed(snap), path)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(isolated, "with_access_log", altered)
        return run_live([str(BASE), str(FIXTURES / SCENARIO)], CheckOptions(), LiveOptions())


@pytest.mark.live
def test_a_right_answer_through_another_route_fails_as_attribution_disagrees(
    shadowed: LiveReport,
) -> None:
    report = shadowed
    failed = {r.name: r for r in report.results if not r.passed}
    assert set(failed) == SHADOWED
    for r in failed.values():
        a = r.attribution
        assert a is not None
        # The answer is right, and all three agree on it: only the route differs.
        assert (r.spec_agrees, r.envoy_model_agrees, r.odd_one_out) == (True, True, None)
        assert (a.state, a.verdict, a.route, a.model_route) == (
            ATTRIBUTED,
            "disagrees",
            SHADOW,
            FIRST,
        )
        assert a.cluster == "k8s/edge-infra/infra-backend-v1/8080"
        assert r.xds_route == SHADOW  # the logged route (the checked xDS has no such route)
        assert [p for p in r.problems if not p.startswith("attribution disagrees")] == []
    # The other cases: attributed to the route the model chose, xds_route its path.
    for r in report.results:
        if r.name not in SHADOWED:
            assert r.passed and r.attribution is not None
            assert r.attribution.verdict == "agrees", r.name
            assert r.attribution.route == r.attribution.model_route != ""
            assert r.xds_route.startswith("routes[") and r.xds_route.endswith("]")
    assert report.summary()["unattributed"] == 0
    findings = report.findings
    assert [(f.code, f.rule) for f in findings] == [("EV810", RULE)] * len(SHADOWED)
    assert {f.location for f in findings} == {
        f"{FIXTURES / SCENARIO / 'resources.yaml'}:{_line_of_first_match()}"
    }
    assert {f.xds_path for f in findings} == {SHADOW}


def _line_of_first_match() -> int:
    """The line of rule 0's match in the scenario's resources.yaml (`- path:` of /foo)."""
    lines = (FIXTURES / SCENARIO / "resources.yaml").read_text(encoding="utf-8").splitlines()
    value = next(i for i, ln in enumerate(lines) if "value: /foo" in ln)
    return next(i for i in range(value, 0, -1) if lines[i].lstrip().startswith("- ")) + 1


@pytest.mark.live
def test_attribution_disagrees_in_every_report_format(shadowed: LiveReport) -> None:
    report = shadowed
    doc = json.loads(live.render_json(report))
    failed = [c for c in doc["cases"] if not c["passed"]]
    assert {c["attribution"]["verdict"] for c in failed} == {"disagrees"}
    assert {f["code"] for f in doc["findings"]} == {"EV810"}
    assert doc["additions"][SCENARIO]  # the access log, the one addition, listed
    text = live.render_text(report)
    assert text.count(" EV810 [live-three-way] ") == len(SHADOWED)
    assert text.count(": FAILED after ") == len(SHADOWED)
    junit = ET.fromstring(live.render_junit(report))
    kinds = [f.get("type") for f in junit.iter("failure")]
    assert kinds == ["attribution-disagrees"] * len(SHADOWED)
    suite = junit.find("testsuite")
    assert suite is not None
    props = [p.get("value", "") for p in suite.iter("property")]
    assert props and all("access log added" in p for p in props)
    profile = conformance.conformance_report(report, conformance.Implementation())["profiles"][0]
    assert conformance.upstream_test_name(SCENARIO) in profile["core"]["failedTests"]
    scenarios = [ScenarioReport(s.name, findings=s.findings) for s in report.scenarios]
    doc = json.loads(sarif.render(scenarios, RULES, "test", passes=((RULE, LIVE_CODES),)))
    run = doc["runs"][0]
    assert {r["ruleId"] for r in run["results"]} == {"EV810"}
    assert "EV810" in {d["id"] for d in run["tool"]["driver"]["rules"]}


def _catch_all_first(tmp_path: Path) -> Path:
    """The scenario's xDS with rule 2's route (PathPrefix /, to infra-backend-v3) moved
    in front of rule 0's (/foo, to infra-backend-v1) and sent to v1 instead."""
    translated = tmp_path / "xds.json"
    argv = ["translate", str(BASE), str(FIXTURES / SCENARIO), "-o", str(translated)]
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        assert main(argv) == 0
    doc = json.loads(translated.read_text(encoding="utf-8"))
    moved = 0
    for config in doc["configs"]:
        for rc in config.get("dynamic_route_configs", []):
            for vh in rc["route_config"].get("virtual_hosts", []):
                routes = vh["routes"]
                names = [r["name"] for r in routes]
                if FIRST in names and CATCH_ALL in names:
                    catch_all = routes.pop(names.index(CATCH_ALL))
                    catch_all["route"]["cluster"] = V1
                    routes.insert(0, catch_all)
                    moved += 1
    assert moved == 1
    out = tmp_path / "catch-all-first.json"
    out.write_text(json.dumps(doc), encoding="utf-8")
    return out


CATCH_ALL = "edge-infra/path-prefix/rule/2/match/0"
V1 = "k8s/edge-infra/infra-backend-v1/8080"


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
def test_a_right_answer_through_another_rules_route_passed_by_coincidence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    xds = _catch_all_first(tmp_path)
    argv = ["live", str(BASE), str(FIXTURES / SCENARIO), "--xds", str(xds)]
    assert main([*argv, "--format", "json", "--consistency-budget", "2"]) == 1
    doc = json.loads(capsys.readouterr().out)
    by_name = {c["name"]: c for c in doc["cases"]}
    for name in SHADOWED:  # the answer each expects, through the catch-all's route
        case = by_name[name]
        a = case["attribution"]
        assert not case["passed"] and case["odd_one_out"] is None
        assert case["observed"]["backends"][0]["name"] == "infra-backend-v1"
        assert (a["verdict"], a["route"], a["model_route"]) == ("coincidence", CATCH_ALL, CATCH_ALL)
        assert a["spec_route"] == "edge-infra/path-prefix rule 0"
        assert [p.split(":")[0] for p in case["problems"]] == ["passed by coincidence"]
    coincidences = [f for f in doc["findings"] if f["code"] == "EV811"]
    assert len(coincidences) == len(SHADOWED)
    assert {f["location"].rsplit(":", 1)[1] for f in coincidences} == {str(_line_of_first_match())}
    # The other cases get v1 where they expect another backend: failures of their own.
    for name, case in by_name.items():
        if name not in SHADOWED:
            assert case["attribution"]["verdict"] != "coincidence", name


# ------------------------------------------------------------------- no log, no guess


def _answer(status: int, entry: AccessEntry | None, correlation: str = "1-1") -> LiveResponse:
    return LiveResponse(Request(host="h", path="/"), status, correlation=correlation, access=entry)


def test_an_answer_missing_from_the_log_is_unattributed_not_the_models_route() -> None:
    model = Evaluation(Outcome(status=200, route=RouteRef(xds_name=FIRST)), ())
    entry = AccessEntry(FIRST, "c", 200, "-")
    assert judge([_answer(200, entry)], model, logged=True).state == ATTRIBUTED
    missing = judge([_answer(200, entry), _answer(200, None)], model, logged=True)
    assert (missing.state, missing.verdict) == (UNATTRIBUTED, "")
    assert missing.why == "1 of 2 answers not in Envoy's access log"
    none = judge([_answer(200, None)], model, logged=True)
    assert (none.state, none.route, none.verdict) == (UNATTRIBUTED, "", "")
    remote = judge([_answer(200, None, correlation="")], model, logged=False)
    assert (remote.state, remote.route) == (UNATTRIBUTED, "")
    refused = judge([_answer(0, None)], Evaluation(Outcome(status=0), ()), logged=True)
    assert (refused.state, refused.verdict) == (NO_ROUTE, "agrees")


def _rule(rule: int | None, name: str = "") -> Evaluation:
    """The Envoy model's answer through route ``name`` made from ``rule`` (None: a route
    whose rule is not known, or no route at all when ``name`` is empty too)."""
    known = rule is not None
    ref = RouteRef(name or None, "edge-infra/r" if known else None, rule) if known or name else None
    return Evaluation(Outcome(status=200, route=ref), ())


def test_passed_by_coincidence_needs_a_right_answer_and_another_rule_or_none() -> None:
    """The verdict's rules on data (the mesh's kube-proxy form included): only a met
    answer is judged; another rule's route, or no route at all, is a coincidence."""
    spec = _rule(0)
    logged = judge([_answer(200, AccessEntry("r2", "c", 200, "-"))], _rule(2, "r2"), logged=True)
    assert by_coincidence(logged, spec, _rule(2, "r2"), met=True).verdict == COINCIDENCE
    assert by_coincidence(logged, spec, _rule(2, "r2"), met=False).verdict == "agrees"
    assert by_coincidence(logged, _rule(2), _rule(2, "r2"), met=True).verdict == "agrees"
    unknown = _rule(None, "r2")  # a route without our metadata: its rule is not known
    logged = judge([_answer(200, AccessEntry("r2", "c", 200, "-"))], unknown, logged=True)
    assert by_coincidence(logged, spec, unknown, met=True).verdict == "agrees"
    nowhere = judge([_answer(200, AccessEntry("", "", 200, "-"))], _rule(None), logged=True)
    found = by_coincidence(nowhere, spec, _rule(None), met=True)
    assert (found.state, found.verdict, found.spec_route) == (
        NO_ROUTE,
        COINCIDENCE,
        "edge-infra/r rule 0",
    )
    refused = judge([_answer(0, None)], _rule(None), logged=True)
    assert refused.why == NO_HTTP
    assert by_coincidence(refused, spec, _rule(None), met=True).verdict == "agrees"
    failed = CaseResult("s", "c", "case", False, 1, "GET /", {}, {}, True, True, "")
    assert failed.failure_kind == "unmet"
    assert CaseResult(**{**vars(failed), "attribution": found}).failure_kind == (
        "attribution-coincidence"
    )


# ------------------------------------------------------------------- the reader's bound


def _line(rid: str, route: str = FIRST) -> bytes:
    doc = {"id": rid, "route": route, "cluster": "c", "code": "200", "flags": "-"}
    return (json.dumps(doc) + "\n").encode()


def test_the_log_is_read_as_it_grows_within_a_fixed_bound(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    reader = AccessLogReader(log)
    reader.poll()  # no file yet: nothing, no error
    for rid in ("a", "b", "c"):
        reader.expect(rid)
    half = _line("a")
    with log.open("wb") as f:
        f.write(_line("stranger") + half[:10])  # a line not ours, then half of one
    reader.poll()
    assert not reader.has({"a"})
    with log.open("ab") as f:
        f.write(half[10:])
        f.write(b"x" * (5 * 1024 * 1024))  # a huge line without an end...
        reader.poll()
        assert len(reader._partial) <= MAX_LINE  # ...is never held
        f.write(b'{"id": "b"}' + b"\n" + _line("b") + b"\xff\xfe not json\n" + _line("c"))
    while not reader.has({"a", "b", "c"}):
        before = reader.offset
        reader.poll()
        assert reader.offset > before, "the reader stalled"
    assert reader.offset == log.stat().st_size
    found = reader.claim({"a", "b", "c", "stranger"})
    assert found == {rid: AccessEntry(FIRST, "c", 200, "-") for rid in ("a", "b", "c")}
    assert reader._found == {} and reader._expected == set()  # claimed ids are forgotten
    log.write_bytes(_line("d"))  # truncated and rewritten: read again from the start
    reader.expect("d")
    reader.poll()
    assert reader.has({"d"})
