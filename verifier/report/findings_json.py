"""The JSON report: a documented, stable contract other tools parse."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from verifier.findings import Finding


def render(findings: list[Finding], summary: dict[str, Any], notes: Sequence[str] = ()) -> str:
    """``notes``: what reading the input noted (``pipeline.input_notes``), listed apart
    from the findings under ``input_notes`` when there are any."""
    doc: dict[str, Any] = {"findings": [f.to_json() for f in findings], "summary": summary}
    if notes:
        doc["input_notes"] = list(notes)
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"
