"""JUnit XML: one test case per (scenario, rule), failed by that rule's findings.

CI systems render JUnit natively, so a per-rule view shows up in the build
page without any plugin.
"""

from __future__ import annotations

from collections.abc import Sequence
from xml.etree import ElementTree as ET

from verifier.errors import InputError
from verifier.findings import Finding
from verifier.report.scenario import ScenarioError, ScenarioReport
from verifier.report.text import finding_lines


def _input_case(suite: ET.Element, classname: str, errors: Sequence[InputError]) -> None:
    """A test case ``input`` failed by the input errors, counted in its suite."""
    case = ET.SubElement(suite, "testcase", classname=classname, name="input")
    n = len(errors)
    failure = ET.SubElement(
        case, "failure", message=f"{n} input error{'s' if n != 1 else ''}", type="input-error"
    )
    failure.text = "\n".join(str(err) for err in errors)
    for counter in ("tests", "failures"):
        suite.set(counter, str(int(suite.get(counter, "0")) + 1))


def render(scenarios: Sequence[ScenarioReport], errors: Sequence[ScenarioError] = ()) -> str:
    """One suite per scenario, named after it, with a ``cases`` property per cases
    table it replayed. Notes on the input are no test case: the suite's
    ``<system-out>`` lists them. The input errors of a run that exits 2 (``errors``)
    fail a test case ``input`` of their scenario's suite (of a suite ``input`` for
    those no scenario owns), so the report never passes."""
    suites = ET.Element("testsuites", name="edge-verify check")
    add_suites(suites, scenarios, errors)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def add_suites(
    suites: ET.Element, scenarios: Sequence[ScenarioReport], errors: Sequence[ScenarioError] = ()
) -> None:
    """Check's suites under ``suites`` (``run`` puts the live pass's after them)."""
    by_scenario: dict[str, list[InputError]] = {}
    for scenario, err in errors:
        by_scenario.setdefault(scenario, []).append(err)
    for scenario in sorted(set(by_scenario) - {s.name for s in scenarios}):
        suite = ET.SubElement(suites, "testsuite", name=scenario or "input", skipped="0")
        _input_case(suite, scenario or "input", by_scenario[scenario])
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
        if name in by_scenario:
            _input_case(suite, name, by_scenario[name])
        if notes:
            ET.SubElement(suite, "system-out").text = "\n".join(f"note: {n}" for n in notes)
