"""`edge-verify check` as users and CI meet it: exit codes, report formats, broken xDS.

The fixture suite must pass; xDS broken by hand (one translator mistake each) must be
reported with the right code, the YAML line of the HTTPRoute match it breaks, the xDS
path and a request that shows it. Reports are contracts (JSON, SARIF, JUnit), so their
shape is asserted exactly. Bad input exits 2 with ``file:line`` messages, never a
traceback.

Most runs are in-process (``verifier.cli.main``, the same code as the script, without
the interpreter start-up); the suite, determinism and exit-code-across-the-process
tests run the real command.
"""

from __future__ import annotations

import copy
import io
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
import yaml
from conftest import BASE, FIXTURES, REPO_ROOT, declared_findings, fixture_dirs, rel
from docblocks import check_block
from verifier.rules import RULES

from verifier.cli import build_parser, main
from verifier.features import AETHER_EDGE, PROFILES
from verifier.findings import catalogue
from verifier.report.text import summary_line

FINDING_KEYS = {
    "code",
    "rule",
    "severity",
    "message",
    "resource",
    "location",
    "xds_path",
    "request",
    "expected",
    "actual",
    "scenario",
    "related",
}
SUMMARY_KEYS = {"errors", "warnings", "rules_run", "rules_skipped"}
SUITE_SUMMARY_KEYS = SUMMARY_KEYS | {"scenarios"}
OUTCOME_KEYS = {
    "status",
    "backends",
    "invalid_weight",
    "unavailable_weight",
    "request",
    "response_headers",
    "response_headers_removed",
    "redirect",
    "mirrors",
    "timeouts",
    "route",
}
REQUEST_KEYS = {
    "method",
    "scheme",
    "host",
    "port",
    "address",
    "proxy_port",
    "path",
    "headers",
    "sni",
    "client_cert",
}
ERROR_COUNT = re.compile(r"^edge-verify: (\d+) input errors?$")
# The rules the gateway-api profile (GATEWAY-HTTP) does not claim: the edge's own
# backend contract (AetherEdgeBackends) and the mesh's (MESH-HTTP).
AETHER_RULES = sorted(r.name for r in RULES if not set(r.features) <= PROFILES["gateway-api"])


# ---------------------------------------------------------------- running the command


@dataclass(frozen=True)
class Run:
    rc: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def error_lines(self) -> list[str]:
        """Exit 2, no traceback, a final error count that matches; the error lines."""
        assert self.rc == 2, (self.rc, self.err)
        assert "Traceback" not in self.err, self.err
        lines = [
            ln
            for ln in self.err.splitlines()
            if not ln.startswith(("warning: ", "note: ", "live only: ", "skipped: "))
        ]
        assert lines, "no error reported"
        count = ERROR_COUNT.match(lines[-1])
        assert count, f"last stderr line is not the error count: {lines[-1]!r}"
        assert int(count[1]) == len(lines) - 1, self.err
        return lines[:-1]


def run_process(*args: str, env: dict[str, str] | None = None) -> Run:
    """``python -m verifier.cli`` from the repo root, no terminal attached."""
    proc = subprocess.run(
        [sys.executable, "-m", "verifier.cli", *args],
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


CLI = Callable[..., Run]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], repo_cwd: Path) -> CLI:
    """``edge-verify ARGS`` in this process, from the repo root."""

    def run(*args: str) -> Run:
        capsys.readouterr()
        rc = main(list(args))
        out, err = capsys.readouterr()
        return Run(rc, out, err)

    return run


def scenario_args(name: str) -> list[str]:
    return [rel(BASE), rel(FIXTURES / name)]


# ---------------------------------------------------------------- xDS, broken by hand


def route_config(doc: dict[str, Any], name: str) -> dict[str, Any]:
    """The RouteConfiguration ``name`` of a config_dump."""
    configs = section(doc, "Routes")["dynamic_route_configs"]
    found: dict[str, Any] = next(
        c["route_config"] for c in configs if c["route_config"]["name"] == name
    )
    return found


def translated(out: Path, scenario: str) -> dict[str, Any]:
    """``edge-verify translate base scenario -o out``, as a JSON document."""
    rc = main(["translate", str(BASE), str(FIXTURES / scenario), "-o", str(out)])
    assert rc == 0
    doc: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return doc


def section(doc: dict[str, Any], kind: str) -> dict[str, Any]:
    """The ``<kind>ConfigDump`` entry of a config_dump (kind: Clusters, Routes, ...)."""
    found = [c for c in doc["configs"] if c["@type"].endswith(f".{kind}ConfigDump")]
    assert len(found) == 1, kind
    return found[0]


def xds_route(
    doc: dict[str, Any], name: str, config: str | None = None
) -> tuple[dict[str, Any], str]:
    """The xDS route called ``name`` (in RouteConfiguration ``config``, else the first
    that has one) and its xDS path, as findings spell it."""
    for entry in section(doc, "Routes")["dynamic_route_configs"]:
        rc = entry["route_config"]
        if config is not None and rc["name"] != config:
            continue
        for vh in rc.get("virtual_hosts", []):
            for i, route in enumerate(vh.get("routes", [])):
                if route.get("name") == name:
                    path = f"routes[{rc['name']}].virtual_hosts[{vh['name']}].routes[{i}]"
                    return route, path
    raise AssertionError(f"no xDS route {name!r}")


def yaml_line(file: Path, kind: str, name: str, field_path: str) -> int:
    """1-based line of ``field_path`` (e.g. ``spec.rules[0].matches[0]``) in an object."""
    for doc in yaml.compose_all(file.read_text(encoding="utf-8"), Loader=yaml.SafeLoader):
        if not isinstance(doc, yaml.MappingNode):
            continue
        top = {k.value: v for k, v in doc.value}
        meta = {k.value: v for k, v in top["metadata"].value}
        if top["kind"].value != kind or meta["name"].value != name:
            continue
        node: yaml.Node = doc
        for step in re.findall(r"[^.\[\]]+|\[\d+\]", field_path):
            if step.startswith("["):
                node = node.value[int(step[1:-1])]
            else:
                node = next(v for k, v in node.value if k.value == step)
        return int(node.start_mark.line) + 1
    raise AssertionError(f"no {kind} {name} in {file}")


def camel_case(node: Any) -> Any:
    """protojson's camelCase field names; map keys (names with '.' or '/') are kept."""
    if isinstance(node, list):
        return [camel_case(v) for v in node]
    if not isinstance(node, dict):
        return node

    def key(k: str) -> str:
        if k.startswith("@") or not re.fullmatch(r"[a-z0-9_]+", k):
            return k
        head, *rest = k.split("_")
        return head + "".join(p[:1].upper() + p[1:] for p in rest)

    return {key(k): camel_case(v) for k, v in node.items()}


def _prefix_loses_boundary(route: dict[str, Any]) -> None:
    match = route["match"]
    match["prefix"] = match.pop("path_separated_prefix")


def _drop_header_matcher(route: dict[str, Any]) -> None:
    del route["match"]["headers"]


def _port_left_to_the_host(route: dict[str, Any]) -> None:
    """A scheme redirect without port_redirect: Envoy keeps a port the Host names."""
    assert route["redirect"].pop("port_redirect") == 443


def _302_for_303(route: dict[str, Any]) -> None:
    assert route["redirect"]["response_code"] == "SEE_OTHER"
    route["redirect"]["response_code"] = "FOUND"


@dataclass(frozen=True)
class Breakage:
    """One translator mistake: which xDS route it hits, and what check must say.

    A finding points at the HTTPRoute match its witness request exercises, or at the
    filter for what a filter does (a redirect's status code: the RequestRedirect).
    """

    id: str
    scenario: str
    httproute: str  # namespace/name
    rule: int
    match: int
    edit: Callable[[dict[str, Any]], None]
    code: str
    points_at: str  # the field of the HTTPRoute the finding's location names
    config: str | None = None  # the RouteConfiguration edited; None: the first with the route

    @property
    def xds_name(self) -> str:
        return f"{self.httproute}/rule/{self.rule}/match/{self.match}"

    def location(self) -> str:
        file = FIXTURES / self.scenario / "resources.yaml"
        line = yaml_line(file, "HTTPRoute", self.httproute.split("/")[1], self.points_at)
        return f"{rel(file)}:{line}"


