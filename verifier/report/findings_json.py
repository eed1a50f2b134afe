"""The JSON report: a documented, stable contract other tools parse."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from verifier.report.scenario import ScenarioReport


def render(
    scenarios: Sequence[ScenarioReport], summary: dict[str, Any], notes: Sequence[str] = ()
) -> str:
    """Every finding with the scenario it was found in, and each scenario with the
    cases tables it replayed. ``notes``: what reading the input noted
    (``pipeline.input_notes``), listed apart from the findings under ``input_notes``
    when there are any."""
    doc: dict[str, Any] = {
        "findings": [{**f.to_json(), "scenario": s.name} for s in scenarios for f in s.findings],
        "scenarios": [s.to_json() for s in scenarios],
        "summary": summary,
    }
    if notes:
        doc["input_notes"] = list(notes)
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"
