"""Attachment decisions that the fixtures alone would not pin down exhaustively."""

from __future__ import annotations

import pytest

from verifier.gatewayapi.attach import build_graph, intersect_hostnames
from verifier.gatewayapi.load import load_texts
from verifier.gatewayapi.resources import build


@pytest.mark.parametrize(
    ("listener", "route", "expected"),
    [
        (None, (), ("*",)),
        (None, ("a.example.com",), ("a.example.com",)),
        ("a.example.com", (), ("a.example.com",)),
        ("a.example.com", ("a.example.com", "b.example.com"), ("a.example.com",)),
        ("a.example.com", ("*.example.com",), ("a.example.com",)),
        (
            "*.example.com",
            ("a.example.com", "a.b.example.com"),
            ("a.example.com", "a.b.example.com"),
        ),
        ("*.example.com", ("example.com",), ()),
        ("*.example.com", ("*.b.example.com",), ("*.b.example.com",)),
        ("*.b.example.com", ("*.example.com",), ("*.b.example.com",)),
        ("*.example.com", ("*.example.org",), ()),
        ("foo.example.com", ("*.foo.example.com",), ()),
    ],
)
def test_hostname_intersection(
    listener: str | None, route: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    assert intersect_hostnames(listener, route) == expected


BASE = """
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: aether}
spec: {controllerName: gateway.aether.io/edge}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: other}
spec: {controllerName: example.com/other}
---
apiVersion: v1
kind: Namespace
metadata: {name: apps, labels: {team: a}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: infra}
spec:
  gatewayClassName: aether
  listeners:
  - {name: http, port: 80, protocol: HTTP, hostname: "*.example.com",
     allowedRoutes: {namespaces: {from: Selector, selector: {matchLabels: {team: a}}}}}
  - {name: tcp, port: 9000, protocol: TCP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: foreign, namespace: infra}
spec:
  gatewayClassName: other
  listeners: [{name: http, port: 80, protocol: HTTP}]
"""


def _graph(extra: str):  # type: ignore[no-untyped-def]
    res = build(load_texts([("t.yaml", BASE + "---\n" + extra)]))
    return build_graph(res)


def _route(
    ns: str, hostnames: str = "[a.example.com]", parent: str = "{name: gw, namespace: infra}"
) -> str:
    return f"""
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r, namespace: {ns}}}
spec:
  parentRefs: [{parent}]
  hostnames: {hostnames}
  rules: [{{backendRefs: [{{name: svc, port: 80}}]}}]
"""


def _reasons(graph, key=("apps", "r")):  # type: ignore[no-untyped-def]
    return [(c.type, c.status, c.reason) for p in graph.route_status[key] for c in p.conditions]


def test_selector_allows_labelled_namespace_and_backend_not_found() -> None:
    g = _graph(_route("apps"))
    assert ("Accepted", "True", "Accepted") in _reasons(g)
    assert ("ResolvedRefs", "False", "BackendNotFound") in _reasons(g)
    assert [a.hostnames for a in g.attached] == [("a.example.com",)]


def test_namespace_not_selected() -> None:
    g = _graph(_route("infra"))
    assert ("Accepted", "False", "NotAllowedByListeners") in _reasons(g, ("infra", "r"))


def test_hostname_mismatch() -> None:
    g = _graph(_route("apps", "[example.org]"))
    assert ("Accepted", "False", "NoMatchingListenerHostname") in _reasons(g)


def test_missing_section_is_no_matching_parent() -> None:
    g = _graph(_route("apps", parent="{name: gw, namespace: infra, sectionName: https}"))
    assert ("Accepted", "False", "NoMatchingParent") in _reasons(g)


def test_port_mismatch_is_no_matching_parent() -> None:
    g = _graph(_route("apps", parent="{name: gw, namespace: infra, port: 81}"))
    assert ("Accepted", "False", "NoMatchingParent") in _reasons(g)


def test_other_controllers_gateways_get_no_status_from_us() -> None:
    g = _graph(_route("apps", parent="{name: foreign, namespace: infra}"))
    assert ("apps", "r") not in g.route_status
    assert ("infra", "foreign") not in g.gateway_status


def test_unsupported_listener_protocol() -> None:
    g = _graph(_route("apps"))
    tcp = next(ls for ls in g.gateway_status[("infra", "gw")].listeners if ls.name == "tcp")
    assert any(c.reason == "UnsupportedProtocol" for c in tcp.conditions)
    http = next(ls for ls in g.gateway_status[("infra", "gw")].listeners if ls.name == "http")
    assert http.attached_routes == 1
