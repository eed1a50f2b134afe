"""Human-readable findings: the YAML line first, then the xDS path and the request."""

from __future__ import annotations

from typing import Any

from verifier.findings import Finding


def finding_lines(f: Finding) -> list[str]:
    where = f.location or "<xds>"
    lines = [f"{where}: {f.severity} {f.code} [{f.rule}] {f.message}"]
    if f.resource:
        lines.append(f"    resource: {f.resource}")
    if f.xds_path:
        lines.append(f"    xds: {f.xds_path}")
    if f.spec_ref:
        lines.append(f"    see: {f.spec_ref}")
    return lines


def render(findings: list[Finding], summary: dict[str, Any]) -> str:
    out: list[str] = []
    for f in findings:
        out.extend(finding_lines(f))
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
    if "scenarios" in summary:
        parts.insert(0, f"{summary['scenarios']} scenarios")
    if "baseline" in summary:
        b = summary["baseline"]
        if b["asked"] < b["requests"]:
            asked = f"{b['asked']:,} of {b['requests']:,} requests asked"
            parts.append(f"{asked} (the rest agreed at the baseline)")
        else:
            parts.append(f"all {b['requests']:,} requests asked (none agreed at the baseline)")
    return "edge-verify check: " + ", ".join(parts)
