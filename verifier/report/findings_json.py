"""The JSON report: a documented, stable contract other tools parse."""

from __future__ import annotations

import json
from typing import Any

from verifier.findings import Finding


def render(findings: list[Finding], summary: dict[str, Any]) -> str:
    doc = {"findings": [f.to_json() for f in findings], "summary": summary}
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"
