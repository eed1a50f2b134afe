"""Which rule owns a disagreement: the most specific feature rule, else the catch-all."""

from __future__ import annotations

from verifier.rules.ownership import owner

from verifier.check import Comparison, Context
from verifier.gatewayapi.load import load_texts
from verifier.gatewayapi.resources import build
from verifier.semantics import witness as wt
from verifier.semantics.request import (
    Backend,
    Evaluation,
    Forwarded,
    Outcome,
    RedirectTarget,
    Request,
)
from verifier.xds.snapshot import Snapshot

ROUTE = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: ns}
spec:
  parentRefs: [{name: gw}]
  rules:
  - filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: {set: [{name: X-A, value: b}]}
    backendRefs: [{name: svc, port: 80}]
"""


def _ctx() -> Context:
    return Context(build(load_texts([("t.yaml", ROUTE)])), Snapshot())


def _cmp(feature: str, spec: Outcome, envoy: Outcome, diffs: tuple[str, ...]) -> Comparison:
    w = wt.Witness(("ns", "gw"), Request(host="h"), feature, ("ns", "r"), 0, 0, "note")
    return Comparison(w, Evaluation(spec), Evaluation(envoy), diffs)


FWD = Forwarded("GET", "h", "/", ())
OK = Outcome(200, (Backend("ns", "svc", 80),), request=FWD)


def test_routing_difference_on_a_filter_witness_falls_to_the_catch_all() -> None:
    c = _cmp(wt.FILTERS, OK, Outcome(404), ("status", "backends", "forwarded"))
    assert owner(c, _ctx()) == "whole-config-equivalence"


def test_feature_witnesses_go_to_their_rule() -> None:
    c = _cmp(wt.HEADER, OK, Outcome(404), ("status",))
    assert owner(c, _ctx()) == "httproute-header-matching"


def test_redirect_fields_go_to_the_redirect_feature() -> None:
    a = Outcome(302, redirect=RedirectTarget("https", "h", 443, "/"))
    b = Outcome(302, redirect=RedirectTarget("http", "h", 443, "/"))
    assert owner(_cmp(wt.PATH, a, b, ("redirect.scheme",)), _ctx()) == "httproute-scheme-redirect"


def test_request_header_changes_go_to_the_modifier_rule() -> None:
    b = Outcome(
        200, (Backend("ns", "svc", 80),), request=Forwarded("GET", "h", "/", (("x-a", ("c",)),))
    )
    c = _cmp(wt.PATH, OK, b, ("request.headers",))
    assert owner(c, _ctx()) == "httproute-request-header-modifier"
