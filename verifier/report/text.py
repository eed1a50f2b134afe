"""Human-readable findings: the YAML line first, then the xDS path and the request."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from verifier.findings import Finding, reference


def finding_lines(f: Finding) -> list[str]:
    where = f.location or "<xds>"
    lines = [f"{where}: {f.severity} {f.code} [{f.rule}] {f.message}"]
    if f.resource:
        lines.append(f"    resource: {f.resource}")
    if f.xds_path:
        lines.append(f"    xds: {f.xds_path}")
    lines += [f"    related: {r.location or '<xds>'}: {r.what}" for r in f.related]
    if f.spec_ref:
        lines.append(f"    see: {reference(f.spec_ref)}")
    return lines


def render(findings: list[Finding], summary: dict[str, Any], notes: Sequence[str] = ()) -> str:
    """The findings, YAML line first; ``notes`` (what was run: the scenario and its
    cases tables) just above the summary, so a report still leads with a finding."""
    out: list[str] = []
    for f in findings:
        out.extend(finding_lines(f))
    out.extend(notes)
    if summary.get("unjudged"):
        n = summary["unjudged"]
        out.append(
            f"{n} request{'s' if n != 1 else ''} not judged: the Envoy answer rests on "
            "an assumption (EV110 says which)"
        )
    out.append(summary_line(summary))
    return "\n".join(out) + "\n"


def _expected(n: int) -> str:
    """The findings scenarios declare (expected-findings.yaml), which pass."""
    return f"{n} expected finding{'s' if n != 1 else ''} reported"


def summary_line(summary: dict[str, Any]) -> str:
    parts = [
        f"{summary['errors']} error{'s' if summary['errors'] != 1 else ''}",
        f"{summary['warnings']} warning{'s' if summary['warnings'] != 1 else ''}",
        *([_expected(summary["expected"])] if "expected" in summary else []),
        f"{summary['rules_run']} rules run",
        f"{summary['rules_skipped']} skipped",
    ]
    if "left_to_live" in summary:
        n = summary["left_to_live"]
        parts.append(f"{n} case{'s' if n != 1 else ''} with expectations left to live")
    if "mesh_requests" in summary:
        n = summary["mesh_requests"]
        parts.append(f"{n:,} mesh request{'s' if n != 1 else ''} judged")
    if "mesh_unjudged" in summary:
        n = summary["mesh_unjudged"]
        parts.append(f"{n:,} mesh request{'s' if n != 1 else ''} not judged")
    if "mesh_cases_spec_only" in summary:
        n = summary["mesh_cases_spec_only"]
        parts.append(f"{n} mesh case{'s' if n != 1 else ''} judged by the spec model only")
    if "scenarios" in summary:
        parts.insert(0, f"{summary['scenarios']} scenarios")
    notes = summary.get("input_notes", 0)
    if notes:
        parts.append(f"{notes} input note{'s' if notes != 1 else ''}")
    if "baseline" in summary:
        b = summary["baseline"]
        proven = b.get("proven", 0)
        cached = b["requests"] - b["asked"] - proven
        asked = f"{b['asked']:,} of {b['requests']:,} requests asked"
        said = [f"{proven:,} proven by the decision lists"] if proven else []
        said.append(f"{cached:,}" if cached else "none")
        said[-1] += " agreed at the baseline"
        parts.append(f"{asked} ({', '.join(said)})")
    return "edge-verify check: " + ", ".join(parts)
