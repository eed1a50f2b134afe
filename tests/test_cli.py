"""The command line as a user meets it: a separate process, real files, real exit codes.

Running the CLI in a subprocess is the only way to see what a user sees:
the exit status, what lands on stdout versus stderr, and whether a traceback
leaks out on bad input.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import (
    MINIMAL_YAML,
    REPO_ROOT,
    invalid_scenarios,
    rel,
    scenario_params,
    translate_args,
    translate_scenario,
)
from live_suite import SuiteRun

from verifier.errors import InputError, InputErrors
from verifier.gatewayapi.resources import load_resources

# The scenario the README's first-use command translates.
README_SCENARIO = REPO_ROOT / "fixtures" / "httproute-query-param-matching"
COUNT_LINE = re.compile(r"^edge-verify: (\d+) input errors?$")
ROUTE_ACCEPTED = "HTTPRoute web/echo -> Gateway web/edge: Accepted=True (Accepted)"


def run(
    *args: str, stdin: str | None = None, cwd: Path = REPO_ROOT
) -> subprocess.CompletedProcess[str]:
    """``python -m verifier.cli`` (this tree's) from the repo root or a user's ``cwd``,
    with no terminal attached."""
    return subprocess.run(
        [sys.executable, "-m", "verifier.cli", *args],
        cwd=cwd,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=None if cwd == REPO_ROOT else {**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )


def assert_bad_input(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """Exit 2, no traceback, a final count line that matches; return the error lines."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines, "no error reported"
    count = COUNT_LINE.match(lines[-1])
    assert count, f"last stderr line is not the error count: {lines[-1]!r}"
    errors = [line for line in lines[:-1] if not line.startswith(("warning: ", "note: "))]
    assert int(count[1]) == len(errors), proc.stderr
    return errors


def _listed(items: list[object]) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}, sort_keys=False)


def test_installed_script_reports_version() -> None:
    script = Path(sys.executable).parent / "edge-verify"
    proc = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, check=False, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(r"edge-verify \d+\.\d+\.\d+\S*\n", proc.stdout), proc.stdout


def test_translate_is_byte_identical_and_equals_dumps(tmp_path: Path, repo_cwd: Path) -> None:
    from verifier.xds.snapshot import dumps

    args = ["translate", *translate_args(README_SCENARIO)]
    first, second = run(*args), run(*args, "-o", str(tmp_path / "xds.json"))
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert second.stdout == ""
    written = (tmp_path / "xds.json").read_text(encoding="utf-8")
    assert first.stdout == written
    expected = dumps(translate_scenario(README_SCENARIO))
    assert first.stdout == (expected if expected.endswith("\n") else expected + "\n")
    json.loads(first.stdout)


def test_stdin(tmp_path: Path) -> None:
    status = run("status", "-", stdin=MINIMAL_YAML)
    assert status.returncode == 0, status.stderr
    assert ROUTE_ACCEPTED in status.stdout.splitlines()
    translated = run("translate", "-", stdin=MINIMAL_YAML)
    assert translated.returncode == 0, translated.stderr
    assert json.loads(translated.stdout)


def test_kind_list_document(tmp_path: Path) -> None:
    listed = tmp_path / "list.yaml"
    listed.write_text(_listed(list(yaml.safe_load_all(MINIMAL_YAML))), encoding="utf-8")
    status = run("status", str(listed))
    assert status.returncode == 0, status.stderr
    assert ROUTE_ACCEPTED in status.stdout.splitlines()
    translated = run("translate", str(listed))
    assert translated.returncode == 0, translated.stderr
    assert json.loads(translated.stdout) == json.loads(
        run("translate", "-", stdin=MINIMAL_YAML).stdout
    )


def test_status_text_is_plain_when_piped() -> None:
    proc = run("status", "-", stdin=MINIMAL_YAML)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" not in proc.stdout
    assert all(": " in line and "=" in line for line in proc.stdout.splitlines())


def test_directory_with_two_bad_files_reports_both(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n  name: b\n", encoding="utf-8"
    )
    (tmp_path / "b.yaml").write_text(
        "apiVersion: v1\nkind: Service\nmetadata: [unclosed\n", encoding="utf-8"
    )
    errors = assert_bad_input(run("translate", str(tmp_path)))
    a, b = str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")
    assert any(
        e.startswith(f"{a}:5: metadata.name: ") and e.endswith("[duplicate-key]") for e in errors
    ), errors
    assert any(re.match(rf"{re.escape(b)}:\d+: .*\[yaml-syntax\]$", e) for e in errors), errors


