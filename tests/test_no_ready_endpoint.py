"""A Service with no ready endpoint: both models answer 503, as a cluster's edge does.

HTTPRouteRule.backendRefs: "When a HTTPBackendRef refers to a Service that has
no ready endpoints, implementations SHOULD return a 503 for requests to that
backend instead." The spec model reads it from the Service's EndpointSlices
(given, or derived from its workloads); the Envoy model from what the xDS dials
(an empty EDS assignment, or a Service name whose pods are gone).
"""

from __future__ import annotations

import pytest
from conftest import GATEWAY_NS_GW

from verifier.check import Context, outcome_diff
from verifier.gatewayapi.attach import build_graph
from verifier.gatewayapi.load import load_texts
from verifier.gatewayapi.resources import Resources, build
from verifier.mutate.catalog import equivalent, mutants
from verifier.semantics.cases import possible_statuses
from verifier.semantics.directory import BackendDirectory, backend_directory_from
from verifier.semantics.envoy.model import EnvoyModel
from verifier.semantics.request import Outcome, Request
from verifier.semantics.shares import status_shares
from verifier.semantics.spec.model import SpecModel
from verifier.translate import TranslateOptions, translate

GATEWAY = ("ns", "gw")


def _deployment(name: str, replicas: int) -> str:
    return f"""---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: ns}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec: {{containers: [{{name: c, ports: [{{containerPort: 3000}}]}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: ns}}
spec: {{selector: {{app: {name}}}, ports: [{{port: 8080, targetPort: 3000}}]}}
"""


def _rule(path: str, *backends: str) -> str:
    refs = ", ".join(f"{{name: {b}, port: 8080}}" for b in backends)
    return (
        f"  - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]\n    backendRefs: [{refs}]\n"
    )


WORLD = (
    GATEWAY_NS_GW
    + _deployment("up", 2)
    + _deployment("down", 0)
    + _deployment("gone", 0)
    + """---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: ns}
spec:
  parentRefs: [{name: gw}]
  rules:
"""
    + _rule("/up", "up")
    + _rule("/down", "down")
    + _rule("/all-down", "down", "gone")
    + _rule("/some-down", "up", "down")
    + _rule("/missing-and-down", "missing", "down")
)


@pytest.fixture(scope="module")
def world() -> tuple[Resources, Context]:
    res = build(load_texts([("world.yaml", WORLD)]))
    return res, Context(res, translate(res, build_graph(res), TranslateOptions()))


def _both(world: tuple[Resources, Context], path: str) -> tuple[Outcome, Outcome]:
    res, ctx = world
    request = ctx.sent(GATEWAY, Request(host="x.example.com", path=path))
    spec = SpecModel(res).evaluate(GATEWAY, request).outcome
    envoy = EnvoyModel(ctx.snapshot, backend_directory_from(res)).evaluate(request).outcome
    return spec, envoy


@pytest.mark.parametrize(
    ("path", "status"), [("/up", 200), ("/down", 503), ("/all-down", 503), ("/some-down", 200)]
)
def test_both_models_answer_503_when_no_backend_has_a_ready_endpoint(
    world: tuple[Resources, Context], path: str, status: int
) -> None:
    spec, envoy = _both(world, path)
    assert (spec.status, envoy.status) == (status, status)
    assert spec.backends == envoy.backends


def test_the_share_of_a_backend_without_endpoints_is_answered_503(
    world: tuple[Resources, Context],
) -> None:
    """With one backend up, the other's share (not all) gets 503, in both models, each
    from its own reading: the spec model from the EndpointSlices, the Envoy model from
    the Service name its STRICT_DNS cluster dials, or from an EDS cluster left with no
    endpoint (as another implementation writes a Service without pods)."""
    spec, envoy = _both(world, "/some-down")
    assert [(b.name, b.weight) for b in spec.backends] == [("up", 1)]
    assert (spec.unavailable_weight, spec.invalid_weight) == (1, 0)
    assert status_shares(spec) == status_shares(envoy) == {200: 0.5, 503: 0.5}
    assert possible_statuses(envoy) == {200, 503}
    assert outcome_diff(spec, envoy) == ()
    _, ctx = world
    (eds,) = [
        m
        for m in mutants(ctx.snapshot)
        if (m.operator, m.xds_path) == ("dns-to-eds-empty", "clusters[k8s/ns/down/8080].type")
    ]
    request = ctx.sent(GATEWAY, Request(host="x.example.com", path="/some-down"))
    # No directory: what the cluster dials is all the model knows (an empty assignment).
    xds_only = EnvoyModel(eds.snapshot, BackendDirectory()).evaluate(request).outcome
    assert status_shares(xds_only) == {200: 0.5, 503: 0.5}
    assert (len(xds_only.backends), xds_only.unavailable_weight) == (1, 1)


def test_an_invalid_share_beside_a_backend_without_endpoints_is_500_and_503(
    world: tuple[Resources, Context],
) -> None:
    """No backend answers, but not for one reason: the invalid backendRef's share is 500,
    the other's 503, in both models."""
    spec, envoy = _both(world, "/missing-and-down")
    assert status_shares(spec) == status_shares(envoy) == {500: 0.5, 503: 0.5}
    assert possible_statuses(spec) == possible_statuses(envoy) == {500, 503}
    assert outcome_diff(spec, envoy) == ()


def test_a_mutant_of_a_cluster_with_no_host_is_proven_equivalent(
    world: tuple[Resources, Context],
) -> None:
    """Empty EDS or DNS to a Service without endpoints: 503 either way, so the mutation
    score does not count such mutants as survivors; a made-up host is not hostless."""
    res, ctx = world
    hostless = backend_directory_from(res).unready_names()
    assert "down.ns.svc.cluster.local" in hostless
    assert "up.ns.svc.cluster.local" not in hostless
    by_site = {(m.operator, m.xds_path): m for m in mutants(ctx.snapshot)}
    down = "clusters[k8s/ns/down/8080].type"
    up = "clusters[k8s/ns/up/8080].type"
    assert equivalent(ctx.snapshot, by_site[("dns-to-eds-empty", down)], hostless)
    assert not equivalent(ctx.snapshot, by_site[("dns-to-eds-empty", down)])
    assert not equivalent(ctx.snapshot, by_site[("dns-to-eds-empty", up)], hostless)
    assert not equivalent(ctx.snapshot, by_site[("dns-to-eds-made-up", down)], hostless)
