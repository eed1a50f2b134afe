"""The new user's split (tests/user_scenario.py) when a backend has no pod behind it,
when a backendRef is misspelt, or when the case states another split: what check,
explain and live answer, each as a user runs them on a folder of their own.

HTTPRouteRule.backendRefs: "When a HTTPBackendRef refers to a Service that has no
ready endpoints, implementations SHOULD return a 503 for requests to that backend
instead", and real Envoy answers a weighted cluster with no healthy host 503 "no
healthy upstream": the share of that backend, not the rest.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from test_case_mistakes import case_findings, edge_verify, findings  # how the user runs it
from test_check_cli import (
    CLI,
    cli,
)
from user_scenario import SPLIT_CASE, resources, write

from verifier.live.envoy_process import envoy_available

__all__ = ["cli", "edge_verify"]  # fixtures, used by name

# The Service cart-canary selects no pod: its Deployment is labelled app: cart-canary.
NO_POD = ("  selector: {app: cart-canary}", "  selector: {app: cart-canry}")
# A second rule splitting to a misspelt Service, for cases that send one request.
LEGACY_RULE = """\
  - matches:
    - path: {type: PathPrefix, value: /legacy}
    backendRefs:
    - name: cart
      port: 8080
      weight: 90
    - name: cart-canry
      port: 8080
      weight: 10
"""
LIVE_CASES = (
    SPLIT_CASE
    + """\
- name: beta-split-as-predicted
  gateway: {namespace: shop, name: web}
  request: {host: cart.shop.example.com, path: /cart/2, headers: {x-beta: "yes"}}
  samples: 300
  expect:
    statuses: [200, 503]
    backends: [cart]
    status_ratio: {"503": {ratio: 0.1, tolerance: 0.06}}
- name: legacy-once
  gateway: {namespace: shop, name: web}
  request: {host: cart.shop.example.com, path: /legacy/1}
  expect: {status: 200}
"""
)


def scenario(tmp_path: Path, old: str = "", new: str = "") -> Path:
    """The user's folder ``shop`` with its split's case, ``old`` replaced by ``new``
    once in its resources.yaml."""
    folder = write(tmp_path / "shop", SPLIT_CASE)
    path = folder / "resources.yaml"
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return folder


def line_of(folder: Path, fragment: str) -> str:
    """``shop/resources.yaml:N``: the one line of the user's file holding ``fragment``."""
    lines = (folder / "resources.yaml").read_text(encoding="utf-8").splitlines()
    found = [i for i, line in enumerate(lines, 1) if fragment in line]
    assert len(found) == 1, (fragment, found)
    return f"shop/resources.yaml:{found[0]}"


def live_scenario(folder: Path) -> Path:
    """``folder`` with the rule to the misspelt Service, and the cases live runs."""
    text = (folder / "resources.yaml").read_text(encoding="utf-8")
    assert text.endswith(resources()[-200:])  # the HTTPRoute's rules come last
    (folder / "resources.yaml").write_text(text + LEGACY_RULE, encoding="utf-8")
    (folder / "cases.yaml").write_text(LIVE_CASES, encoding="utf-8")
    return folder


def test_a_backend_without_a_ready_endpoint_answers_its_share_503(
    tmp_path: Path, edge_verify: CLI
) -> None:
    """check: both models predict the 10% of cart-canary answered 503, so the 90/10 case
    fails offline, once (both models alike), with the rule and the backendRef as related
    places; explain shows the share, and no header note for clusters that modify none."""
    folder = scenario(tmp_path, *NO_POD)
    r = edge_verify("check", "shop", "--format", "json")
    assert r.rc == 1, r.err
    (found,) = case_findings(r)
    assert (found["code"], found["location"]) == ("EV703", "shop/cases.yaml:1")
    assert "status [200, 503], expected [200]" in found["message"]
    assert [x["location"] for x in found["related"]] == [
        line_of(folder, "  - matches:"),
        line_of(folder, "- name: cart-canary"),
    ]
    for outcome in (found["expected"], found["actual"]):  # spec model, Envoy model
        assert [(b["name"], b["weight"]) for b in outcome["backends"]] == [("cart", 90)]
        assert (outcome["unavailable_weight"], outcome["invalid_weight"]) == (10, 0)
    r = edge_verify("explain", "shop", "--cases", "shop/cases.yaml")
    assert r.out.count("+503 share (weight 10)") == 2, r.out
    assert "modify headers differently" not in r.out


def test_explain_notes_split_header_changes_only_where_the_backends_differ(
    tmp_path: Path, edge_verify: CLI
) -> None:
    """A filter on cart-canary's backendRef alone: the Envoy model shows one cluster's
    header changes for the split, and says so (no such note without the filter, above)."""
    ref = "- name: cart-canary\n      port: 8080"
    filters = (
        "\n      filters:\n      - type: RequestHeaderModifier\n"
        "        requestHeaderModifier: {set: [{name: x-track, value: canary}]}"
    )
    scenario(tmp_path, ref, ref + filters)
    r = edge_verify("explain", "shop", "--cases", "shop/cases.yaml")
    assert "Envoy model note: weighted clusters modify headers differently" in r.out, r.out


