"""SARIF 2.1.0, so code review tools show findings inline on the YAML lines."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verifier.errors import InputError
from verifier.findings import Finding, catalogue
from verifier.registry import Rule
from verifier.report.scenario import ScenarioError, ScenarioReport

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}
EXIT_BAD_INPUT = 2  # the invocation's exit code when the input had errors


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
    return out


def _pass_rules(passes: Sequence[tuple[str, Sequence[str]]]) -> list[dict[str, Any]]:
    """The codes of a pass that is no rule of the registry (the live pass's verdicts,
    ``live-three-way``), described from the catalogue alone."""
    cat = catalogue()
    return [
        {
            "id": code,
            "name": name,
            "shortDescription": {"text": f"{name} {code}"},
            "fullDescription": {"text": cat[code].template},
            "helpUri": cat[code].spec_ref if cat[code].spec_ref.startswith("http") else None,
            "defaultConfiguration": {"level": LEVELS[cat[code].level]},
        }
        for name, codes in passes
        for code in codes
    ]


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


def _error(scenario: str, err: InputError) -> dict[str, Any]:
    """An input error as a tool execution notification: an error, at its line."""
    notification: dict[str, Any] = {
        "level": "error",
        "message": {"text": str(err)},
        "descriptor": {"id": err.code},
        "properties": {"scenario": scenario, "field": err.field},
    }
    if err.file:
        where: dict[str, Any] = {"artifactLocation": {"uri": _uri(err.file)}}
        if err.line:
            where["region"] = {"startLine": err.line}
        notification["locations"] = [{"physicalLocation": where}]
    return notification


def render(
    scenarios: Sequence[ScenarioReport],
    rules: Sequence[Rule],
    version: str,
    notes: Sequence[str] = (),
    errors: Sequence[ScenarioError] = (),
    passes: Sequence[tuple[str, Sequence[str]]] = (),
) -> str:
    """``notes``: what reading the input noted (``pipeline.input_notes``). They are not
    results: SARIF's place for them is the invocation's tool notifications. So is
    each input error (``errors``) of a run that exits 2: an error notification at its
    line, and the invocation marked ``executionSuccessful: false`` with exit code 2,
    so no reader takes the results of what could be checked for a clean run.
    ``passes``: (name, codes) of findings made by no rule of ``rules`` (``run``'s live
    pass), so that every result's ruleId is described."""
    descriptors = [*_rules(rules), *_pass_rules(passes)]
    for descriptor in descriptors:
        if descriptor["helpUri"] is None:
            del descriptor["helpUri"]
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "edge-verify",
                "version": version,
                "informationUri": "https://gateway-api.sigs.k8s.io/",
                "rules": descriptors,
            }
        },
        "results": [_result(f, s.name) for s in scenarios for f in s.findings],
        "properties": {"scenarios": [s.to_json() for s in scenarios]},
    }
    if notes or errors:
        invocation: dict[str, Any] = {
            "executionSuccessful": not errors,
            "toolExecutionNotifications": [
                *(_error(scenario, err) for scenario, err in errors),
                *({"level": "note", "message": {"text": n}} for n in notes),
            ],
        }
        if errors:
            invocation["exitCode"] = EXIT_BAD_INPUT
        run["invocations"] = [invocation]
    doc = {"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"
