"""A new user's scenario, written from scratch: what check and live say about its cases.

The scenario of tests/user_scenario.py (a Gateway ``shop/web``, two Deployments with
their Services, an HTTPRoute with a 90/10 split), with a cases.yaml that states the
split. The mistakes users make (a misspelt backendRef, a
route hostname no listener has, a parentRef to a Gateway that does not exist, a split
changed by accident) must fail the per-PR check at the line of the mistake, naming
the case; live must not spend a minute of retries on a case both models already
explain.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from test_check_cli import CLI, Run, cli  # noqa: F401  (the fixture)
from user_scenario import MISTAKES, SPLIT_CASE, line_of, write

from verifier.live.envoy_process import envoy_available


def scenario(tmp_path: Path, **values: str) -> Path:
    """The user's folder ``shop`` (its route's fields ``values``) with the split's case."""
    return write(tmp_path / "shop", SPLIT_CASE, **values)


def at(folder: Path, text: str) -> str:
    """``shop/resources.yaml:N``: where the line ``text`` is, as a report names it."""
    return f"shop/resources.yaml:{line_of(folder / 'resources.yaml', text)}"


@pytest.fixture
def edge_verify(cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CLI:  # noqa: F811
    """``edge-verify ARGS`` in this process, from the user's directory."""
    monkeypatch.chdir(tmp_path)
    return cli


def findings(r: Run) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = r.json()["findings"]
    return found


def case_findings(r: Run) -> list[dict[str, Any]]:
    """The findings about cases (others, e.g. the static EV9xx checks, may join them)."""
    return [f for f in findings(r) if f["rule"] in ("case-expectations", "live-three-way")]


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_a_case_failing_on_a_configuration_mistake_is_reported_at_the_mistake(
    mistake: str, tmp_path: Path, edge_verify: CLI
) -> None:
    made = MISTAKES[mistake]
    folder = scenario(tmp_path, **made.values)
    r = edge_verify("check", "shop", "--format", "json")
    assert r.rc == 1, r.err
    # One finding: the configuration rule's, at the mistake's line, with the case that
    # fails because of it as a related place (not one per model at the case, nor a
    # second finding for the case at the same line).
    (finding,) = findings(r)
    assert finding["code"] == made.code
    assert finding["location"] == at(folder, made.line)
    assert finding["resource"] == "HTTPRoute shop/cart"
    assert made.reason in finding["message"]
    (case,) = finding["related"]
    assert case["location"] == "shop/cases.yaml:1"
    assert case["what"].startswith("case beta-split fails because of it: ")
    assert finding["request"]["path"] == "/cart/1"  # the case's request shows it


def test_a_case_mistake_no_configuration_finding_reports_stays_its_own_finding() -> None:
    """The EV702 is folded into the configuration finding at its line only: where none
    stands there (its rule skipped, or the mistake placed elsewhere), it is kept."""
    from verifier.findings import Related, new
    from verifier.registry import _folded

    case = Related("shop/cases.yaml", 1, "case beta-split fails because of it: status [500]")
    at = {"file": "shop/resources.yaml", "line": 112, "resource": "HTTPRoute shop/cart"}
    ev702 = new(
        "EV702",
        "case-expectations",
        **at,
        related=(case,),
        request={"path": "/cart/1"},
        case="beta-split",
        reason="BackendNotFound, EV905",
        mistake="m",
        problems="p",
    )
    ev905 = new("EV905", "httproute-backend-refs", **at, service="shop/cart-canry", fix="f")
    elsewhere = new("EV905", "httproute-backend-refs", **{**at, "line": 9}, service="x", fix="f")
    (folded,) = _folded([ev702, ev905])
    assert (folded.code, folded.related, folded.request) == ("EV905", (case,), ev702.request)
    assert sorted(_folded([ev702, elsewhere])) == sorted([ev702, elsewhere])


def test_the_mistake_and_its_case_in_text_and_sarif(tmp_path: Path, edge_verify: CLI) -> None:
    made = MISTAKES["service-does-not-exist"]
    folder = scenario(tmp_path, **made.values)
    r = edge_verify("check", "shop")
    assert r.rc == 1
    first = r.out.splitlines()[0]
    assert first.startswith(f"{at(folder, made.line)}: error EV905 ")
    related_line = "    related: shop/cases.yaml:1: case beta-split fails because of it: "
    assert any(ln.startswith(related_line) for ln in r.out.splitlines()), r.out
    r = edge_verify("check", "shop", "--format", "sarif")
    (result,) = json.loads(r.out)["runs"][0]["results"]
    assert result["ruleId"] == "EV905"
    (related,) = result["relatedLocations"]
    assert related["physicalLocation"]["artifactLocation"]["uri"] == "shop/cases.yaml"
    assert related["physicalLocation"]["region"]["startLine"] == 1
    assert related["message"]["text"].startswith("case beta-split fails because of it: ")


def test_a_split_ratio_is_judged_offline(tmp_path: Path, edge_verify: CLI) -> None:
    """90/10 as the case says passes (an answer from cart-canary counts for the longer
    prefix, not for cart); the same route changed to 60/40 fails check: one finding at
    the case saying both models miss it alike, with the weights they follow related
    (where a user changes a split; a second new user was pointed at ``- matches:``)."""
    scenario(tmp_path)
    r = edge_verify("check", "shop", "--format", "json")
    assert (r.rc, findings(r)) == (0, []), r.out
    (tmp_path / "shop").rename(tmp_path / "right")
    scenario(tmp_path, weight="60", canary_weight="40")
    r = edge_verify("check", "shop", "--format", "json")
    assert r.rc == 1
    (found,) = case_findings(r)
    assert (found["code"], found["location"]) == ("EV703", "shop/cases.yaml:1")
    assert "backend cart share 0.60 of 2xx, expected 0.9±0.07" in found["message"]
    weights = [at(tmp_path / "shop", f"      weight: {w}") for w in (60, 40)]
    assert [related["location"] for related in found["related"]] == weights


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
def test_live_sends_a_case_both_models_explain_once(tmp_path: Path, edge_verify: CLI) -> None:
    """The misspelt backendRef: both models predict the case fails because of it, so
    live sends it once (one attempt of its 200 samples) and fails at once, naming the
    mistake at its line, instead of retrying it for the whole consistency budget."""
    made = MISTAKES["service-does-not-exist"]
    folder = scenario(tmp_path, **made.values)
    started = time.monotonic()
    r = edge_verify("live", "shop", "--format", "json")
    elapsed = time.monotonic() - started
    assert r.rc == 1, r.err
    assert elapsed < 20  # the default budget alone was 60 s of retries
    (case,) = json.loads(r.out)["cases"]
    assert (case["name"], case["passed"], case["attempts"]) == ("beta-split", False, 1)
    assert "cart-canry" in case["problems"][-1]
    (finding,) = [f for f in case_findings(r) if f["code"] == "EV808"]
    assert finding["location"] == at(folder, made.line)
    (case,) = finding["related"]
    assert case["location"] == "shop/cases.yaml:1" and case["what"].startswith("case beta-split")


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
def test_live_names_a_backend_without_endpoints_as_check_does(
    tmp_path: Path, edge_verify: CLI
) -> None:
    """The canary Service's selector matches no pod: its share is answered 503 and the
    split's case fails. check's EV703 names the backendRef without a ready endpoint; so
    does live's EV801 (a second new user found it named no cause), at the same places."""
    folder = scenario(tmp_path)
    path = folder / "resources.yaml"
    text = path.read_text("utf-8")
    path.write_text(text.replace("selector: {app: cart-canary}", "selector: {app: cart-canry}"))
    check = edge_verify("check", "shop", "--format", "json")
    (ev703,) = case_findings(check)
    live = edge_verify("live", "shop", "--format", "json")
    assert live.rc == 1, live.err
    (ev801,) = [f for f in case_findings(live) if f["code"] == "EV801"]
    assert ev801["location"] == ev703["location"] == "shop/cases.yaml:1"
    assert ev801["related"] == ev703["related"]
    backend_ref = at(folder, "    - name: cart-canary")
    assert backend_ref in [related["location"] for related in ev801["related"]]