def test_models_that_miss_a_case_differently_are_not_one_finding(
    tmp_path: Path, edge_verify: CLI
) -> None:
    """An xDS split 50/50 where the spec says 90/10, and a case stating 70/30: each model
    misses it its own way. No EV703: the spec model's miss is an EV701 at the case, the
    Envoy model's is the weights' own disagreement finding (EV218), which restates it."""
    scenario(tmp_path)
    r = edge_verify("translate", "shop")
    fifty = r.out.replace('"weight": 90', '"weight": 50').replace('"weight": 10', '"weight": 50')
    (tmp_path / "xds.json").write_text(fifty, encoding="utf-8")
    cases = SPLIT_CASE.replace("0.9, tolerance: 0.07", "0.7, tolerance: 0.05")
    (tmp_path / "shop" / "cases.yaml").write_text(cases, encoding="utf-8")
    r = edge_verify("check", "shop", "--xds", "xds.json", "--format", "json")
    assert r.rc == 1, r.err
    found = sorted((f["code"], f["location"], f["message"]) for f in findings(r))
    assert [(code, where) for code, where, _ in found] == [
        ("EV218", line_of(tmp_path / "shop", "value: /cart}")),
        ("EV701", "shop/cases.yaml:1"),
    ]
    assert "the spec model" in found[1][2] and "cart share 0.90" in found[1][2]
    assert "(weight 50)" in found[0][2]


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
def test_live_answers_as_both_models_and_spends_no_retry_on_a_predicted_failure(
    tmp_path: Path, edge_verify: CLI
) -> None:
    """One real Envoy: the 503 share is what the models predict (the case written from
    them passes, no three-way finding); the case stating 90/10 fails on its one attempt
    (EV801), its observed answers counted; a single request to the misspelt split is a
    configuration mistake confirmed (EV808) whether it lands on the 90 or the 10, never
    "the models or the case are wrong" (EV809)."""
    folder = live_scenario(scenario(tmp_path, *NO_POD))
    started = time.monotonic()
    r = edge_verify("live", "shop", "--format", "json")
    elapsed = time.monotonic() - started
    assert r.rc == 1, r.err
    assert elapsed < 20  # a retried case alone would take the 60 s budget
    doc = json.loads(r.out)
    by_name = {c["name"]: c for c in doc["cases"]}
    predicted = by_name["beta-split-as-predicted"]
    assert predicted["passed"], predicted["problems"]
    assert (predicted["spec_agrees"], predicted["envoy_model_agrees"]) == (True, True)
    written = by_name["beta-split"]
    assert (written["passed"], written["attempts"]) == (False, 1)
    observed = written["observed"]
    counts = observed["statuses"]
    assert set(counts) <= {"200", "503"} and sum(counts.values()) == 200
    assert observed["backends"] == [
        {"name": "cart", "namespace": "shop", "port": 8080, "weight": counts["200"]}
    ]
    legacy = by_name["legacy-once"]
    assert (legacy["passed"], legacy["attempts"]) == (False, 1)
    codes = {(f["code"], f["location"]) for f in doc["findings"]}
    assert codes == {
        ("EV801", "shop/cases.yaml:1"),
        ("EV808", line_of(folder, "- name: cart-canry")),
    }, doc["findings"]


def test_a_case_sent_once_reads_as_one_attempt() -> None:
    from verifier.live.results import CASE, CaseResult, LiveReport, ScenarioRun
    from verifier.report.live import render_text

    failed = CaseResult("shop", "beta-split", CASE, False, 1, "GET /", {}, {}, True, True, "")
    report = LiveReport(scenarios=[ScenarioRun("shop", (failed,), (), False, ())])
    assert "shop: beta-split: FAILED after 1 attempt\n" in render_text(report)


@pytest.mark.parametrize(("odd", "code"), [(None, "EV808"), ("live", "EV809")])
def test_a_mistaken_case_met_live_blames_a_side_only_outside_the_predicted_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, odd: str | None, code: str
) -> None:
    """The misspelt backendRef at 10%: a single request met live by a 200 the models allow
    (their [200, 500]) is the mistake confirmed, sent once (EV808); only an answer the
    models do not predict makes it "the models or the case are wrong" (EV809)."""
    from verifier.rules.support.case_judge import judge

    from verifier import pipeline
    from verifier.live.replay import LiveCase
    from verifier.live.runner import _judged_once
    from verifier.live.verdict import Verdict

    live_scenario(scenario(tmp_path))
    monkeypatch.chdir(tmp_path)
    opts = pipeline.CheckOptions()
    (scn,) = pipeline.discover(["shop"], opts)
    ctx, _ = pipeline.prepare(scn, opts)
    assert ctx is not None
    (case,) = [c for c in ctx.cases if c.name == "legacy-once"]
    predicted = judge(ctx, case)
    assert predicted.doomed
    agrees = odd is None
    verdict = Verdict(agrees, agrees, (), odd)
    findings, problems = _judged_once(ctx, LiveCase(case), predicted, verdict, [], [])
    assert [f.code for f in findings] == [code]
    assert problems  # met on one attempt is never a pass
