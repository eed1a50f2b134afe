"""One checked scenario as every report names it: its name, its cases tables, its findings.

A scenario given as explicit paths is named after them (``pipeline.scenario_name``)
and runs the cases.yaml beside them; every report says which name and which tables,
so a table that ran, or did not, is never a surprise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verifier.errors import InputError, clip_message
from verifier.findings import Finding

# An input error and the scenario it was found in ("" when it is no scenario's: a file
# or option every scenario shares). A report of a run that met any exits 2 and says so.
ScenarioError = tuple[str, InputError]


def error_location(err: InputError) -> str:
    """``file:line`` as a finding's location reads, or the file alone (line 0: all of it)."""
    return f"{err.file}:{err.line}" if err.line else err.file


def error_json(scenario: str, err: InputError) -> dict[str, Any]:
    """An input error in the JSON report, beside the findings."""
    return {
        "scenario": scenario,
        "location": error_location(err),
        "field": err.field,
        "code": err.code,
        "message": clip_message(err.message),
    }


@dataclass(frozen=True)
class ScenarioReport:
    """What the reports say of a scenario; ``ran`` and ``skipped`` are its rules (JUnit)."""

    name: str
    # Each cases table replayed and how many cases it holds.
    cases: tuple[tuple[str, int], ...] = ()
    findings: tuple[Finding, ...] = ()
    ran: tuple[str, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    # What reading the input noted (endpoints derived from workloads, ...): no finding.
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "cases": [{"file": f, "cases": n} for f, n in self.cases]}

    def line(self) -> str:
        """``scenario shop: cases shop/cases.yaml (1 case)``, or that it has none."""
        if not self.cases:
            return (
                f"scenario {self.name}: no cases table (no cases.yaml beside the paths "
                "given; --cases FILE adds one)"
            )
        tables = ", ".join(f"{f} ({n} case{'s' if n != 1 else ''})" for f, n in self.cases)
        return f"scenario {self.name}: cases {tables}"