BREAKAGES = [
    Breakage(
        "path_separated_prefix-to-prefix",
        "httproute-path-prefix-matching",
        "edge-infra/path-prefix",
        0,
        0,
        _prefix_loses_boundary,
        "EV201",
        "spec.rules[0].matches[0]",
    ),
    Breakage(
        "header-matcher-deleted",
        "httproute-header-matching",
        "edge-infra/header-matching",
        3,
        0,
        _drop_header_matcher,
        "EV202",
        "spec.rules[3].matches[0]",
    ),
    Breakage(
        "303-becomes-302",
        "httproute-303-redirect-status-code",
        "edge-infra/redirect-303",
        0,
        0,
        _302_for_303,
        "EV213",
        "spec.rules[0].filters[0]",
    ),
    Breakage(
        "scheme-redirect-port-left-to-the-host",
        "httproute-scheme-redirect",
        "edge-infra/scheme-redirect",
        0,
        0,
        _port_left_to_the_host,
        "EV211",
        "spec.rules[0].filters[0]",
        # Port 80's: only a Host naming another port shows it (Envoy drops ":80" on
        # the scheme change; on the 8080 listener the Host's own port would do).
        "edge-edge-infra-same-namespace-80",
    ),
]


@dataclass(frozen=True)
class BrokenXds:
    breakage: Breakage
    good: Path  # as translated
    file: Path  # with the mistake
    camel: Path  # with the mistake, camelCase field names
    xds_path: str  # of the broken route


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> dict[str, BrokenXds]:
    out = {}
    for b in BREAKAGES:
        folder = tmp_path_factory.mktemp(b.id)
        good = folder / "xds.json"
        doc = translated(good, b.scenario)
        route, path = xds_route(doc, b.xds_name, b.config)
        b.edit(route)
        file, camel = folder / "broken.json", folder / "broken-camel.json"
        file.write_text(json.dumps(doc, indent=2), encoding="utf-8")
        camel.write_text(json.dumps(camel_case(doc), indent=2), encoding="utf-8")
        out[b.id] = BrokenXds(b, good, file, camel, path)
    return out


def check_json(cli: CLI, scenario: str, *extra: str) -> tuple[int, dict[str, Any]]:
    r = cli("check", *scenario_args(scenario), "--format", "json", *extra)
    assert "Traceback" not in r.err
    return r.rc, r.json()


# ---------------------------------------------------------------- the fixture suite


@dataclass(frozen=True)
class SuiteRuns:
    json_a: Run
    json_b: Run
    junit: Run


@pytest.fixture(scope="module")
def suite() -> SuiteRuns:
    """``check fixtures/`` three times at once: JSON under two hash seeds, and JUnit."""
    runs = {
        "json_a": (["--format", "json"], "1"),
        "json_b": (["--format", "json"], "2"),
        "junit": (["--format", "junit"], "0"),
    }
    procs = {
        key: subprocess.Popen(
            [sys.executable, "-m", "verifier.cli", "check", "fixtures/", *args],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        for key, (args, seed) in runs.items()
    }
    done = {}
    for key, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        done[key] = Run(proc.returncode, out, err)
    return SuiteRuns(**done)


def test_fixture_suite_is_clean(suite: SuiteRuns) -> None:
    r = suite.json_a
    assert r.rc == 0, r.err
    assert "Traceback" not in r.err
    doc = r.json()
    assert doc["findings"] == []
    # What loading noted (endpoints derived from workloads, a route kind not read) is
    # listed and counted apart from the findings, as stderr labels it.
    notes = [ln.removeprefix("note: ") for ln in r.err.splitlines() if ln.startswith("note: ")]
    assert notes and doc["input_notes"] == notes
    assert not [ln for ln in r.err.splitlines() if ln.startswith("warning: ")]
    # Every mesh case, and every mesh request, judged on its client's sidecar (the
    # reference translator's xDS for it) or as kube-proxy answers it: none is left
    # to the spec model alone ("mesh_cases_spec_only") or unjudged ("mesh_unjudged").
    assert doc["summary"].pop("mesh_requests") > _mesh_cases() > 0
    assert doc["summary"] == {
        "errors": 0,
        "warnings": 0,
        "rules_run": len(RULES),
        "rules_skipped": 0,
        "scenarios": len(fixture_dirs()),
        "left_to_live": _stating_live_only(),
        "input_notes": len(notes),
        # The deliberately broken scenarios' findings, as their expected-findings.yaml
        # declare them (tests/test_config_mistakes.py holds each to its declaration).
        "expected": declared_findings(),
    }
    # Each is said on stderr, at its case's line: not judged is never silently passed.
    assert r.err.count("judged by edge-verify live") == _stating_live_only() > 0


def _mesh_cases() -> int:
    """The fixtures' mesh cases (sent from a client workload to a Service)."""
    from verifier.pipeline import load_cases

    tables = [d / "cases.yaml" for d in fixture_dirs() if (d / "cases.yaml").is_file()]
    return sum(1 for t in tables for c in load_cases(str(t))[0] if c.mesh)


def _stating_live_only() -> int:
    """The fixtures' cases that state what only the live pass judges (cases.LIVE_ONLY)."""
    from verifier.pipeline import load_cases

    tables = [d / "cases.yaml" for d in fixture_dirs() if (d / "cases.yaml").is_file()]
    return sum(1 for t in tables for c in load_cases(str(t))[0] if c.live_only)


def test_check_md_suite_summary_comes_from_this_run(suite: SuiteRuns, update_goldens: bool) -> None:
    """docs/check.md quotes the summary of ``check fixtures/`` as it is today, not from memory."""
    line = summary_line(suite.json_a.json()["summary"])
    sample = f"```text\n$ edge-verify check fixtures/\n{line}\n```"
    problem = check_block(
        REPO_ROOT / "docs" / "check.md",
        "check-suite-summary",
        sample,
        update_goldens,
        "pytest tests/test_check_cli.py --update-goldens",
    )
    if problem:
        pytest.fail(problem, pytrace=False)


def test_suite_output_is_byte_identical_across_runs(suite: SuiteRuns) -> None:
    assert suite.json_a.out == suite.json_b.out


def test_junit_has_one_testcase_per_rule_per_scenario(suite: SuiteRuns) -> None:
    assert suite.junit.rc == 0, suite.junit.err
    root = ET.fromstring(suite.junit.out)
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert sorted(suites) == [d.name for d in fixture_dirs()]
    rules = sorted(r.name for r in RULES)
    for scenario in fixture_dirs():
        if scenario.name.startswith("invalid-"):
            continue  # rejected input: no xDS, no rules run
        s = suites[scenario.name]
        cases = s.findall("testcase")
        assert [c.get("name") for c in cases] == rules, scenario.name
        assert {c.get("classname") for c in cases} == {scenario.name}
        assert s.get("tests") == str(len(rules)) and s.get("failures") == "0"
        assert not s.findall("testcase/failure")


# ---------------------------------------------------------------- broken xDS


@pytest.mark.parametrize("breakage", BREAKAGES, ids=lambda b: b.id)
def test_broken_xds_is_reported_at_the_match(
    breakage: Breakage, broken: dict[str, BrokenXds], cli: CLI
) -> None:
    bx = broken[breakage.id]
    rc, good = check_json(cli, breakage.scenario, "--xds", str(bx.good))
    assert (rc, good["findings"], good["summary"]) == (
        0,
        [],
        {"errors": 0, "warnings": 0, "rules_run": len(RULES), "rules_skipped": 0},
    )
    rc, doc = check_json(cli, breakage.scenario, "--xds", str(bx.file))
    assert rc == 1
    assert set(doc["summary"]) == SUMMARY_KEYS
    assert (
        [s["name"] for s in doc["scenarios"]]
        == [breakage.scenario]
        == [good["scenarios"][0]["name"]]
    )
    assert [f["code"] for f in doc["findings"]] == [breakage.code], doc["findings"]
    finding = doc["findings"][0]
    assert set(finding) == FINDING_KEYS
    rule = next(r for r in RULES if breakage.code in r.codes)
    assert finding["rule"] == rule.name
    assert finding["severity"] == catalogue()[breakage.code].level == "error"
    assert finding["location"] == breakage.location()
    assert finding["resource"] == f"HTTPRoute {breakage.httproute}"
    assert finding["xds_path"] == bx.xds_path
    assert finding["scenario"] == breakage.scenario
    request = finding["request"]
    assert set(request) == REQUEST_KEYS
    hostname = request["host"].rsplit(":", 1)[0]  # a Host may name a port
    assert hostname.endswith(".example.com") and request["path"].startswith("/")
    assert set(finding["expected"]) == set(finding["actual"]) == OUTCOME_KEYS
    assert finding["expected"] != finding["actual"]
    assert finding["actual"]["route"]["xds_path"] == bx.xds_path


@pytest.mark.parametrize("breakage", BREAKAGES, ids=lambda b: b.id)
def test_camel_case_xds_gives_the_same_findings(
    breakage: Breakage, broken: dict[str, BrokenXds], cli: CLI
) -> None:
    bx = broken[breakage.id]
    snake = check_json(cli, breakage.scenario, "--xds", str(bx.file))
    camel = check_json(cli, breakage.scenario, "--xds", str(bx.camel))
    assert camel == snake
    # The unbroken config in camelCase is clean: no field was silently dropped.
    good = bx.camel.with_name("good-camel.json")
    good.write_text(json.dumps(camel_case(json.loads(bx.good.read_text()))), encoding="utf-8")
    assert check_json(cli, breakage.scenario, "--xds", str(good))[1]["findings"] == []


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> io.TextIOWrapper:
    stream = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stream)
    return stream


