"""`edge-verify status`: the stanzas a controller would write, and the text summary.

Scenarios with an ``expected-status.yaml`` say which conditions the spec
requires for their routes; the check is that they are present, so a scenario
need not spell out every condition a controller also sets.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import BASE, MINIMAL_YAML, fixture_dirs, rel, scenario_params
from rich.console import Console

from verifier.cli import main
from verifier.gatewayapi.attach import build_graph
from verifier.gatewayapi.load import load_texts
from verifier.gatewayapi.resources import build
from verifier.report.status import (
    LAST_TRANSITION_TIME,
    format_text,
    format_yaml,
    print_rich,
    status_documents,
    status_lines,
)

STATUS_SCENARIOS = [d for d in fixture_dirs() if (d / "expected-status.yaml").is_file()]
Key = tuple[str, str, str]


def _documents(text: str) -> list[dict[str, Any]]:
    res = build(load_texts([("test.yaml", text)]))
    return status_documents(res, build_graph(res))


def _by_key(docs: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    return {
        (d["kind"], d["metadata"]["namespace"], d["metadata"]["name"]): d["status"] for d in docs
    }


PARENT_DEFAULTS = {"group": "gateway.networking.k8s.io", "kind": "Gateway"}


def _parent_matches(ref: dict[str, Any], want: dict[str, Any]) -> bool:
    """A parentRef is identified by all its fields; an absent sectionName/port is part of it."""
    want = {**PARENT_DEFAULTS, **want}
    keys = ("group", "kind", "namespace", "name", "sectionName", "port")
    return all(ref.get(k) == want.get(k) for k in keys)


def _conditions_of(status: dict[str, Any], want: dict[str, Any], label: str) -> Any:
    """A route parent's conditions; without ``parent``, the object's own."""
    if "parent" not in want:
        return status.get("conditions", [])
    parents = status.get("parents", [])
    found = [p for p in parents if _parent_matches(p["parentRef"], want["parent"])]
    if not found:
        seen = [p["parentRef"] for p in parents]
        raise LookupError(f"{label}: no such parent in status.parents (have {seen})")
    return found[0]["conditions"]


def _missing(status: dict[Key, dict[str, Any]], want: dict[str, Any]) -> list[str]:
    """What of one expected-status.yaml entry the YAML output lacks, as readable lines."""
    key = (want["kind"], want["namespace"], want["name"])
    label = "{} {}/{}".format(*key) + (f" on {want['parent']}" if "parent" in want else "")
    if key not in status:
        return [f"{label}: `status --format yaml` wrote no status for this object"]
    try:
        conditions = _conditions_of(status[key], want, label)
    except LookupError as exc:
        return [str(exc)]
    have = {(c["type"], c["status"], c["reason"]) for c in conditions}
    return [
        f"{label}: missing condition {c['type']}={c['status']} ({c['reason']}); have {sorted(have)}"
        for c in want["conditions"]
        if (c["type"], str(c["status"]), c["reason"]) not in have
    ]


@pytest.mark.parametrize("scenario", scenario_params(STATUS_SCENARIOS, "expected-status.yaml"))
def test_expected_status(
    scenario: Path, repo_cwd: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", rel(BASE), rel(scenario), "--format", "yaml"]) == 0
    out = capsys.readouterr().out
    status = _by_key([d for d in yaml.safe_load_all(out) if d is not None])
    expected = yaml.safe_load((scenario / "expected-status.yaml").read_text(encoding="utf-8"))
    assert expected, f"{rel(scenario)}/expected-status.yaml lists nothing"
    problems = [line for want in expected for line in _missing(status, want)]
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def test_yaml_is_a_controller_status_stanza() -> None:
    docs = _documents(MINIMAL_YAML)
    assert [(d["apiVersion"], d["kind"]) for d in docs] == [
        ("gateway.networking.k8s.io/v1", "Gateway"),
        ("gateway.networking.k8s.io/v1", "HTTPRoute"),
    ]
    gw, route = docs
    assert gw["metadata"] == {"namespace": "web", "name": "edge"}
    (listener,) = gw["status"]["listeners"]
    assert listener["name"] == "http"
    assert listener["attachedRoutes"] == 1
    assert listener["supportedKinds"] == [
        {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}
    ]
    (parent,) = route["status"]["parents"]
    assert parent["parentRef"] == {
        "group": "gateway.networking.k8s.io",
        "kind": "Gateway",
        "namespace": "web",
        "name": "edge",
    }
    assert parent["controllerName"] == "gateway.aether.io/edge"
    for cond in parent["conditions"] + gw["status"]["conditions"] + listener["conditions"]:
        assert set(cond) == {
            "type",
            "status",
            "reason",
            "message",
            "observedGeneration",
            "lastTransitionTime",
        }
        assert cond["lastTransitionTime"] == LAST_TRANSITION_TIME
        assert cond["observedGeneration"] == 1
    assert {(c["type"], c["status"]) for c in parent["conditions"]} >= {
        ("Accepted", "True"),
        ("ResolvedRefs", "True"),
    }


def test_observed_generation_and_parent_ref_fields() -> None:
    text = MINIMAL_YAML.replace(
        "  name: echo\n  namespace: web\nspec:\n  parentRefs:\n  - name: edge\n",
        "  name: echo\n  namespace: web\n  generation: 7\nspec:\n  parentRefs:\n"
        "  - name: edge\n    sectionName: http\n    port: 80\n",
    )
    status = _by_key(_documents(text))
    (parent,) = status[("HTTPRoute", "web", "echo")]["parents"]
    assert parent["parentRef"]["sectionName"] == "http"
    assert parent["parentRef"]["port"] == 80
    assert {c["observedGeneration"] for c in parent["conditions"]} == {7}
    gw_conditions = status[("Gateway", "web", "edge")]["conditions"]
    assert {c["observedGeneration"] for c in gw_conditions} == {1}


def test_unresolved_backend_is_reported() -> None:
    status = _by_key(_documents(MINIMAL_YAML.replace("      port: 8080\n", "      port: 9999\n")))
    (parent,) = status[("HTTPRoute", "web", "echo")]["parents"]
    resolved = [c for c in parent["conditions"] if c["type"] == "ResolvedRefs"]
    assert [(c["status"], c["reason"]) for c in resolved] == [("False", "BackendNotFound")]


def test_yaml_stream_is_deterministic_and_parses() -> None:
    first = format_yaml(_documents(MINIMAL_YAML))
    assert first == format_yaml(_documents(MINIMAL_YAML))
    assert first.startswith("---\n")
    docs = list(yaml.safe_load_all(first))
    assert [d["kind"] for d in docs] == ["Gateway", "HTTPRoute"]
    # Condition status is a string in the API, never a YAML boolean.
    assert all(isinstance(c["status"], str) for c in docs[1]["status"]["parents"][0]["conditions"])


def test_text_has_one_line_per_condition() -> None:
    res = build(load_texts([("test.yaml", MINIMAL_YAML)]))
    graph = build_graph(res)
    lines = status_lines(res, graph)
    text = format_text(lines)
    gs = graph.gateway_status[("web", "edge")]
    n = len(gs.conditions) + sum(len(ls.conditions) for ls in gs.listeners)
    n += sum(len(p.conditions) for p in graph.route_status[("web", "echo")])
    assert len(text.splitlines()) == n
    assert "Gateway web/edge listener http (1 route): Programmed=True (Programmed)" in text
    assert "HTTPRoute web/echo -> Gateway web/edge: Accepted=True (Accepted)" in text


def test_rich_output_colours_problems() -> None:
    res = build(
        load_texts([("test.yaml", MINIMAL_YAML.replace("      port: 8080\n", "      port: 1\n"))])
    )
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, color_system="standard", width=200)
    print_rich(status_lines(res, build_graph(res)), console)
    out = buf.getvalue()
    assert "\x1b[31mResolvedRefs=False" in out  # red
    assert "\x1b[32mAccepted=True" in out  # green