def test_missing_input_file() -> None:
    errors = assert_bad_input(run("status", "no/such/file.yaml"))
    assert errors == ["no/such/file.yaml: no such file or directory [not-found]"]


def test_unwritable_output_path(tmp_path: Path) -> None:
    target = tmp_path / "no-such-dir" / "xds.json"
    errors = assert_bad_input(run("translate", "-", "-o", str(target), stdin=MINIMAL_YAML))
    assert len(errors) == 1
    assert errors[0].startswith(f"{target}: -o: ") and errors[0].endswith("[unwritable]")
    assert not target.parent.exists()


def test_bad_mesh_registry_is_input_error(tmp_path: Path) -> None:
    missing = tmp_path / "mesh.yaml"
    errors = assert_bad_input(
        run("translate", "-", "--mesh-registry", str(missing), stdin=MINIMAL_YAML)
    )
    assert any(e.startswith(str(missing)) for e in errors), errors


def test_unknown_kind_warns_on_stderr(tmp_path: Path) -> None:
    ingress = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: old\n"
    proc = run("status", "-", stdin=MINIMAL_YAML + "---\n" + ingress)
    assert proc.returncode == 0, proc.stderr
    assert "Ingress" not in proc.stdout
    assert any(
        line.startswith("note: ") and "Ingress" in line for line in proc.stderr.splitlines()
    ), proc.stderr


def _expected(scenario: Path) -> list[tuple[str, int, str, str]]:
    """expected-errors.yaml as (file, line, field, code).

    ``file`` may be written relative to the repo root or to the scenario folder.
    """
    path = scenario / "expected-errors.yaml"
    assert path.is_file(), f"{rel(scenario)} has no expected-errors.yaml"
    entries = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    assert entries, f"{rel(path)} lists no errors"
    out = []
    for entry in entries:
        file = str(entry["file"])
        if not (REPO_ROOT / file).exists() and (scenario / file).exists():
            file = rel(scenario / file)
        out.append(
            (file, int(entry.get("line") or 0), str(entry.get("field") or ""), str(entry["code"]))
        )
    return out


def _reported(scenario: Path) -> set[tuple[str, int, str, str]]:
    """The same errors as the CLI, as tuples: the text cannot be split back unambiguously."""
    found: list[InputError] = []
    args = translate_args(scenario)
    if "--mesh-registry" in args:
        from verifier.gatewayapi.mesh_registry import load_mesh_registry

        try:
            load_mesh_registry(args[-1])
        except InputErrors as exc:
            found += exc.errors
    try:
        load_resources(args[:2])
    except InputErrors as exc:
        found += exc.errors
    return {(e.file, e.line, e.field, e.code) for e in found}


@pytest.mark.parametrize("scenario", scenario_params(invalid_scenarios(), "invalid-* scenarios"))
def test_invalid_scenario_reports_expected_errors(scenario: Path, repo_cwd: Path) -> None:
    expected = _expected(scenario)
    printed = assert_bad_input(run("translate", *translate_args(scenario)))
    reported = _reported(scenario)
    problems = []
    for file, line, field, code in expected:
        head = str(InputError(file, line, field, "CODE", "MESSAGE")).removesuffix(" MESSAGE [CODE]")
        if (file, line, field, code) not in reported:
            problems.append(f"not reported: {(file, line, field, code)}")
        elif not any(p.startswith(head + " ") and p.endswith(f"[{code}]") for p in printed):
            problems.append(f"not printed by the CLI: {head} ... [{code}]")
    for extra in sorted(reported - set(expected)):
        problems.append(f"reported but not expected: {extra}")
    assert not problems, "\n".join(problems) + "\nreported:\n  " + "\n  ".join(printed)


def test_help_names_exit_codes() -> None:
    proc = run("--help")
    assert proc.returncode == 0
    words = " ".join(proc.stdout.split())  # argparse wraps the epilog at the terminal's width
    for code in ("0 success", "1 findings", "2 bad input", "130 interrupted"):
        assert code in words, proc.stdout
    assert proc.stderr == ""


def _readme_blocks(lang: str) -> list[str]:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M)


def _readme_commands() -> list[list[str]]:
    """The ``edge-verify`` command lines in README code blocks, so the README cannot rot."""
    return [
        shlex.split(line)[1:]
        for block in _readme_blocks("sh")
        for line in block.splitlines()
        if line.startswith("edge-verify ")
    ]