@pytest.mark.parametrize("breakage", BREAKAGES, ids=lambda b: b.id)
def test_xds_on_standard_input_gives_the_same_findings(
    breakage: Breakage, broken: dict[str, BrokenXds], cli: CLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--xds -``: what ``edge-verify pull ... | edge-verify check --xds -`` sends."""
    bx = broken[breakage.id]
    from_file = check_json(cli, breakage.scenario, "--xds", str(bx.file))
    _stdin(monkeypatch, bx.file.read_bytes())
    from_stdin = check_json(cli, breakage.scenario, "--xds", "-")
    assert from_stdin == from_file
    assert from_stdin[1]["findings"]  # the broken route was read, and found


def test_bad_xds_on_standard_input_is_named_stdin(
    cli: CLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stdin(monkeypatch, b'{"configs": [\n  {"@type": 5\n')
    r = cli("check", *scenario_args("httproute-simple-same-namespace"), "--xds", "-")
    assert r.error_lines() == ["<stdin>:3: --xds: invalid JSON: Expecting ',' delimiter [bad-xds]"]


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["-", "-"], "-: PATH: standard input can be read once: PATH - and PATH - both ask for it"),
        (
            ["-", "--xds", "-", "--baseline", "-"],
            "-: --xds: standard input can be read once: PATH - and --xds - and --baseline - "
            "all ask for it",
        ),
        (
            [str(BASE), "--cases", "-"],
            "-: --cases: --cases names a file: - (standard input or output) is read only as "
            "a PATH, by --xds and by --baseline",
        ),
        (
            [str(BASE), "--save-baseline", "-"],
            "-: --save-baseline: --save-baseline names a file: - (standard input or output) "
            "is read only as a PATH, by --xds and by --baseline",
        ),
    ],
)
def test_standard_input_is_refused_where_it_cannot_be_read(
    argv: list[str], error: str, cli: CLI, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Refused before anything is read or written: ``--cases -`` said "no such file",
    ``--save-baseline -`` wrote a file named ``-``, and a second PATH ``-`` read nothing."""
    monkeypatch.chdir(tmp_path)
    stream = _stdin(monkeypatch, (BASE / "gateways.yaml").read_bytes())
    r = cli("check", *argv)
    assert [ln.rsplit(" [", 1)[0] for ln in r.error_lines()] == [error]
    assert stream.read() == (BASE / "gateways.yaml").read_text()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "invalid JSON: the input is empty"),
        ("  \n ", "invalid JSON: the input is empty"),
        ('{"a": "b', "invalid JSON: Unterminated string starting at column 7"),
    ],
)
def test_a_json_error_says_where_in_words(
    text: str, message: str, cli: CLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """json's own messages end "starting at" where it appends the position elsewhere."""
    _stdin(monkeypatch, text.encode())
    r = cli("check", *scenario_args("httproute-simple-same-namespace"), "--xds", "-")
    (line,) = r.error_lines()
    assert line.endswith(f": --xds: {message} [bad-xds]"), line


def test_an_empty_xds_is_judged_and_said_to_be_empty(
    cli: CLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pull that returned nothing: every Gateway unserved (exit 1), and a note
    that says why before the findings read as routing bugs."""
    _stdin(monkeypatch, b'{"configs": []}')
    r = cli("check", *scenario_args("httproute-simple-same-namespace"), "--xds", "-")
    assert r.rc == 1 and "Traceback" not in r.err
    assert "note: <stdin>: no listener and no cluster in the xDS read" in r.err.splitlines()
    translated = cli("check", *scenario_args("httproute-simple-same-namespace"))
    assert translated.rc == 0 and "no listener and no cluster" not in translated.err


def test_standard_input_is_read_once_per_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--xds -`` is read by each scenario of a run: the second read is the first's text,
    not the empty rest of the stream; a new stream (the next in-process run) is read anew."""
    from verifier.inputs import read_stdin_once

    _stdin(monkeypatch, b"one")
    assert read_stdin_once() == read_stdin_once() == "one"
    _stdin(monkeypatch, b"two")
    assert read_stdin_once() == "two"


@pytest.mark.parametrize("second", [["--xds", "-"], ["--baseline", "-"]])
def test_standard_input_is_given_to_one_input(
    second: list[str], cli: CLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resources and the xDS (or a baseline) on standard input: refused before either is
    read, where the first would have taken it all and the second been "empty"."""
    stream = _stdin(monkeypatch, (BASE / "gateways.yaml").read_bytes())
    r = cli("check", "-", *second)
    assert r.error_lines() == [
        f"-: {second[0]}: standard input can be read once: PATH - and {second[0]} - both "
        "ask for it [stdin-twice]"
    ]
    assert stream.read() == (BASE / "gateways.yaml").read_text()  # nothing was read


def test_text_report_leads_with_the_yaml_line(broken: dict[str, BrokenXds], cli: CLI) -> None:
    bx = broken["path_separated_prefix-to-prefix"]
    r = cli("check", *scenario_args(bx.breakage.scenario), "--xds", str(bx.file))
    assert r.rc == 1
    lines = r.out.splitlines()
    assert lines[0].startswith(f"{bx.breakage.location()}: error EV201 [httproute-path-matching] ")
    assert f"    xds: {bx.xds_path}" in lines
    assert lines[-1] == f"edge-verify check: 1 error, 0 warnings, {len(RULES)} rules run, 0 skipped"


def test_findings_are_byte_identical_across_processes(
    broken: dict[str, BrokenXds], tmp_path: Path
) -> None:
    bx = broken["header-matcher-deleted"]
    args = ["check", *scenario_args(bx.breakage.scenario), "--xds", str(bx.file)]
    outs = []
    for seed in ("1", "2"):
        report = tmp_path / f"report-{seed}.json"
        r = run_process(
            *args, "--format", "json", "-o", str(report), env={**os.environ, "PYTHONHASHSEED": seed}
        )
        assert r.rc == 1, r.err
        assert r.out == ""  # -o: the report goes to the file only,
        # and one summary line to stderr, so a terminal user sees how it went
        assert (
            r.err == f"edge-verify check: 1 error, 0 warnings, {len(RULES)} rules run, "
            f"0 skipped (report: {report})\n"
        )
        outs.append(report.read_bytes())
    assert outs[0] == outs[1]


def test_xds_directory_of_discovery_responses(cli: CLI) -> None:
    """A folder of ``xds.<type>.golden.json`` DiscoveryResponses is a valid --xds."""
    scenario = "httproute-path-prefix-matching"
    r = cli("check", *scenario_args(scenario), "--xds", rel(FIXTURES / scenario))
    assert (r.rc, r.err) == (0, "")


def test_one_mistake_one_finding(tmp_path: Path, cli: CLI) -> None:
    """check.py: "every disagreement is attributed to exactly one owning rule"."""
    doc = translated(tmp_path / "xds.json", "httproute-header-matching")
    route, _ = xds_route(doc, "edge-infra/header-matching/rule/2/match/0")
    route["match"]["headers"] = route["match"]["headers"][:1]  # drop `Color: orange`
    (tmp_path / "broken.json").write_text(json.dumps(doc), encoding="utf-8")
    _, report = check_json(cli, "httproute-header-matching", "--xds", str(tmp_path / "broken.json"))
    assert [f["code"] for f in report["findings"]] == ["EV202"]


def test_swapped_routes_with_overlapping_headers_are_reported(tmp_path: Path, cli: CLI) -> None:
    doc = translated(tmp_path / "xds.json", "httproute-header-matching")
    _, path = xds_route(doc, "edge-infra/header-matching/rule/4/match/0")
    routes = route_config(doc, "edge-edge-infra-same-namespace-80")["virtual_hosts"][0]
    i = int(path.rsplit("[", 1)[1][:-1])
    routes["routes"][i], routes["routes"][i + 1] = routes["routes"][i + 1], routes["routes"][i]
    (tmp_path / "swapped.json").write_text(json.dumps(doc), encoding="utf-8")
    rc, _ = check_json(cli, "httproute-header-matching", "--xds", str(tmp_path / "swapped.json"))
    assert rc == 1


# ---------------------------------------------------------------- --fail-on, --profile, --cases


@pytest.fixture(scope="module")
def orphan_cluster_xds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A config whose only problem is a cluster no route uses (EV103, a warning)."""
    folder = tmp_path_factory.mktemp("orphan")
    doc = translated(folder / "xds.json", "httproute-path-prefix-matching")
    clusters = section(doc, "Clusters")["dynamic_active_clusters"]
    extra = copy.deepcopy(clusters[0])
    extra["cluster"]["name"] = "k8s/edge-infra/unused/9999"
    clusters.append(extra)
    out = folder / "orphan.json"
    out.write_text(json.dumps(doc), encoding="utf-8")
    return out


def test_warning_fails_only_with_fail_on_warning(orphan_cluster_xds: Path, cli: CLI) -> None:
    args = ["check", *scenario_args("httproute-path-prefix-matching"), "--xds"]
    default = cli(*args, str(orphan_cluster_xds), "--format", "json")
    assert default.rc == 0
    doc = default.json()
    assert doc["summary"]["errors"] == 0 and doc["summary"]["warnings"] == 1
    (finding,) = doc["findings"]
    assert (finding["code"], finding["severity"]) == ("EV103", "warning")
    assert finding["xds_path"] == "clusters[k8s/edge-infra/unused/9999]"
    assert cli(*args, str(orphan_cluster_xds), "--fail-on", "warning").rc == 1
    assert cli(*args, str(orphan_cluster_xds), "--fail-on", "error").rc == 0


def test_clusters_the_bootstrap_names_are_used_and_unnamed_ones_are_orphans(
    tmp_path: Path, cli: CLI
) -> None:
    """A live Envoy's config_dump shows its bootstrap: the static cluster of the xDS
    server (named by ``ads_config``, by no route) and whatever its other parts name,
    here a stats sink's cluster that CDS serves. Those are used; a dynamic cluster and
    a static one that nothing names are still orphans."""
    from verifier.xds.ads import XDS_CLUSTER, bootstrap
    from verifier.xds.codec import to_json_dict

    doc = translated(tmp_path / "xds.json", "httproute-path-prefix-matching")
    boot = to_json_dict(bootstrap("127.0.0.1", 18000))
    sink = "k8s/edge-infra/metrics/9090"
    boot["stats_sinks"] = [
        {
            "name": "envoy.stat_sinks.metrics_service",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.config.metrics.v3.MetricsServiceConfig",
                "grpc_service": {"envoy_grpc": {"cluster_name": sink}},
                "transport_api_version": "V3",
            },
        }
    ]
    kind = "type.googleapis.com/envoy.admin.v3.BootstrapConfigDump"
    doc["configs"].insert(0, {"@type": kind, "bootstrap": boot})
    clusters = section(doc, "Clusters")
    typed = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
    static = boot["static_resources"]["clusters"][0]
    unnamed = {**copy.deepcopy(static), "name": "static-unnamed"}
    clusters["static_clusters"] = [{"cluster": {"@type": typed, **c}} for c in (static, unnamed)]
    for name in (sink, "k8s/edge-infra/unused/9999"):
        extra = copy.deepcopy(clusters["dynamic_active_clusters"][0])
        extra["cluster"]["name"] = name
        clusters["dynamic_active_clusters"].append(extra)
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps(doc), encoding="utf-8")
    args = ["check", *scenario_args("httproute-path-prefix-matching"), "--xds", str(dump)]
    r = cli(*args, "--format", "json", "--fail-on", "warning")
    assert r.rc == 1
    orphans = [f["xds_path"] for f in r.json()["findings"] if f["code"] == "EV103"]
    assert orphans == ["clusters[k8s/edge-infra/unused/9999]", "clusters[static-unnamed]"]
    assert static["name"] == XDS_CLUSTER  # the one every live Envoy has, not an orphan


@pytest.fixture(scope="module")
def logical_dns_xds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Same traffic, but a non-mesh cluster is LOGICAL_DNS: only the aether contract breaks."""
    folder = tmp_path_factory.mktemp("logical-dns")
    doc = translated(folder / "xds.json", "httproute-path-prefix-matching")
    cluster = section(doc, "Clusters")["dynamic_active_clusters"][0]["cluster"]
    assert cluster["type"] == "STRICT_DNS"
    cluster["type"] = "LOGICAL_DNS"
    out = folder / "logical-dns.json"
    out.write_text(json.dumps(doc), encoding="utf-8")
    return out


def test_gateway_api_profile_skips_the_aether_rules(logical_dns_xds: Path, cli: CLI) -> None:
    assert AETHER_RULES  # the profiles would not differ otherwise
    args = [
        "check",
        *scenario_args("httproute-path-prefix-matching"),
        "--xds",
        str(logical_dns_xds),
    ]
    aether = cli(*args, "--format", "json")
    assert aether.rc == 1
    assert [f["code"] for f in aether.json()["findings"]] == ["EV301"]
    assert aether.json()["findings"][0]["location"].startswith("fixtures/base/backends.yaml:")

    generic = cli(*args, "--profile", "gateway-api", "--format", "json")
    assert generic.rc == 0
    cases = "fixtures/httproute-path-prefix-matching/cases.yaml"
    assert generic.json() == {
        "findings": [],
        "scenarios": [
            {
                "name": "httproute-path-prefix-matching",
                "cases": [{"file": cases, "cases": len(yaml.safe_load(Path(cases).read_text()))}],
            }
        ],
        "summary": {
            "errors": 0,
            "warnings": 0,
            "rules_run": len(RULES) - len(AETHER_RULES),
            "rules_skipped": len(AETHER_RULES),
        },
    }
    text = cli(*args, "--profile", "gateway-api")
    assert text.out.rstrip().endswith(
        f"{len(RULES) - len(AETHER_RULES)} rules run, {len(AETHER_RULES)} skipped"
    )
    junit = ET.fromstring(cli(*args, "--profile", "gateway-api", "--format", "junit").out)
    skipped = {
        c.get("name"): c.find("skipped").get("message")  # type: ignore[union-attr]
        for c in junit.iter("testcase")
        if c.find("skipped") is not None
    }
    assert sorted(skipped) == AETHER_RULES
    unclaimed = {r.name: set(r.features) - PROFILES["gateway-api"] for r in RULES}
    for name, message in skipped.items():
        assert "profile gateway-api does not claim" in message, message
        assert any(feature in message for feature in unclaimed[name]), (name, message)
    assert AETHER_EDGE in {f for r in RULES if r.name in skipped for f in r.features}


def test_cases_file_is_replayed(tmp_path: Path, cli: CLI) -> None:
    scenario = "httproute-path-prefix-matching"
    cases = FIXTURES / scenario / "cases.yaml"
    assert cli("check", *scenario_args(scenario), "--cases", rel(cases)).rc == 0
    wrong = tmp_path / "cases.yaml"
    wrong.write_text(
        "- name: right\n"
        "  gateway: {namespace: edge-infra, name: same-namespace}\n"
        "  request: {host: path-prefix.example.com, path: /foo}\n"
        "  expect: {status: 200, backend: infra-backend-v1}\n"
        "- name: wrong-backend\n"
        "  gateway: {namespace: edge-infra, name: same-namespace}\n"
        "  request: {host: path-prefix.example.com, path: /foobar}\n"
        "  expect: {status: 200, backend: infra-backend-v1}\n",
        encoding="utf-8",
    )
    r = cli("check", *scenario_args(scenario), "--cases", str(wrong), "--format", "json")
    assert r.rc == 1
    findings = r.json()["findings"]
    # Both models send /foobar to v3: the case is wrong, one finding says both models
    # miss it alike, with the rule they follow one click away.
    ((code, location, resource, related),) = {
        (f["code"], f["location"], f["resource"], tuple(r["what"] for r in f["related"]))
        for f in findings
    }
    assert (code, location, resource) == ("EV703", f"{wrong}:5", "case wrong-backend")
    assert len(findings) == 1
    assert related == ("HTTPRoute edge-infra/path-prefix rule 2, chosen by the spec model",)


# ---------------------------------------------------------------- --translator


def _translator(tmp_path: Path, payload: str) -> tuple[str, Path]:
    """A translator command that records its arguments and prints ``payload``."""
    argv_log = tmp_path / "argv.json"
    script = tmp_path / "translator.py"
    script.write_text(
        "import json, sys\n"
        f"open({str(argv_log)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
        f"sys.stdout.write(open({payload!r}).read())\n",
        encoding="utf-8",
    )
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}", argv_log


def _discovery_responses(tmp_path: Path, scenario: str) -> str:
    """The scenario's goldens (one DiscoveryResponse per type) as one JSON list."""
    docs = [
        json.loads(p.read_text(encoding="utf-8"))
        for p in sorted((FIXTURES / scenario).glob("xds.*.golden.json"))
    ]
    out = tmp_path / "responses.json"
    out.write_text(json.dumps(docs), encoding="utf-8")
    return str(out)


@pytest.mark.parametrize("shape", ["config_dump", "discovery_responses"])
def test_translator_gets_the_paths_and_its_output_is_checked(
    shape: str, broken: dict[str, BrokenXds], tmp_path: Path, cli: CLI
) -> None:
    bx = broken["path_separated_prefix-to-prefix"]
    scenario = bx.breakage.scenario
    dump = shape == "config_dump"
    payload = str(bx.file) if dump else _discovery_responses(tmp_path, scenario)
    command, argv_log = _translator(tmp_path, payload)
    r = cli("check", *scenario_args(scenario), "--translator", command, "--format", "json")
    assert json.loads(argv_log.read_text()) == scenario_args(scenario)
    if dump:  # the broken config: the same finding as with --xds
        assert r.rc == 1
        assert r.json() == check_json(cli, scenario, "--xds", str(bx.file))[1]
    else:
        assert (r.rc, r.json()["findings"]) == (0, [])


def test_a_translators_output_is_read_as_a_files_is(
    broken: dict[str, BrokenXds], tmp_path: Path
) -> None:
    """As records where check only reads it (no Envoy API message built), as messages
    where the command serves or mutates it: the same two readers as ``--xds FILE``."""
    import betterproto2

    from verifier.pipeline import external_snapshot, file_snapshot

    bx = broken["path_separated_prefix-to-prefix"]
    command, _ = _translator(tmp_path, str(bx.file))
    paths = scenario_args(bx.breakage.scenario)
    for records in (True, False):
        got, _notes = external_snapshot(command, paths, records=records)
        want, _notes = file_snapshot(str(bx.file), records=records)
        assert got == want
        assert all(isinstance(rc, betterproto2.Message) is not records for rc in got.routes)
        assert got.routes


def test_failing_translator_is_one_clear_error(tmp_path: Path) -> None:
    script = tmp_path / "fail.py"
    script.write_text(
        "import sys\nsys.stderr.write('mytranslator: no Gateway found\\n')\nsys.exit(3)\n",
        encoding="utf-8",
    )
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    r = run_process(
        "check", *scenario_args("httproute-path-prefix-matching"), "--translator", command
    )
    (line,) = r.error_lines()
    assert line.startswith(f"{command}: --translator: exited with code 3: ")
    assert "mytranslator: no Gateway found" in line and line.endswith("[translator-failed]")


@pytest.mark.parametrize(
    ("command", "code"),
    [
        ("/no/such/translator", "translator-failed"),
        ("true", "bad-xds"),
        # Bytes that are not UTF-8 on stdout (and stderr) used to end in a traceback.
        ("printf '\\377\\376'", "bad-xds"),
        ("sh -c 'printf \"\\377\" >&2; exit 4'", "translator-failed"),
        ("echo '{not json'", "bad-xds"),
        # Protobuf's JSON parsers refuse a field set twice; json would keep the last.
        ("""echo '{"configs": [], "configs": []}'""", "bad-xds"),
    ],
    ids=["not-found", "no-output", "not-utf8", "not-utf8-stderr", "not-json", "duplicate-key"],
)
def test_unusable_translator_is_bad_input(command: str, code: str, cli: CLI) -> None:
    r = cli("check", *scenario_args("httproute-path-prefix-matching"), "--translator", command)
    (line,) = r.error_lines()
    assert line.startswith(f"{command}: --translator: ") and line.endswith(f"[{code}]")


def test_crashing_translator_is_still_one_line(tmp_path: Path, cli: CLI) -> None:
    script = tmp_path / "crash.py"
    script.write_text("raise RuntimeError('translator crashed')\n", encoding="utf-8")
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    r = cli("check", *scenario_args("httproute-path-prefix-matching"), "--translator", command)
    (line,) = r.error_lines()
    assert "RuntimeError: translator crashed" in line


# ---------------------------------------------------------------- input notes


def test_input_notes_are_labelled_and_counted_apart_from_findings(cli: CLI) -> None:
    """Services given with Deployments and no EndpointSlice get the endpoints a cluster
    would publish, and loading says so at each Service's line: a note on the input, in
    every format, never a warning beside a summary that counts no warning."""
    scenario = "httproute-simple-same-namespace"
    args = ["check", *scenario_args(scenario)]
    text = cli(*args)
    lines = text.err.splitlines()
    notes = [ln.removeprefix("note: ") for ln in lines if ln.startswith("note: ")]
    assert text.rc == 0 and len(notes) == len(lines), text.err
    place = re.compile(rf"{re.escape(rel(FIXTURES / scenario / 'resources.yaml'))}:\d+: ")
    assert notes and all(place.match(n) for n in notes), notes
    # The scenario's deliberate mistakes (its expected-findings.yaml) are counted apart too.
    counts = (
        f"0 errors, 0 warnings, 2 expected findings reported, {len(RULES)} rules run, "
        f"0 skipped, {len(notes)} input notes"
    )
    table = rel(FIXTURES / scenario / "cases.yaml")
    assert (
        text.out == f"scenario {scenario}: cases {table} (9 cases)\nedge-verify check: {counts}\n"
    )
    (run,) = cli(*args, "--format", "sarif").json()["runs"]
    assert run["results"] == []
    (invocation,) = run["invocations"]
    told = invocation["toolExecutionNotifications"]
    assert [(n["level"], n["message"]["text"]) for n in told] == [("note", n) for n in notes]
    (suite,) = ET.fromstring(cli(*args, "--format", "junit").out).findall("testsuite")
    assert suite.get("failures") == "0"
    assert (suite.findtext("system-out") or "").splitlines() == [f"note: {n}" for n in notes]


# ---------------------------------------------------------------- SARIF


def test_sarif_points_at_the_yaml(broken: dict[str, BrokenXds], cli: CLI) -> None:
    bx = broken["path_separated_prefix-to-prefix"]
    r = cli(
        "check", *scenario_args(bx.breakage.scenario), "--xds", str(bx.file), "--format", "sarif"
    )
    assert r.rc == 1
    doc = r.json()
    assert doc["version"] == "2.1.0"
    assert doc["$schema"].endswith("sarif-2.1.0.json")
    (run,) = doc["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "edge-verify"
    ids = [rule["id"] for rule in driver["rules"]]
    assert len(ids) == len(set(ids))
    assert set(ids) == {code for rule in RULES for code in rule.codes}
    for rule in driver["rules"]:
        level = catalogue()[rule["id"]].level
        assert rule["defaultConfiguration"]["level"] == {"info": "note"}.get(level, level)
        assert rule["shortDescription"]["text"]
    (result,) = run["results"]
    assert (result["ruleId"], result["level"]) == ("EV201", "error")
    assert result["ruleId"] in ids
    assert result["message"]["text"]
    (loc,) = result["locations"]
    file, line = bx.breakage.location().rsplit(":", 1)
    assert loc["physicalLocation"]["artifactLocation"]["uri"] == file
    assert loc["physicalLocation"]["region"]["startLine"] == int(line)
    assert result["properties"]["xds_path"] == bx.xds_path


# ---------------------------------------------------------------- JUnit


def test_junit_fails_the_rule_that_found_it(broken: dict[str, BrokenXds], cli: CLI) -> None:
    bx = broken["303-becomes-302"]
    r = cli(
        "check", *scenario_args(bx.breakage.scenario), "--xds", str(bx.file), "--format", "junit"
    )
    assert r.rc == 1
    (suite,) = ET.fromstring(r.out).findall("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == (str(len(RULES)), "1")
    failed = [c for c in suite.findall("testcase") if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == ["httproute-redirect-status-code"]
    failure = failed[0].find("failure")
    assert failure is not None and failure.get("type") == "EV213"
    assert failure.text is not None and failure.text.startswith(bx.breakage.location())


# ---------------------------------------------------------------- bad input


def _bad_inputs(tmp: Path) -> Iterator[tuple[str, list[str], str]]:
    """(id, check arguments, regex the one error line must match)."""
    bad_yaml = tmp / "bad.yaml"
    bad_yaml.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: x\n  namespace: y\n")
    yield (
        "yaml-syntax",
        [rel(BASE), str(bad_yaml)],
        rf"{re.escape(str(bad_yaml))}:\d+: .*\[yaml-syntax\]",
    )
    cases = tmp / "cases.yaml"
    cases.write_text(
        "- name: ok\n"
        "  gateway: {namespace: edge-infra, name: same-namespace}\n"
        "  request: {host: path-prefix.example.com, path: /foo}\n"
        "- gateway: {namespace: edge-infra, name: same-namespace}\n"
        "  request: {host: path-prefix.example.com, path: /foo}\n"
    )
    yield (
        "case-without-name",
        [*scenario_args("httproute-path-prefix-matching"), "--cases", str(cases)],
        rf"{re.escape(str(cases))}:4: \[1\]\.name: .*\[case\]",
    )
    missing = tmp / "no-such.json"
    yield (
        "missing-xds",
        [*scenario_args("httproute-path-prefix-matching"), "--xds", str(missing)],
        rf"{re.escape(str(missing))}: --xds: .*\[bad-xds\]",
    )
    garbage = tmp / "garbage.json"
    garbage.write_text('{"configs": [\n')
    yield (
        "garbage-xds",
        [*scenario_args("httproute-path-prefix-matching"), "--xds", str(garbage)],
        rf"{re.escape(str(garbage))}:2: --xds: .*invalid JSON.*\[bad-xds\]",
    )
    # A field twice: Envoy's Protobuf JSON parser refuses it, json keeps the last.
    twice = tmp / "twice.json"
    twice.write_text('{"configs": [\n  {"@type": "x",\n   "@type": "y"}]}\n')
    yield (
        "duplicate-key-xds",
        [*scenario_args("httproute-path-prefix-matching"), "--xds", str(twice)],
        rf"{re.escape(str(twice))}:2: --xds: key '@type' appears twice .*\[bad-xds\]",
    )
    wrong_shape = tmp / "wrong-shape.json"
    wrong_shape.write_text('{"configs": 3}\n')
    yield (
        "wrong-shape-xds",
        [*scenario_args("httproute-path-prefix-matching"), "--xds", str(wrong_shape)],
        rf"{re.escape(str(wrong_shape))}: \$\.configs: .*\[bad-xds\]",
    )


BAD_INPUT_IDS = [
    "yaml-syntax",
    "case-without-name",
    "missing-xds",
    "garbage-xds",
    "duplicate-key-xds",
    "wrong-shape-xds",
]


@pytest.mark.parametrize("which", BAD_INPUT_IDS)
def test_bad_input_exits_2_with_file_and_line(which: str, tmp_path: Path, cli: CLI) -> None:
    args, pattern = next((a, p) for i, a, p in _bad_inputs(tmp_path) if i == which)
    r = cli("check", *args)
    (line,) = r.error_lines()
    assert re.fullmatch(pattern, line), line


def test_bad_input_across_the_process_boundary(tmp_path: Path) -> None:
    """The real process: exit 2, errors on stderr only, no traceback."""
    args, pattern = next((a, p) for i, a, p in _bad_inputs(tmp_path) if i == "garbage-xds")
    r = run_process("check", *args)
    (line,) = r.error_lines()
    assert re.fullmatch(pattern, line), line


def test_xds_json_error_names_its_line(tmp_path: Path, cli: CLI) -> None:
    garbage = tmp_path / "garbage.json"
    garbage.write_text('{"configs": [\n')
    r = cli("check", *scenario_args("httproute-path-prefix-matching"), "--xds", str(garbage))
    (line,) = r.error_lines()
    assert line.startswith(f"{garbage}:2: --xds: invalid JSON: ")


def _first_route(doc: dict[str, Any]) -> dict[str, Any]:
    """The first xDS route carrying the translator's route metadata."""
    for entry in section(doc, "Routes")["dynamic_route_configs"]:
        for vh in entry["route_config"].get("virtual_hosts", []):
            for route in vh.get("routes", []):
                if "metadata" in route:
                    found: dict[str, Any] = route
                    return found
    raise AssertionError("no route with metadata")


def test_xds_nested_past_what_can_be_decoded_is_skipped_not_a_crash(tmp_path: Path) -> None:
    """With --max-depth raised far past its default, route metadata nested 600 levels
    makes its RouteConfiguration unreadable, as any resource the loader cannot read:
    skipped with a note naming the file and why, and the check does not pass. Not
    a RecursionError traceback."""
    doc = translated(tmp_path / "x.json", "httproute-header-matching")
    deep: Any = 5
    for _ in range(600):
        deep = [deep]
    _first_route(doc)["metadata"]["filter_metadata"]["aether.io/route"]["deep"] = deep
    xds = tmp_path / "deep.json"
    xds.write_text(json.dumps(doc))
    args = [*scenario_args("httproute-header-matching"), "--xds", str(xds), "--max-depth", "5000"]
    r = run_process("check", *args)
    assert r.rc == 1 and "Traceback" not in r.err, r.err
    (note,) = [ln for ln in r.err.splitlines() if "nested too deep" in ln]
    assert note.startswith(f"note: {xds}:") and "RouteConfiguration" in note


def test_a_number_past_a_double_in_route_metadata_is_no_crash(tmp_path: Path, cli: CLI) -> None:
    """JSON's 1e400 reads as infinity: the route's rule number is then unknown."""
    doc = translated(tmp_path / "x.json", "httproute-header-matching")
    _first_route(doc)["metadata"]["filter_metadata"]["aether.io/route"]["rule"] = 424242
    xds = tmp_path / "inf.json"
    xds.write_text(json.dumps(doc).replace("424242", "1e400"))
    r = cli("check", *scenario_args("httproute-header-matching"), "--xds", str(xds))
    assert r.rc in (0, 1) and "Traceback" not in r.err, r.err


def test_message_forms_envoy_reads_are_read(tmp_path: Path, cli: CLI) -> None:
    """Envoy's JSON parser takes a Duration as ``{"seconds": 1}`` and a wrapper as
    ``{"value": 90}`` beside their string and bare forms: a timeout so written is
    judged (EV217, and Envoy accepts it: no EV101), a weight so written is the weight."""
    doc = translated(tmp_path / "x.json", "httproute-header-matching")
    _first_route(doc)["route"]["timeout"] = {"seconds": 1}
    timed = tmp_path / "timed.json"
    timed.write_text(json.dumps(doc))
    r = cli("check", *scenario_args("httproute-header-matching"), "--xds", str(timed))
    assert r.rc == 1 and "skipped" not in r.err, r.err
    assert {f["code"] for f in r_json(cli, timed, "httproute-header-matching")} == {"EV217"}
    doc = translated(tmp_path / "w.json", "httproute-weighted-backends")
    wrapped = 0
    for entry in section(doc, "Routes")["dynamic_route_configs"]:
        for vh in entry["route_config"].get("virtual_hosts", []):
            for route in vh.get("routes", []):
                for cw in route.get("route", {}).get("weighted_clusters", {}).get("clusters", []):
                    if "weight" in cw:
                        cw["weight"] = {"value": cw["weight"]}
                        wrapped += 1
    assert wrapped
    weights = tmp_path / "weights.json"
    weights.write_text(json.dumps(doc))
    r = cli("check", *scenario_args("httproute-weighted-backends"), "--xds", str(weights))
    assert (r.rc, r.err.count("warning")) == (0, 0), r.out + r.err


def test_a_weight_finding_shows_the_weights(tmp_path: Path, cli: CLI) -> None:
    """EV218 on a split whose names agree but whose weights do not: the message must
    show the weights on both sides, or it reads as two identical answers."""
    doc = translated(tmp_path / "w.json", "httproute-weighted-backends")
    split = next(
        cw
        for entry in section(doc, "Routes")["dynamic_route_configs"]
        for vh in entry["route_config"].get("virtual_hosts", [])
        for route in vh.get("routes", [])
        for cw in [route.get("route", {}).get("weighted_clusters", {}).get("clusters", [])]
        if len(cw) > 1 and cw[0].get("weight") == 1
    )
    split[0]["weight"] = 3
    tripled = tmp_path / "tripled.json"
    tripled.write_text(json.dumps(doc))
    r = cli("check", *scenario_args("httproute-weighted-backends"), "--xds", str(tripled))
    line = next(x for x in r.out.splitlines() if "EV218" in x)
    spec, _, envoy = line.partition("; Envoy ")
    assert "(weight 1)" in spec and "(weight 3)" not in spec, line
    assert "(weight 3)" in envoy, line


def r_json(cli: CLI, xds: Path, scenario: str) -> list[dict[str, Any]]:
    r = cli("check", *scenario_args(scenario), "--xds", str(xds), "--format", "json")
    found: list[dict[str, Any]] = r.json()["findings"]
    return found


def test_xds_and_translator_are_exclusive(cli: CLI) -> None:
    with pytest.raises(SystemExit) as exc:
        cli("check", "fixtures/", "--xds", "a.json", "--translator", "cat")
    assert exc.value.code == 2


def test_installed_script_exit_codes(broken: dict[str, BrokenXds]) -> None:
    script = Path(sys.executable).parent / "edge-verify"
    bx = broken["303-becomes-302"]
    proc = subprocess.run(
        [str(script), "check", *scenario_args(bx.breakage.scenario), "--xds", str(bx.file)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith(f"{bx.breakage.location()}: error EV213 ")


# ---------------------------------------------------------------- docs/check.md


def _doc_commands(doc: str) -> list[list[str]]:
    text = (REPO_ROOT / "docs" / doc).read_text(encoding="utf-8")
    blocks = re.findall(r"^```(?:sh|console)?\n(.*?)^```", text, flags=re.S | re.M)
    return [
        shlex.split(line.removeprefix("$ "), comments=True)[1:]
        for block in blocks
        for line in block.splitlines()
        if line.removeprefix("$ ").startswith("edge-verify ")
    ]


def test_docs_check_command_lines_parse() -> None:
    commands = _doc_commands("check.md")
    assert len(commands) >= 5, "docs/check.md lost its examples"
    parser = build_parser()
    for args in commands:
        try:
            parser.parse_args(args)
        except SystemExit:
            pytest.fail(f"docs/check.md: edge-verify {shlex.join(args)} does not parse")


def _case_errors(tmp_path: Path, cli: CLI, text: str) -> tuple[Path, list[str]]:
    """The input errors of a check given ``text`` as its cases table (exit 2)."""
    cases = tmp_path / "cases.yaml"
    cases.write_text(text, encoding="utf-8")
    r = cli("check", *scenario_args("httproute-header-matching"), "--cases", str(cases))
    assert r.rc == 2
    return cases, r.error_lines()


def test_malformed_case_values_are_input_errors(tmp_path: Path, cli: CLI) -> None:
    """Wrong types inside a cases table are reported at the field, never a traceback
    (the line of the key holding the wrong value, not of the case that holds it)."""
    cases, lines = _case_errors(
        tmp_path,
        cli,
        "- name: a\n"
        "  gateway: {namespace: edge-infra, name: same-namespace}\n"
        "  expect: {status: abc}\n"
        "- name: b\n"
        "  gateway: {namespace: edge-infra, name: same-namespace, port: eighty}\n"
        "  expect: {redirect: {port: x}}\n",
    )
    assert any(f"{cases}:3: [0].expect.status:" in line for line in lines), lines
    assert any(f"{cases}:5: [1].gateway.port:" in line for line in lines), lines


def test_a_case_to_no_gateway_is_an_input_error(tmp_path: Path, cli: CLI) -> None:
    """A mistyped Gateway was judged as a request nothing serves (EV205 at <xds>, EV701):
    it is the table's mistake, said at the field, with what was meant."""
    cases, lines = _case_errors(
        tmp_path,
        cli,
        "- name: a\n  gateway: {namespace: edge-infra, name: same-namespce, port: 80}\n"
        "- name: b\n  gateway: {namespace: edge-infr, name: same-namespace}\n",
    )
    assert lines == [
        f"{cases}:2: [0].gateway.name: no Gateway edge-infra/same-namespce in the input: "
        "did you mean edge-infra/same-namespace? [not-found]",
        f"{cases}:4: [1].gateway.namespace: no Gateway edge-infr/same-namespace in the input: "
        "did you mean edge-infra/same-namespace? [not-found]",
    ]


def test_a_case_error_names_the_line_of_its_field(tmp_path: Path, cli: CLI) -> None:
    """An unknown key is reported on its own line (found by a new user: a typo on line 5
    of a case was reported at line 1, where the case starts); a missing field at the
    case; a duplicate name at the second name."""
    valid = "  gateway: {namespace: edge-infra, name: same-namespace}\n  request: {path: /}\n"
    cases, lines = _case_errors(
        tmp_path,
        cli,
        "- name: one\n"
        "  gateway: {namespace: edge-infra, name: same-namespace}\n"
        "  request:\n"
        "    path: /\n"
        "  expct:\n"
        "    status: 200\n"
        "- name: two\n"
        "  request:\n"
        "    path: /\n"
        f"- name: dup\n{valid}"
        f"- {valid.strip()}\n  name: dup\n",
    )
    # ... naming the key meant (found by a second new user: ``staus`` for ``status``).
    assert any(f"{cases}:5: [0].expct: unknown key; did you mean 'expect'?" in ln for ln in lines)
    assert any(f"{cases}:7: [1].gateway:" in ln for ln in lines), lines
    assert any(f"{cases}:15: [3].name: duplicate case name" in ln for ln in lines), lines


def test_unsendable_case_requests_are_input_errors(tmp_path: Path, cli: CLI) -> None:
    """A raw non-ASCII target or a control character in a header cannot cross
    HTTP/1.1 (Envoy's codec answers 400 before routing): refused at its request."""
    cases, lines = _case_errors(
        tmp_path,
        cli,
        "- name: raw\n"
        "  gateway: {namespace: edge-infra, name: same-namespace, port: 80}\n"
        "  request: {host: foo.example, path: /café}\n"
        "- name: control\n"
        "  gateway: {namespace: edge-infra, name: same-namespace, port: 80}\n"
        '  request: {host: foo.example, path: /, headers: {x-a: "a\\x01b"}}\n',
    )
    assert any(f"{cases}:3: [0].request:" in ln and "%C3%A9" in ln for ln in lines), lines
    assert any(f"{cases}:6: [1].request:" in ln and "control" in ln for ln in lines), lines


def test_backend_client_certificate_is_reported_not_passed(tmp_path: Path, cli: CLI) -> None:
    """A Gateway asking for a client certificate towards backends is not reported
    clean: neither model knows spec.tls.backend, so the check says it is blind there."""
    gateway = tmp_path / "gateway.yaml"
    gateway.write_text(
        "apiVersion: gateway.networking.k8s.io/v1\n"
        "kind: Gateway\n"
        "metadata: {name: client-certs, namespace: edge-infra}\n"
        "spec:\n"
        "  gatewayClassName: aether\n"
        "  tls:\n"
        "    backend:\n"
        "      clientCertificateRef: {kind: Secret, group: '', name: edge-client}\n"
        "  listeners:\n"
        "  - {name: http, port: 80, protocol: HTTP, hostname: certs.example}\n",
        encoding="utf-8",
    )
    r = cli("check", str(FIXTURES / "base"), str(gateway), "--format", "json")
    assert r.rc == 0  # a warning; --fail-on warning turns it into exit 1
    findings = json.loads(r.out)["findings"]
    assert [(f["code"], f["location"]) for f in findings] == [("EV108", f"{gateway}:7")]
    assert "GatewayBackendClientCertificate" in findings[0]["message"]
    r = cli("check", str(FIXTURES / "base"), str(gateway), "--fail-on", "warning")
    assert r.rc == 1


def _without_client_validation(node: Any) -> None:
    if isinstance(node, dict):
        node.pop("require_client_certificate", None)
        node.pop("validation_context", None)
        for value in node.values():
            _without_client_validation(value)
    elif isinstance(node, list):
        for item in node:
            _without_client_validation(item)


def test_missing_client_certificate_validation_is_reported_per_port(
    tmp_path: Path, cli: CLI
) -> None:
    """An xDS whose TLS contexts ask no client certificate lets clients without one
    through: EV224 once per port, at the validation (default or perPort entry)
    that port uses, with a request that gets through."""
    scenario = "gateway-frontend-client-certificate-validation"
    doc = translated(tmp_path / "good.json", scenario)
    _without_client_validation(doc)
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(doc), encoding="utf-8")
    rc, report = check_json(cli, scenario, "--xds", str(broken))
    assert rc == 1
    findings = report["findings"]
    resources = rel(FIXTURES / scenario / "resources.yaml")
    lines = Path(resources).read_text(encoding="utf-8").splitlines()
    got = sorted((f["code"], f["request"]["port"], f["location"]) for f in findings)
    default = next(i for i, text in enumerate(lines, 1) if "      default:" in text) + 1
    per_port = next(i for i, text in enumerate(lines, 1) if "- port: 8452" in text) + 2
    assert got == [
        ("EV224", 8451, f"{resources}:{default}"),
        ("EV224", 8452, f"{resources}:{per_port}"),
    ]
    for f in findings:
        assert f["expected"]["status"] == 0 and f["actual"]["status"] == 200


def test_xds_envoy_refuses_is_reported_and_the_models_stand_aside(tmp_path: Path, cli: CLI) -> None:
    """A route without a path specifier is a NACK: no behaviour to compare. check
    reports it (EV604) and says which rules did not run; explain refuses to guess.
    Found by fuzzing config_dumps: both used to end in a traceback."""
    doc = translated(tmp_path / "good.json", "httproute-header-matching")
    entry = route_config(doc, "edge-edge-infra-same-namespace-80")
    route = entry["virtual_hosts"][0]["routes"][0]
    match = route["match"]
    for key in ("prefix", "path", "safe_regex", "path_separated_prefix"):
        match.pop(key, None)
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(doc), encoding="utf-8")
    r = cli("check", *scenario_args("httproute-header-matching"), "--xds", str(broken))
    assert r.rc == 1
    assert "Traceback" not in r.err
    assert "EV604" in r.out and "no path specifier" in r.out
    assert re.search(r"skipped: \d+ rules not run: the Envoy model cannot read this xDS: ", r.err)
    r = cli(
        "explain",
        *scenario_args("httproute-header-matching"),
        "--xds",
        str(broken),
        "--request",
        "GET http://header-matching.example.com/",
    )
    assert any("the Envoy model cannot read this xDS" in ln for ln in r.error_lines())


def test_listener_set_the_gateway_refuses_is_reported_when_served(tmp_path: Path, cli: CLI) -> None:
    """An xDS that binds the port of a ListenerSet the Gateway does not admit
    (allowedListeners from Same, ListenerSet in another namespace) serves what the
    spec says nobody listens on: EV225, at the ListenerSet's listener."""
    scenario = "listener-set"
    doc = translated(tmp_path / "good.json", scenario)
    listeners = section(doc, "Listeners")["dynamic_listeners"]
    source = next(
        li for li in listeners if li["name"] == "edge-edge-infra-listener-set-parent-8171"
    )
    stray = copy.deepcopy(source)
    stray["name"] = "edge-edge-infra-listener-set-parent-8173"
    stray["active_state"]["listener"]["name"] = "edge-edge-infra-listener-set-parent-8173"
    stray["active_state"]["listener"]["address"]["socket_address"]["port_value"] = 8173
    listeners.append(stray)
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(doc), encoding="utf-8")
    rc, report = check_json(cli, scenario, "--xds", str(broken))
    assert rc == 1
    findings = report["findings"]
    # One wrong behaviour, one finding: every request to the port shows it.
    assert [(f["code"], f["request"]["port"]) for f in findings] == [("EV225", 8173)], report
    (finding,) = findings
    assert finding["expected"]["status"] == 0 and finding["actual"]["status"] != 0
    assert finding["resource"] == "ListenerSet edge-apps/not-allowed"
    resources = rel(FIXTURES / scenario / "resources.yaml")
    lines = Path(resources).read_text(encoding="utf-8").splitlines()
    port_line = next(i for i, text in enumerate(lines, 1) if "port: 8173" in text)
    assert finding["location"] == f"{resources}:{port_line}"


def test_an_extra_client_ca_in_the_xds_is_reported(tmp_path: Path, cli: CLI) -> None:
    """The xDS trusts a CA the Gateway does not name (appended to trusted_ca on
    port 8451): a client with that CA's certificate gets through. Witnesses come
    from the resources, so check adds a certificate of each CA only the xDS trusts."""
    scenario = "gateway-frontend-client-certificate-validation"
    doc = translated(tmp_path / "good.json", scenario)
    rogue = (FIXTURES / scenario / "client-ca-rogue.crt").read_text(encoding="utf-8")
    listeners = section(doc, "Listeners")["dynamic_listeners"]
    (listener,) = [li for li in listeners if li["name"] == "edge-edge-infra-client-validation-8451"]
    for chain in listener["active_state"]["listener"]["filter_chains"]:
        tls = chain["transport_socket"]["typed_config"]
        tls["common_tls_context"]["validation_context"]["trusted_ca"]["inline_string"] += rogue
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(doc), encoding="utf-8")
    rc, report = check_json(cli, scenario, "--xds", str(broken))
    assert rc == 1
    findings = report["findings"]
    assert [(f["code"], f["request"]["port"]) for f in findings] == [("EV224", 8451)]
    assert findings[0]["request"]["client_cert"]["issuer"].startswith("742a23a773a9")
    assert findings[0]["expected"]["status"] == 0 and findings[0]["actual"]["status"] == 200


def _validation_over_sds(listeners: list[Any], secret_for: Callable[[int], str]) -> None:
    """Every inline validation context becomes an SDS reference, named per port."""
    for entry in listeners:
        port = entry["active_state"]["listener"]["address"]["socket_address"]["port_value"]
        for chain in entry["active_state"]["listener"]["filter_chains"]:
            tls = (chain.get("transport_socket") or {}).get("typed_config") or {}
            common = tls.get("common_tls_context") or {}
            if common.pop("validation_context", None) is not None:
                common["validation_context_sds_secret_config"] = {
                    "name": secret_for(port),
                    "sds_config": {"ads": {}, "resource_api_version": "V3"},
                }


def test_client_cas_over_sds_are_not_guessed(tmp_path: Path, cli: CLI) -> None:
    """With the trusted CAs over SDS (not in the snapshot) the Envoy model cannot
    tell whether a certificate verifies; check must not report the spec's
    refusals as disagreements (no false positives), yet still sees a chain that
    lets clients without a certificate in."""
    scenario = "gateway-frontend-client-certificate-validation"
    doc = translated(tmp_path / "good.json", scenario)
    listeners = section(doc, "Listeners")["dynamic_listeners"]
    _validation_over_sds(listeners, lambda port: "client-ca")
    sds = tmp_path / "sds.json"
    sds.write_text(json.dumps(doc), encoding="utf-8")
    rc, report = check_json(cli, scenario, "--xds", str(sds))
    assert rc == 0, report
    # The same SDS configuration without require_client_certificate on 8451.
    (listener,) = [li for li in listeners if li["name"] == "edge-edge-infra-client-validation-8451"]
    for chain in listener["active_state"]["listener"]["filter_chains"]:
        chain["transport_socket"]["typed_config"].pop("require_client_certificate", None)
    open_port = tmp_path / "open.json"
    open_port.write_text(json.dumps(doc), encoding="utf-8")
    rc, report = check_json(cli, scenario, "--xds", str(open_port))
    assert rc == 1
    findings = report["findings"]
    assert [(f["code"], f["request"]["port"]) for f in findings] == [("EV224", 8451)]
    assert findings[0]["request"]["client_cert"] is None


def test_client_cas_over_sds_are_read_from_the_secrets_dump(tmp_path: Path, cli: CLI) -> None:
    """A config_dump's SecretsConfigDump holds what SDS served: the CAs a chain
    takes over SDS are then known. Port 8452 gets CA a where the Gateway trusts CA
    b: EV224 there, and nothing on 8451, whose SDS secret holds CA a as it should."""
    scenario = "gateway-frontend-client-certificate-validation"
    doc = translated(tmp_path / "good.json", scenario)
    _validation_over_sds(section(doc, "Listeners")["dynamic_listeners"], lambda p: f"ca-{p}")
    ca_a = (FIXTURES / scenario / "client-ca-a.crt").read_text(encoding="utf-8")
    secret_type = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
    doc["configs"].append(
        {
            "@type": "type.googleapis.com/envoy.admin.v3.SecretsConfigDump",
            "dynamic_active_secrets": [
                {
                    "name": name,
                    "secret": {
                        "@type": secret_type,
                        "name": name,
                        "validation_context": {"trusted_ca": {"inline_string": ca_a}},
                    },
                }
                for name in ("ca-8451", "ca-8452")
            ],
        }
    )
    dump = tmp_path / "sds.json"
    dump.write_text(json.dumps(doc), encoding="utf-8")
    rc, report = check_json(cli, scenario, "--xds", str(dump))
    assert rc == 1
    findings = report["findings"]
    assert [(f["code"], f["request"]["port"]) for f in findings] == [("EV224", 8452)]
