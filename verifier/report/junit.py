"""JUnit XML: one test case per (scenario, rule), failed by that rule's findings.

CI systems render JUnit natively, so a per-rule view shows up in the build
page without any plugin.
"""

from __future__ import annotations

from collections.abc import Sequence
from xml.etree import ElementTree as ET

from verifier.findings import Finding
from verifier.report.scenario import ScenarioReport
from verifier.report.text import finding_lines


def render(scenarios: Sequence[ScenarioReport]) -> str:
    """One suite per scenario, named after it, with a ``cases`` property per cases
    table it replayed. Notes on the input are no test case: the suite's
    ``<system-out>`` lists them."""
    suites = ET.Element("testsuites", name="edge-verify check")
    for scn in scenarios:
        name, ran, skipped, findings = scn.name, scn.ran, scn.skipped, scn.findings
        notes = scn.notes
        by_rule: dict[str, list[Finding]] = {}
        for f in findings:
            by_rule.setdefault(f.rule, []).append(f)
        failures = sum(1 for r in ran if any(f.severity == "error" for f in by_rule.get(r, [])))
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=name,
            tests=str(len(ran) + len(skipped)),
            failures=str(failures),
            skipped=str(len(skipped)),
        )
        if scn.cases:
            props = ET.SubElement(suite, "properties")
            for file, _count in scn.cases:
                ET.SubElement(props, "property", name="cases", value=file)
        for rule in ran:
            case = ET.SubElement(suite, "testcase", classname=name, name=rule)
            for f in by_rule.get(rule, []):
                tag = "failure" if f.severity == "error" else "system-out"
                el = ET.SubElement(case, tag)
                if tag == "failure":
                    el.set("message", f"{f.code} {f.message}")
                    el.set("type", f.code)
                el.text = "\n".join(finding_lines(f))
        for rule, reason in skipped:
            case = ET.SubElement(suite, "testcase", classname=name, name=rule)
            ET.SubElement(case, "skipped", message=reason)
        if notes:
            ET.SubElement(suite, "system-out").text = "\n".join(f"note: {n}" for n in notes)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
