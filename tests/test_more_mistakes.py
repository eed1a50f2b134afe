"""More mistakes a new user made that passed ``check`` silently, each now pointed out.

Issue 31's trial, continued on the same shop scenario (tests/user_scenario.py):
a Service selector that matches no pod (EV913, at the backendRef that sends traffic
to it), a targetPort no container declares (EV914, at the targetPort), two HTTPRoutes
with an identical match of which one never gets traffic (EV915, at the losing match,
once, whatever the xDS does with its route), and a glob that names the cases table
among the resources (``check shop/*.yaml``). Each from the scenario as a user writes
it, through the command line; the things that are not these mistakes (a workload
scaled to zero, a manifest set without workloads, a pod template declaring no ports,
a duplicate that still wins somewhere) stay silent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
from user_scenario import SPLIT_CASE, write
from verifier.rules import CONFIGURATION

from verifier.check import Context
from verifier.cli import main
from verifier.findings import Finding, hint
from verifier.gatewayapi.resources import load_resources
from verifier.live.envoy_process import envoy_available
from verifier.semantics.spec.identical import unreached_matches
from verifier.semantics.spec.model import DEFAULT_CONTROLLER
from verifier.xds.snapshot import Snapshot


def line_of(f: Finding) -> str:
    """The text of the line a finding points at."""
    return Path(f.file).read_text("utf-8").splitlines()[f.line - 1].strip()


def edited(folder: Path, *changes: tuple[str, str]) -> Path:
    """The shop scenario (tests/user_scenario.py) in ``folder`` with each (old, new)
    text replaced once."""
    path = write(folder) / "resources.yaml"
    text = path.read_text("utf-8")
    for old, new in changes:
        assert text.count(old) >= 1, old
        text = text.replace(old, new, 1)
    path.write_text(text, "utf-8")
    return path.parent


def check_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    """``edge-verify check ARGS --fail-on warning --format json``, as a user runs it."""
    code = main(["check", *args, "--fail-on", "warning", "--format", "json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out else {}


def text_at(location: str) -> str:
    file, _, line = location.rpartition(":")
    return Path(file).read_text("utf-8").splitlines()[int(line) - 1]


def only(doc: dict[str, Any]) -> dict[str, Any]:
    findings = doc["findings"]
    assert isinstance(findings, list) and len(findings) == 1, findings
    found: dict[str, Any] = findings[0]
    return found


# ---------------------------------------------------------------- a selector matching no pod

CANARY_SELECTOR = ("selector: {app: cart-canary}", "selector: {app: cart-canry}")


def test_a_selector_that_matches_no_pod_is_a_warning_at_the_backend_ref(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, doc = check_json(capsys, str(edited(tmp_path / "typo", CANARY_SELECTOR)))
    assert rc == 1
    found = only(doc)
    assert (found["code"], found["severity"], found["resource"]) == (
        "EV913",
        "warning",
        "HTTPRoute shop/cart",
    )
    assert isinstance(found["location"], str)
    assert text_at(found["location"]) == "    - name: cart-canary"
    (related,) = found["related"]
    assert text_at(related["location"]) == "  selector: {app: cart-canry}"
    assert found["expected"] == {"did_you_mean": "app=cart-canary"}


def test_what_is_not_a_selector_mistake_is_silent(tmp_path: Path) -> None:
    """Scaled to zero on purpose; a manifest set that holds no workload there at all."""
    canary = "  selector: {matchLabels: {app: cart-canary}}"
    zero = edited(tmp_path / "zero", (f"replicas: 1\n{canary}", f"replicas: 0\n{canary}"))
    assert main(["check", str(zero), "--fail-on", "warning"]) == 0
    bare = write(tmp_path / "bare") / "resources.yaml"
    docs = bare.read_text("utf-8").split("---\n")
    bare.write_text("---\n".join(d for d in docs if "kind: Deployment" not in d), "utf-8")
    assert main(["check", str(bare.parent), "--fail-on", "warning"]) == 0


# ---------------------------------------------------------------- a targetPort no container has

CART_TARGET = "  - {port: 8080, targetPort: 3000}\n---\napiVersion: apps/v1"
CART_PORTS = "ports: [{containerPort: 3000}]"


def test_a_target_port_no_container_declares_is_a_warning_at_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    number = edited(tmp_path / "n", (CART_TARGET, CART_TARGET.replace("3000", "8080")))
    # The models answer the split's case 200 (no case finding: containerPort is
    # informational), and the warning says so rather than that requests are refused.
    (number / "cases.yaml").write_text(SPLIT_CASE, "utf-8")
    rc, doc = check_json(capsys, str(number))
    assert rc == 1
    found = only(doc)
    assert hint("target-port-number", target="8080") in found["message"]
    assert (found["code"], found["severity"], found["resource"]) == (
        "EV914",
        "warning",
        "Service shop/cart",
    )
    assert isinstance(found["location"], str)
    assert text_at(found["location"]) == "  - {port: 8080, targetPort: 8080}"
    assert found["expected"] == {"did_you_mean": "3000"}


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
def test_run_and_live_fail_on_a_warning_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second new user could not make ``run`` fail on a warning (``--fail-on`` was a
    usage error), though its README says it exits 0 only if all is clean. The split's
    case passes live and the only finding is EV914, a warning: ``run`` exits 0 by
    default and 1 with ``--fail-on warning``, its SARIF holding the warning at its line;
    ``live --fail-on warning`` counts the live pass's findings only (none here)."""
    folder = edited(tmp_path / "shop", (CART_TARGET, CART_TARGET.replace("3000", "8080")))
    (folder / "cases.yaml").write_text(SPLIT_CASE, "utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "shop"]) == 0
    assert main(["run", "shop", "--fail-on", "warning", "--format", "sarif", "-o", "r.sarif"]) == 1
    (result,) = json.loads((tmp_path / "r.sarif").read_text("utf-8"))["runs"][0]["results"]
    assert (result["ruleId"], result["level"]) == ("EV914", "warning")
    where = result["locations"][0]["physicalLocation"]
    location = f"{where['artifactLocation']['uri']}:{where['region']['startLine']}"
    assert text_at(location) == "  - {port: 8080, targetPort: 8080}"
    assert main(["live", "shop", "--fail-on", "warning"]) == 0
    capsys.readouterr()


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
def test_run_sarif_holds_both_passes_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run --format sarif``: check's findings and the live pass's side by side, each
    code described among the rules (a SARIF consumer rejects an undescribed ruleId
    or shows it bare). The canary selects no pod: check's EV703 and EV913, live's
    EV801, at the case and the backendRef."""
    folder = edited(tmp_path / "shop", CANARY_SELECTOR)
    (folder / "cases.yaml").write_text(SPLIT_CASE, "utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "shop", "--format", "sarif"]) == 1
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    results = {(r["ruleId"], r["properties"]["rule"]) for r in run["results"]}
    assert results == {
        ("EV703", "case-expectations"),
        ("EV913", "httproute-backend-endpoints"),
        ("EV801", "live-three-way"),
    }
    described = {rule["id"] for rule in run["tool"]["driver"]["rules"]}
    assert {code for code, _ in results} <= described


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
def test_run_json_and_junit_hold_both_passes_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run --format json`` and ``junit`` held the live pass's findings only: a new
    user's run exited 1 on EV801 and its report left out check's root cause. The
    canary selects no pod: check's EV703 and EV913 (at the backendRef) beside live's
    EV801 in both."""
    folder = edited(tmp_path / "shop", CANARY_SELECTOR)
    (folder / "cases.yaml").write_text(SPLIT_CASE, "utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "shop", "--format", "json", "-o", "r.json"]) == 1
    doc = json.loads((tmp_path / "r.json").read_text("utf-8"))
    assert {(f["code"], f["scenario"]) for f in doc["findings"]} == {
        ("EV703", "shop"),
        ("EV913", "shop"),
        ("EV801", "shop"),
    }
    (ev913,) = [f for f in doc["findings"] if f["code"] == "EV913"]
    assert text_at(ev913["location"]).strip().startswith("- name: cart-canary")
    assert (doc["check"]["errors"], doc["check"]["warnings"], doc["summary"]["failed"]) == (1, 1, 1)
    assert main(["run", "shop", "--format", "junit", "-o", "r.xml"]) == 1
    root = ET.parse(tmp_path / "r.xml").getroot()
    failed = {el.get("type") for el in root.iter("failure")}
    assert failed == {"EV703", "unmet"}, failed  # check's error, live's failed case
    # a warning fails no test case: its lines are the rule's output, as check has them
    assert any("EV913" in (el.text or "") for el in root.iter("system-out"))
    capsys.readouterr()


def mistakes(folder: Path, *changes: tuple[str, str]) -> list[Finding]:
    """The configuration rules' findings on the shop scenario edited so."""
    ctx = Context(load_resources([str(edited(folder, *changes))]), Snapshot())
    return sorted(f for rule in CONFIGURATION for f in rule.check(ctx))


def test_a_named_target_port_no_container_names_and_ports_left_undeclared(
    tmp_path: Path,
) -> None:
    """A name resolves only through a declared port; a pod template that declares no
    port at all may listen anywhere (containerPort is informational)."""
    named = (CART_TARGET, CART_TARGET.replace("3000", "htpp"))
    named_port = (CART_PORTS, "ports: [{containerPort: 3000, name: http}]")
    found = [f for f in mistakes(tmp_path / "a", named, named_port) if f.code == "EV914"]
    assert [(f.resource, (f.expected or {}).get("did_you_mean")) for f in found] == [
        ("Service shop/cart", "http")
    ]
    assert line_of(found[0]) == "- {port: 8080, targetPort: htpp}"
    assert hint("target-port-name", target="htpp") in found[0].message
    number = (CART_TARGET, CART_TARGET.replace("3000", "8080"))
    unported = (CART_PORTS, "ports: []")
    assert [f.code for f in mistakes(tmp_path / "b", number, unported)] == []


# ---------------------------------------------------------------- identical matches

ROUTE_START = "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute"

# Two rules of the shop's route with one match, before its own rule.
TWICE = """\
  - matches:
    - path: {type: Exact, value: /x}
  - matches:
    - path: {type: Exact, value: /x}
    backendRefs: [{name: cart, port: 8080}]
  - matches:"""


def with_copy(folder: Path, name: str, meta: str = "") -> Path:
    """The shop scenario plus a copy of its HTTPRoute named ``name``."""
    path = write(folder) / "resources.yaml"
    text = path.read_text("utf-8")
    renamed = f"metadata: {{name: {name}, namespace: shop{meta}}}"
    copy = text[text.index(ROUTE_START) :].replace(
        "metadata: {name: cart, namespace: shop}", renamed
    )
    path.write_text(f"{text}---\n{copy}", "utf-8")
    return path.parent


def test_a_copied_route_never_gets_traffic_one_finding_at_its_match(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = with_copy(tmp_path / "shop", "cart-v2")
    rc, doc = check_json(capsys, str(folder))
    assert rc == 1
    found = only(doc)  # the xDS keeps both routes: unreachable-routes leaves it to EV915
    assert (found["code"], found["severity"], found["resource"]) == (
        "EV915",
        "warning",
        "HTTPRoute shop/cart-v2",
    )
    assert found["actual"] == {
        "winner": "HTTPRoute shop/cart rule 0 match 0",
        "criterion": '"{namespace}/{name}" alphabetical order',
    }
    assert isinstance(found["location"], str)
    (related,) = found["related"]
    lines = (folder / "resources.yaml").read_text("utf-8").splitlines()
    loser, winner = (int(at.rpartition(":")[2]) for at in (found["location"], related["location"]))
    assert lines[loser - 1] == lines[winner - 1] == "    - path: {type: PathPrefix, value: /cart}"
    assert winner < loser  # the original route's match, then the copy's
    # An xDS that drops the losing route (as another implementation may) is the same
    # mistake, found once.
    assert main(["translate", str(folder)]) == 0
    xds = json.loads(capsys.readouterr().out)
    (rc_dropped, dropped) = _dropped(xds, "shop/cart-v2/", tmp_path / "xds.json", capsys, folder)
    assert rc_dropped == 1 and [f["code"] for f in dropped["findings"]] == ["EV915"]


def _dropped(
    xds: object, prefix: str, out: Path, capsys: pytest.CaptureFixture[str], folder: Path
) -> tuple[int, dict[str, Any]]:
    """``check --xds`` on ``xds`` without the routes whose name starts with ``prefix``."""
    removed = 0

    def walk(node: object) -> None:
        nonlocal removed
        if isinstance(node, dict):
            routes = node.get("routes")
            if isinstance(routes, list) and "domains" in node:
                kept = [r for r in routes if not str(r.get("name", "")).startswith(prefix)]
                removed += len(routes) - len(kept)
                node["routes"] = kept
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(xds)
    assert removed == 1
    out.write_text(json.dumps(xds), "utf-8")
    return check_json(capsys, str(folder), "--xds", str(out))


def test_the_older_route_wins_and_a_duplicate_that_wins_elsewhere_is_not_dead(
    tmp_path: Path,
) -> None:
    """By age before name; and a copy that also serves a hostname of its own still
    gets traffic there, so it is not reported; within one route, rule order decides."""
    older = ', creationTimestamp: "2024-01-01T00:00:00Z"'
    res = load_resources([str(with_copy(tmp_path / "a", "cart-v2", older))])
    found = unreached_matches(res, DEFAULT_CONTROLLER)
    assert [(u.loser.key, u.winner.key, u.criterion) for u in found] == [
        (("shop", "cart", 0, 0), ("shop", "cart-v2", 0, 0), "oldest creationTimestamp")
    ]
    wider = with_copy(tmp_path / "b", "cart-v2")
    path = wider / "resources.yaml"
    text = path.read_text("utf-8")
    head, _, copy = text.rpartition(ROUTE_START)
    host = "  - cart.shop.example.com\n"
    path.write_text(head + ROUTE_START + copy.replace(host, f"{host}  - www.shop.example.com\n"))
    assert unreached_matches(load_resources([str(wider)]), DEFAULT_CONTROLLER) == []
    rules = "  rules:\n  - matches:"
    twice = edited(tmp_path / "c", (rules, rules.replace("  - matches:", TWICE)))
    found = unreached_matches(load_resources([str(twice)]), DEFAULT_CONTROLLER)
    assert [(u.loser.describe(), u.criterion) for u in found] == [
        ("HTTPRoute shop/cart rule 1 match 0", "rule order")
    ]


# ---------------------------------------------------------------- the cases table among the paths

CASES = """\
- name: cart-is-served
  gateway: {namespace: shop, name: web}
  request: {host: cart.shop.example.com, path: /cart/42, headers: {x-beta: "yes"}}
  expect: {status: 200}
"""


def test_a_glob_that_names_the_cases_table_runs_it_as_cases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write(tmp_path / "shop")
    (folder / "cases.yaml").write_text(CASES, "utf-8")
    paths = sorted(str(p) for p in folder.glob("*.yaml"))  # what `check shop/*.yaml` gives
    assert [Path(p).name for p in paths] == ["cases.yaml", "resources.yaml"]
    assert main(["check", *paths]) == 0
    out = capsys.readouterr()
    assert f"scenario shop: cases {folder / 'cases.yaml'} (1 case)" in out.out + out.err
    # Alone, it leaves nothing to check; to a command that reads no cases, it is a
    # cases table given as resources: both are bad input that says what it is.
    assert main(["check", paths[0]]) == 2
    assert "[no-resources]" in capsys.readouterr().err
    assert main(["status", *paths]) == 2
    assert f"{paths[0]}:1: this is a cases table" in capsys.readouterr().err
