"""Live pass reports: text for people, JSON as a contract, JUnit for CI pages.

Every form says whether the data plane ran a rewritten copy of the xDS
(``rewritten``): a pass on a rewritten copy confirms a cousin of what was
checked, and a reader of the report must not have to guess which. Likewise
what was added to the served xDS (the access log that attributes each answer to
its route: ``additions``), and answers no route could be attributed to.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from xml.etree import ElementTree as ET

from verifier.live.results import UNATTRIBUTED, LiveReport
from verifier.report import junit
from verifier.report.scenario import ScenarioReport
from verifier.report.text import finding_lines


def render_json(
    report: LiveReport,
    checked: Sequence[ScenarioReport] = (),
    check_summary: dict[str, Any] | None = None,
) -> str:
    """``checked``: ``run``'s check pass, its findings listed before the live pass's
    (a new user's run exited 1 on a live EV801 whose cause, check's EV916, the JSON
    left out); ``check_summary`` its summary, under ``check``."""
    doc: dict[str, Any] = {
        "cases": [r.to_json() for r in report.results],
        "findings": [
            *({**f.to_json(), "scenario": s.name} for s in checked for f in s.findings),
            *({**f.to_json(), "scenario": r.name} for r in report.scenarios for f in r.findings),
        ],
        "additions": report.additions,
        "consistency": report.consistency,
        "summary": report.summary(),
    }
    mesh = {
        s.name: {"notes": list(s.notes), "start_seconds": s.timings}
        for s in report.scenarios
        if s.timings
    }
    if mesh:  # the scenarios whose mesh cases ran through sidecars: how, and what it cost
        doc["mesh"] = mesh
    if check_summary is not None:
        doc["check"] = check_summary
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


# How a cluster's mesh names itself in ``remote`` (``mesh_cluster``); no Gateway's
# "NS/NAME at IP" starts so.
MESH_REMOTE = "mesh, from pods "


def summary_line(summary: dict[str, Any]) -> str:
    copy = "a rewritten copy of the xDS" if summary["rewritten"] else "the xDS as checked"
    remote = summary.get("remote")
    if not remote:
        who = f"Envoy ran {copy}"
    elif remote.startswith(MESH_REMOTE):  # the cluster's own sidecars, not ours
        who = f"the cluster's {remote} answered"
    else:
        who = f"the cluster's Gateway {remote} answered"
    return (
        f"edge-verify live: {summary['passed']} passed, {summary['failed']} failed, "
        f"{summary['skipped']} skipped in {summary['seconds']:.1f}s ({who})"
    )


def unattributed_note(report: LiveReport) -> list[str]:
    """A line when some answers are attributed to no route (none is ever guessed)."""
    missing = report.unattributed
    if not missing:
        return []
    first = missing[0].attribution
    why = first.why if first is not None else ""
    n = len(missing)
    return [
        f"note: {n} case{'s' if n != 1 else ''} not attributed to an xDS route "
        f"(xds_route left empty): {why}"
    ]


def render_text(report: LiveReport, *, summary: bool = True) -> str:
    """Failures and findings only, then one summary line: a clean run is one line.
    ``summary=False``: without it (``run`` writes both passes' summaries to stderr)."""
    out: list[str] = []
    for r in report.results:
        if r.skipped:
            out.append(f"{r.scenario}: {r.name}: skipped: {r.skipped}")
        elif not r.passed:
            out.append(f"{r.scenario}: {r.name}: FAILED after {r.tries}")
            out.append(f"    request: {r.request}")
            out += [f"    {p}" for p in r.problems]
            # Which route served the answer (the proxy's access log), unless a problem says.
            a = r.attribution
            if (
                a is not None
                and a.state != UNATTRIBUTED
                and r.failure_kind != f"attribution-{a.verdict}"
            ):
                by = f"route {a.route}" if a.route else "no route"
                out.append(f"    served by: {by}" + (f" ({a.why})" if a.why else ""))
    for f in report.findings:
        out.extend(finding_lines(f))
    if report.rewritten:
        out.append(
            "note: Envoy ran a rewritten copy of the xDS (listeners and endpoints moved to "
            "loopback addresses); see docs/live.md"
        )
    out += unattributed_note(report)
    if summary:
        out.append(summary_line(report.summary()))
    return "".join(f"{line}\n" for line in out)


def render_junit(report: LiveReport, checked: Sequence[ScenarioReport] | None = None) -> str:
    """One test suite per scenario, one test case per case or witness. ``checked``:
    ``run``'s check pass, its suites (as ``check --format junit`` has them) first."""
    name = "edge-verify live" if checked is None else "edge-verify run"
    suites = ET.Element("testsuites", name=name)
    junit.add_suites(suites, checked or ())
    ET.SubElement(
        ET.SubElement(suites, "properties"),
        "property",
        name="rewritten",
        value=str(report.rewritten).lower(),
    )
    for scn in report.scenarios:
        failed = [r for r in scn.results if not r.passed and not r.skipped]
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=scn.name,
            tests=str(len(scn.results)),
            failures=str(len(failed)),
            skipped=str(sum(1 for r in scn.results if r.skipped)),
        )
        if scn.additions:
            props = ET.SubElement(suite, "properties")
            for i, line in enumerate(scn.additions):
                ET.SubElement(props, "property", name=f"served-xds-addition-{i}", value=line)
        by_note: dict[str, list[str]] = {}
        for f in scn.findings:
            by_note.setdefault(str((f.request or {}).get("path", "")), []).extend(finding_lines(f))
        for r in scn.results:
            case = ET.SubElement(
                suite, "testcase", classname=scn.name, name=r.name, time=f"{r.seconds:.3f}"
            )
            if r.skipped:
                ET.SubElement(case, "skipped", message=r.skipped)
            elif not r.passed:
                el = ET.SubElement(case, "failure", message="; ".join(r.problems)[:500])
                el.set("type", r.failure_kind)
                el.text = "\n".join([r.request, *r.problems])
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