def _readme_files(root: Path) -> list[Path]:
    """The files the README's "your own config" walk-through asks the reader to write: each
    YAML block that starts with ``# <path>``, written under ``root`` as it stands, its
    naming comment too (a reader pastes the whole block: the lines shown must be the
    lines they get)."""
    written = []
    for block in _readme_blocks("yaml"):
        first, _, _body = block.partition("\n")
        if first.startswith("# ") and first.endswith(".yaml"):
            path = root / first[2:].strip()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block, encoding="utf-8")
            written.append(path)
    return written


def test_readme_commands_run(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Each runs as written, as a process of its own, a newcomer's own scenario from
    the files the README shows; `run fixtures/` is the session's run of that very
    command (tests/live_suite.py), which sends every fixture's traffic through Envoy
    once for all the tests that need it."""
    commands = _readme_commands()
    assert ["run", "fixtures/"] in commands, "README lost its main job"
    written = _readme_files(tmp_path)
    assert {p.name for p in written} == {"resources.yaml", "cases.yaml"}, written
    for args in commands:
        if args == ["run", "fixtures/"]:
            shared: SuiteRun = request.getfixturevalue("fixtures_run")
            assert shared.code == 0, f"edge-verify run fixtures/:\n{shared.err}"
            assert "edge-verify live: " in shared.err  # its summary (stdout: only problems)
            continue
        proc = run(*args, cwd=tmp_path)
        assert proc.returncode == 0, f"edge-verify {shlex.join(args)}:\n{proc.stdout}{proc.stderr}"


def test_readme_mistake_is_pointed_out_as_shown(tmp_path: Path) -> None:
    """The walk-through's mistake (the backendRef misspelt ``crat``) gives the finding
    the README prints, at the line it prints, and exit 1."""
    (resources, _cases) = _readme_files(tmp_path)
    text = resources.read_text(encoding="utf-8")
    misspelt = "    backendRefs:\n    - name: crat\n"
    assert text.count("    backendRefs:\n    - name: cart\n") == 1
    resources.write_text(
        text.replace("    - name: cart\n      port", "    - name: crat\n      port")
    )
    assert misspelt in resources.read_text(encoding="utf-8")
    proc = run("check", f"{resources.parent.name}/", cwd=tmp_path)
    shown = [b.strip() for b in _readme_blocks("text") if "error EV" in b]
    assert len(shown) == 1, shown
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines()[0] == shown[0], proc.stdout


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        out += [int(c) for c in task.read_text().split()]
    return out


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc")
def test_ctrl_c_ends_a_suite_check_quietly_and_leaves_nothing(tmp_path: Path) -> None:
    """Ctrl-C reaches the whole process group (the CLI, its forked children, the
    child asking Envoy): exit 130 with one line, no traceback, no process and
    no temporary directory left behind."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "verifier.cli", "check", "fixtures/"],
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not _children(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # interrupt once the scenario workers are running
    time.sleep(0.3)
    if proc.poll() is not None:
        pytest.skip("the check finished before it could be interrupted")
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip() == "edge-verify: interrupted"
    for _ in range(100):  # the group's processes may take a moment to be reaped
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("processes of the interrupted check are still running")
    assert list(tmp_path.iterdir()) == []


def test_every_option_of_every_command_says_what_it_does() -> None:
    """A user reading --help should not have to guess (issue: several had no help)."""
    import argparse

    from verifier.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    silent = [
        f"{name} {'/'.join(a.option_strings)}"
        for name, command in sub.choices.items()
        for a in command._actions
        if a.option_strings and not a.help and a.dest != "help"
    ]
    assert silent == []


def test_serve_refuses_what_it_cannot_serve(tmp_path: Path) -> None:
    """serve fails closed before it listens: no input, two inputs, a config_dump whose
    keys are redacted (Envoy could only reject them), a port already taken."""
    https = REPO_ROOT / "fixtures" / "gateway-https-listener"
    dump = run("translate", *translate_args(https), "-o", str(tmp_path / "dump.json"))
    assert dump.returncode == 0, dump.stderr
    cases = {
        ("serve", "--port", "0"): "[no-input]",
        ("serve", *translate_args(https), "--xds", rel(https), "--port", "0"): "[no-input]",
        ("serve", "--xds", str(tmp_path / "dump.json"), "--port", "0"): "[unservable]",
        ("serve", "--xds", rel(https), "--port", "0", "--mesh-registry", "x.yaml"): (
            "[not-applicable]"
        ),
    }
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        cases[("serve", *translate_args(https), "--port", port)] = "[unbindable]"
        for args, code in cases.items():
            errors = assert_bad_input(run(*args))
            assert all(line.endswith(code) for line in errors), (args, errors)
