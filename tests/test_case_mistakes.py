"""A new user's scenario, written from scratch: what check and live say about its cases.

A Gateway ``shop/web``, two Deployments with their Services (``cart``, ``cart-canary``)
and an HTTPRoute with a prefix match, a header match, a header modifier and a 90/10
split, as a user writes them (no fixtures/base), with a
cases.yaml that states the split. The mistakes users make (a misspelt backendRef, a
route hostname no listener has, a parentRef to a Gateway that does not exist, a split
changed by accident) must fail the per-PR check at the line of the mistake, naming
the case; live must not spend a minute of retries on a case both models already
explain.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from verifier.cli import main
from verifier.live.envoy_process import envoy_available

RESOURCES = (
    """\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: aether
spec:
  controllerName: gateway.aether.io/edge
---
apiVersion: v1
kind: Namespace
metadata:
  name: shop
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: web
  namespace: shop
spec:
  gatewayClassName: aether
  listeners:
  - name: http
    protocol: HTTP
    port: 80
    hostname: "*.shop.example.com"
"""
    + "".join(
        f"""---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {app}
  namespace: shop
spec:
  replicas: 1
  selector:
    matchLabels: {{app: {app}}}
  template:
    metadata:
      labels: {{app: {app}}}
    spec:
      containers:
      - name: echo
        image: echo
        ports:
        - containerPort: 3000
---
apiVersion: v1
kind: Service
metadata:
  name: {app}
  namespace: shop
spec:
  selector: {{app: {app}}}
  ports:
  - port: 8080
    targetPort: 3000
"""
        for app in ("cart", "cart-canary")
    )
    + """---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: cart
  namespace: shop
spec:
  parentRefs:
  - name: web
  hostnames:
  - cart.shop.example.com
  rules:
  - matches:
    - path: {type: PathPrefix, value: /cart}
      headers:
      - name: x-beta
        value: "yes"
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        add:
        - name: x-canary
          value: "1"
    backendRefs:
    - name: cart
      port: 8080
      weight: 90
    - name: cart-canary
      port: 8080
      weight: 10
"""
)

CASES = """\
- name: beta-split
  gateway: {namespace: shop, name: web}
  request: {host: cart.shop.example.com, path: /cart/1, headers: {x-beta: "yes"}}
  samples: 200
  expect:
    status: 200
    backends: [cart, cart-canary]
    namespace: shop
    backend_ratio: {cart: {ratio: 0.9, tolerance: 0.07}, cart-canary: {ratio: 0.1, tolerance: 0.07}}
"""


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str

    def findings(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = json.loads(self.out)["findings"]
        return found


def scenario(tmp_path: Path, old: str = "", new: str = "") -> Path:
    """The user's folder ``shop`` with one edit (``old`` -> ``new``) in resources.yaml."""
    folder = tmp_path / "shop"
    folder.mkdir()
    text = RESOURCES.replace(old, new, 1)
    assert text != RESOURCES or not old
    (folder / "resources.yaml").write_text(text, encoding="utf-8")
    (folder / "cases.yaml").write_text(CASES, encoding="utf-8")
    return folder


def line_of(folder: Path, text: str) -> str:
    """``shop/resources.yaml:N``: the line holding ``text``, as a user's editor numbers it."""
    lines = (folder / "resources.yaml").read_text(encoding="utf-8").splitlines()
    return f"shop/resources.yaml:{next(i for i, ln in enumerate(lines, 1) if text in ln)}"


@pytest.fixture
def edge_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Any:
    """``edge-verify ARGS`` in this process, from the user's directory."""
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> Run:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return Run(code, out, err)

    return run


def case_findings(r: Run) -> list[dict[str, Any]]:
    """The findings about cases (others, e.g. the static EV9xx checks, may join them)."""
    return [f for f in r.findings() if f["rule"] in ("case-expectations", "live-three-way")]


