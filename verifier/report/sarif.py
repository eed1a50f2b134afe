"""SARIF 2.1.0, so code review tools show findings inline on the YAML lines."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verifier.findings import Finding, catalogue
from verifier.registry import Rule
from verifier.report.scenario import ScenarioReport

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}


def _uri(file: str) -> str:
    path = Path(file)
    if path.is_absolute():
        try:
            path = path.relative_to(Path.cwd())
        except ValueError:
            return path.as_uri()
    return path.as_posix()


def _rules(rules: Sequence[Rule]) -> list[dict[str, Any]]:
    out = []
    cat = catalogue()
    for rule in sorted(rules, key=lambda r: r.codes[0]):
        for code in rule.codes:
            msg = cat[code]
            out.append(
                {
                    "id": code,
                    "name": rule.name,
                    "shortDescription": {
                        "text": rule.doc.splitlines()[0] if rule.doc else rule.name
                    },
                    "fullDescription": {"text": rule.doc},
                    "helpUri": msg.spec_ref if msg.spec_ref.startswith("http") else None,
                    "defaultConfiguration": {"level": LEVELS[msg.level]},
                    "properties": {"features": list(rule.features)},
                }
            )
    for r in out:
        if r["helpUri"] is None:
            del r["helpUri"]
    return out


def _result(f: Finding, scenario: str) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": f.code,
        "level": LEVELS[f.severity],
        "message": {"text": f.message},
        "properties": {
            "rule": f.rule,
            "resource": f.resource,
            "xds_path": f.xds_path,
            "scenario": scenario,
        },
    }
    if f.request is not None:
        result["properties"]["request"] = f.request
    if f.file:
        result["locations"] = [{"physicalLocation": _physical(f.file, f.line)}]
    related = [r for r in f.related if r.file]
    if related:
        result["relatedLocations"] = [
            {"id": i, "physicalLocation": _physical(r.file, r.line), "message": {"text": r.what}}
            for i, r in enumerate(related)
        ]
    return result


def _physical(file: str, line: int) -> dict[str, Any]:
    return {"artifactLocation": {"uri": _uri(file)}, "region": {"startLine": max(line, 1)}}


def render(
    scenarios: Sequence[ScenarioReport],
    rules: Sequence[Rule],
    version: str,
    notes: Sequence[str] = (),
) -> str:
    """``notes``: what reading the input noted (``pipeline.input_notes``). They are not
    results: SARIF's place for them is the invocation's tool notifications."""
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "edge-verify",
                "version": version,
                "informationUri": "https://gateway-api.sigs.k8s.io/",
                "rules": _rules(rules),
            }
        },
        "results": [_result(f, s.name) for s in scenarios for f in s.findings],
        "properties": {"scenarios": [s.to_json() for s in scenarios]},
    }
    if notes:
        run["invocations"] = [
            {
                "executionSuccessful": True,
                "toolExecutionNotifications": [
                    {"level": "note", "message": {"text": n}} for n in notes
                ],
            }
        ]
    doc = {"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"
