"""The JSON report: a documented, stable contract other tools parse."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from verifier.report.scenario import ScenarioError, ScenarioReport, error_json


def render(
    scenarios: Sequence[ScenarioReport],
    summary: dict[str, Any],
    notes: Sequence[str] = (),
    errors: Sequence[ScenarioError] = (),
) -> str:
    """Every finding with the scenario it was found in, and each scenario with the
    cases tables it replayed. ``notes``: what reading the input noted
    (``pipeline.input_notes``), listed apart from the findings under ``input_notes``
    when there are any. ``errors``: the input errors of a run that exits 2, under
    ``input_errors`` (and counted in the summary), so the report never looks clean."""
    doc: dict[str, Any] = {
        "findings": [{**f.to_json(), "scenario": s.name} for s in scenarios for f in s.findings],
        "scenarios": [s.to_json() for s in scenarios],
        "summary": summary,
    }
    if notes:
        doc["input_notes"] = list(notes)
    if errors:
        doc["input_errors"] = [error_json(scenario, err) for scenario, err in errors]
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"