# The mistake, the text on its line, the status reason a controller would write.
MISTAKES = {
    "backendRef to a Service that does not exist": (
        "- name: cart-canary\n      port: 8080",
        "- name: cart-canry\n      port: 8080",
        "- name: cart-canry",
        "BackendNotFound, EV905",
    ),
    "backendRef port the Service lacks": (
        "- name: cart-canary\n      port: 8080",
        "- name: cart-canary\n      port: 8081",
        "port: 8081",
        "BackendNotFound, EV906",
    ),
    "route hostname no listener has": (
        "- cart.shop.example.com",
        "- cart.shop.exmaple.com",
        "- cart.shop.exmaple.com",
        "NoMatchingListenerHostname, EV903",
    ),
    "parentRef to a Gateway that does not exist": (
        "  - name: web\n",
        "  - name: wbe\n",
        "  - name: wbe",
        "NoMatchingParent, EV901",
    ),
}


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_a_case_failing_on_a_configuration_mistake_is_reported_at_the_mistake(
    mistake: str, tmp_path: Path, edge_verify: Any
) -> None:
    old, new, on_line, reason = MISTAKES[mistake]
    folder = scenario(tmp_path, old, new)
    r = edge_verify("check", "shop", "--format", "json")
    assert r.code == 1, r.err
    # One finding: the configuration rule's, at the mistake's line, with the case that
    # fails because of it as a related place (not one per model at the case, nor a
    # second finding for the case at the same line).
    (finding,) = r.findings()
    assert finding["code"] == reason.split(", ")[1]
    assert finding["location"] == line_of(folder, on_line)
    assert finding["resource"] == "HTTPRoute shop/cart"
    assert reason.split(", ")[0] in finding["message"]
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


def test_the_mistake_and_its_case_in_text_and_sarif(tmp_path: Path, edge_verify: Any) -> None:
    old, new, on_line, _ = MISTAKES["backendRef to a Service that does not exist"]
    folder = scenario(tmp_path, old, new)
    r = edge_verify("check", "shop")
    assert r.code == 1
    first = r.out.splitlines()[0]
    assert first.startswith(f"{line_of(folder, on_line)}: error EV905 ")
    related_line = "    related: shop/cases.yaml:1: case beta-split fails because of it: "
    assert any(ln.startswith(related_line) for ln in r.out.splitlines()), r.out
    r = edge_verify("check", "shop", "--format", "sarif")
    (result,) = json.loads(r.out)["runs"][0]["results"]
    assert result["ruleId"] == "EV905"
    (related,) = result["relatedLocations"]
    assert related["physicalLocation"]["artifactLocation"]["uri"] == "shop/cases.yaml"
    assert related["physicalLocation"]["region"]["startLine"] == 1
    assert related["message"]["text"].startswith("case beta-split fails because of it: ")


def test_a_split_ratio_is_judged_offline(tmp_path: Path, edge_verify: Any) -> None:
    """90/10 as the case says passes (an answer from cart-canary counts for the longer
    prefix, not for cart); the same route changed to 50/50 fails check: one finding at
    the case saying both models miss it alike, the rule whose weights they follow
    related."""
    scenario(tmp_path)
    r = edge_verify("check", "shop", "--format", "json")
    assert (r.code, r.findings()) == (0, []), r.out
    (tmp_path / "shop").rename(tmp_path / "right")
    scenario(tmp_path, "weight: 90", "weight: 50")
    text = (tmp_path / "shop" / "resources.yaml").read_text(encoding="utf-8")
    (tmp_path / "shop" / "resources.yaml").write_text(
        text.replace("weight: 10", "weight: 50"), encoding="utf-8"
    )
    r = edge_verify("check", "shop", "--format", "json")
    assert r.code == 1
    (found,) = case_findings(r)
    assert (found["code"], found["location"]) == ("EV703", "shop/cases.yaml:1")
    assert "backend cart share 0.50 of 2xx, expected 0.9±0.07" in found["message"]
    (rule,) = found["related"]
    assert rule["location"] == line_of(tmp_path / "shop", "  - matches:")


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
def test_live_sends_a_case_both_models_explain_once(tmp_path: Path, edge_verify: Any) -> None:
    """The misspelt backendRef: both models predict the case fails because of it, so
    live sends it once (one attempt of its 200 samples) and fails at once, naming the
    mistake at its line, instead of retrying it for the whole consistency budget."""
    old, new, on_line, _ = MISTAKES["backendRef to a Service that does not exist"]
    folder = scenario(tmp_path, old, new)
    started = time.monotonic()
    r = edge_verify("live", "shop", "--format", "json")
    elapsed = time.monotonic() - started
    assert r.code == 1, r.err
    assert elapsed < 20  # the default budget alone was 60 s of retries
    (case,) = json.loads(r.out)["cases"]
    assert (case["name"], case["passed"], case["attempts"]) == ("beta-split", False, 1)
    assert "cart-canry" in case["problems"][-1]
    (finding,) = [f for f in case_findings(r) if f["code"] == "EV808"]
    assert finding["location"] == line_of(folder, on_line)
    (case,) = finding["related"]
    assert case["location"] == "shop/cases.yaml:1" and case["what"].startswith("case beta-split")
