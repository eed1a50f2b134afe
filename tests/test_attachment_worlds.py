"""Drawn Gateway/HTTPRoute worlds: the translator and the spec model, written
separately, must agree on every one (``check`` finds nothing).

Core attachment and matching corners together: listeners on shared ports with
and without hostnames (exact and wildcard), routes whose parentRefs pick a
sectionName or a port, route hostnames that do or do not intersect,
allowedRoutes from Same/All/Selector, Exact and PathPrefix matches with header
conditions, and several routes competing for one host.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from worlds import GROUP, assert_check_finds_nothing, grant_from, world_settings

NAMESPACES = ["edge-infra", "edge-apps", "edge-web"]
LISTENER_HOSTS = [None, "a.w.test", "*.w.test", "b.a.w.test"]
ROUTE_HOSTS = ["a.w.test", "*.w.test", "b.a.w.test", "c.w.test", "*.a.w.test", "other.test"]
PATHS = ["/", "/p", "/p/", "/p/q", "/pq"]
BACKENDS = [("edge-infra", "infra-backend-v1"), ("edge-infra", "infra-backend-v2")]


@st.composite
def routes(draw: st.DrawFn, index: int, listeners: list[dict[str, Any]]) -> dict[str, Any]:
    ns = draw(st.sampled_from(NAMESPACES))
    ref: dict[str, Any] = {"name": "world", "namespace": "edge-infra"}
    how = draw(st.sampled_from(["gateway", "section", "port"]))
    if how == "section":
        ref["sectionName"] = draw(st.sampled_from([lst["name"] for lst in listeners]))
    elif how == "port":
        ref["port"] = draw(st.sampled_from(sorted({lst["port"] for lst in listeners})))
    rules = []
    for _ in range(draw(st.integers(1, 2))):
        match: dict[str, Any] = {
            "path": {
                "type": draw(st.sampled_from(["Exact", "PathPrefix"])),
                "value": draw(st.sampled_from(PATHS)),
            }
        }
        if draw(st.booleans()):
            match["headers"] = [{"name": "x-v", "value": draw(st.sampled_from(["1", "2"]))}]
        ns_b, name_b = draw(st.sampled_from(BACKENDS))
        rules.append(
            {"matches": [match], "backendRefs": [{"name": name_b, "namespace": ns_b, "port": 8080}]}
        )
    route: dict[str, Any] = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "HTTPRoute",
        "metadata": {
            "name": f"route-{index}",
            "namespace": ns,
            "creationTimestamp": f"2026-01-0{draw(st.integers(1, 3))}T00:00:00Z",
        },
        "spec": {"parentRefs": [ref], "rules": rules},
    }
    hosts = draw(st.lists(st.sampled_from(ROUTE_HOSTS), max_size=2, unique=True))
    if hosts:
        route["spec"]["hostnames"] = hosts
    return route


@st.composite
def worlds(draw: st.DrawFn) -> list[dict[str, Any]]:
    specs = draw(
        st.lists(
            st.tuples(st.sampled_from([8501, 8502]), st.sampled_from(LISTENER_HOSTS)),
            min_size=1,
            max_size=3,
            unique=True,
        )
    )
    listeners = []
    for i, (port, host) in enumerate(specs):
        lst: dict[str, Any] = {"name": f"l{i}", "port": port, "protocol": "HTTP"}
        if host is not None:
            lst["hostname"] = host
        allowed = draw(st.sampled_from(["Same", "All", "Selector"]))
        namespaces: dict[str, Any] = {"from": allowed}
        if allowed == "Selector":
            namespaces["selector"] = {"matchLabels": {"edge.example/role": "apps"}}
        lst["allowedRoutes"] = {"namespaces": namespaces}
        listeners.append(lst)
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "Gateway",
            "metadata": {"name": "world", "namespace": "edge-infra"},
            "spec": {"gatewayClassName": "aether", "listeners": listeners},
        }
    ]
    for i in range(draw(st.integers(1, 4))):
        docs.append(draw(routes(i, listeners)))
    for ns in sorted({d["metadata"]["namespace"] for d in docs} - {"edge-infra"}):
        docs.append(grant_from(ns))
    return docs


@world_settings(80)
@given(docs=worlds())
def test_translator_and_spec_model_agree_on_attachment(docs: list[dict[str, Any]]) -> None:
    assert_check_finds_nothing(docs)
