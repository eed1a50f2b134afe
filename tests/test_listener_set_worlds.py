"""Drawn ListenerSet worlds: the reference translator and the spec model, written
separately, must agree on every one (``check`` finds nothing).

GEP-1713 leaves many corners: which ListenerSets a Gateway admits, precedence
by creation time then name, conflicts across resources, which parentRefs reach
which listeners, "Same" meaning the ListenerSet's namespace. Hypothesis draws
small worlds over those corners; a finding means one of the two readings of
the spec (or the Envoy model) is wrong, and the drawn YAML is the repro.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from worlds import GROUP, assert_check_finds_nothing, grant_from, world_settings

NAMESPACES = ["edge-infra", "edge-apps", "edge-web"]
PORTS = [8301, 8302]
HOSTNAMES = [None, "a.ls.test", "b.ls.test", "*.ls.test"]


def _listener(name: str, port: int, hostname: str | None, allowed: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "port": port, "protocol": "HTTP"}
    if hostname is not None:
        out["hostname"] = hostname
    out["allowedRoutes"] = {"namespaces": {"from": allowed}}
    return out


@st.composite
def worlds(draw: st.DrawFn) -> list[dict[str, Any]]:
    listeners = draw(
        st.lists(
            st.tuples(st.sampled_from(PORTS), st.sampled_from(HOSTNAMES)),
            min_size=1,
            max_size=2,
            unique=True,
        )
    )
    allowed = draw(st.sampled_from(["None", "Same", "All", "Selector"]))
    gateway: dict[str, Any] = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Gateway",
        "metadata": {"name": "parent", "namespace": "edge-infra"},
        "spec": {
            "gatewayClassName": "aether",
            "listeners": [
                _listener(f"gw-{i}", port, host, "All") for i, (port, host) in enumerate(listeners)
            ],
        },
    }
    if allowed != "None" or draw(st.booleans()):
        namespaces: dict[str, Any] = {"from": allowed}
        if allowed == "Selector":
            namespaces["selector"] = {"matchLabels": {"edge.example/role": "apps"}}
        gateway["spec"]["allowedListeners"] = {"namespaces": namespaces}
    docs = [gateway]
    sets = []
    for s in range(draw(st.integers(0, 3))):
        ns = draw(st.sampled_from(NAMESPACES))
        entries = draw(
            st.lists(
                st.tuples(st.sampled_from([*PORTS, 8303]), st.sampled_from(HOSTNAMES)),
                min_size=1,
                max_size=2,
                unique=True,
            )
        )
        day = draw(st.integers(1, 3))  # equal days leave the order to namespace/name
        docs.append(
            {
                "apiVersion": f"{GROUP}/v1",
                "kind": "ListenerSet",
                "metadata": {
                    "name": f"set-{s}",
                    "namespace": ns,
                    "creationTimestamp": f"2026-01-0{day}T00:00:00Z",
                },
                "spec": {
                    "parentRef": {"name": "parent", "namespace": "edge-infra"},
                    "listeners": [
                        _listener(f"l-{i}", port, host, draw(st.sampled_from(["Same", "All"])))
                        for i, (port, host) in enumerate(entries)
                    ],
                },
            }
        )
        sets.append((ns, f"set-{s}", [f"l-{i}" for i in range(len(entries))]))
    for r in range(draw(st.integers(1, 3))):
        ns = draw(st.sampled_from(NAMESPACES))
        refs: list[dict[str, Any]] = []
        if not sets or draw(st.booleans()):
            refs.append({"name": "parent", "namespace": "edge-infra"})
        if sets:
            set_ns, set_name, names = draw(st.sampled_from(sets))
            ref: dict[str, Any] = {"kind": "ListenerSet", "name": set_name, "namespace": set_ns}
            if draw(st.booleans()):
                ref["sectionName"] = draw(st.sampled_from(names))
            refs.append(ref)
        route: dict[str, Any] = {
            "apiVersion": f"{GROUP}/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": f"route-{r}", "namespace": ns},
            "spec": {
                "parentRefs": refs,
                "rules": [
                    {
                        "matches": [{"path": {"type": "PathPrefix", "value": f"/r{r}"}}],
                        "backendRefs": [
                            {"name": "infra-backend-v1", "namespace": "edge-infra", "port": 8080}
                        ],
                    }
                ],
            },
        }
        hosts = draw(st.lists(st.sampled_from(["a.ls.test", "b.ls.test", "c.ls.test"]), max_size=2))
        if hosts:
            route["spec"]["hostnames"] = sorted(set(hosts))
        docs.append(route)
        if ns != "edge-infra":
            docs.append(grant_from(ns))
    return docs


@world_settings(40)
@given(docs=worlds())
def test_translator_and_spec_model_agree_on_listener_sets(docs: list[dict[str, Any]]) -> None:
    assert_check_finds_nothing(docs)
