"""envoy-accepts-config asks Envoy in a child process while the other rules run.

The verdict must be the one asking in-process gives, and nothing may outlive the run:
no child process, no Envoy, no temporary directory, also when another rule fails.
A stand-in ``envoy`` script shows where it ran and can be made to hang.
"""

from __future__ import annotations

import copy
import dataclasses
import multiprocessing
import os
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import pytest
from conftest import FIXTURES, REPO_ROOT, load_scenario, translate_scenario
from verifier.rules import envoy_accepts_config

import verifier.xds.validation
from verifier.check import Context
from verifier.findings import Finding
from verifier.registry import Rule, run
from verifier.xds.snapshot import envoy_validate

SCENARIO = FIXTURES / "httproute-mesh-backend"
# Envoy's shape of error: the rule keeps what follows the configuration's name.
REJECTING = """#!/bin/sh
echo "$PPID" > "{marker}"
echo "error initializing configuration '$4': asked by $PPID" >&2
exit 1
"""
HANGING = """#!/bin/sh
echo "$$" > "{marker}"
exec sleep 600
"""


@pytest.fixture
def context(monkeypatch: pytest.MonkeyPatch) -> Context:
    monkeypatch.chdir(REPO_ROOT)
    res, _graph = load_scenario(SCENARIO)
    return Context(res=res, snapshot=translate_scenario(SCENARIO))


def fake_envoy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, script: str) -> Path:
    """Every Envoy lookup finds ``script``; temporary files go under ``tmp_path/tmp``."""
    marker = tmp_path / "marker"
    envoy = tmp_path / "envoy"
    envoy.write_text(script.format(marker=marker), encoding="utf-8")
    envoy.chmod(0o755)
    for module in (envoy_accepts_config, verifier.xds.validation):
        monkeypatch.setattr(module, "find_envoy", lambda: str(envoy))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return marker


def assert_nothing_left(tmp_path: Path) -> None:
    assert multiprocessing.active_children() == []
    assert list((tmp_path / "tmp").iterdir()) == []


def test_envoy_is_asked_in_a_child_with_the_same_verdict(
    context: Context, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = fake_envoy(monkeypatch, tmp_path, REJECTING)

    findings = run([envoy_accepts_config.RULE], context).findings

    asker = int(marker.read_text(encoding="utf-8"))
    assert asker != os.getpid()  # the child ran Envoy
    assert [(f.code, f.actual) for f in findings] == [("EV101", {"envoy": f"asked by {asker}"})]
    assert_nothing_left(tmp_path)
    # In-process (a rule's check alone starts no child), the same finding.
    marker.unlink()
    fresh = Context(res=context.res, snapshot=translate_scenario(SCENARIO))
    again = list(envoy_accepts_config.check(fresh))
    assert int(marker.read_text(encoding="utf-8")) == os.getpid()
    assert [(f.code, f.actual) for f in again] == [("EV101", {"envoy": f"asked by {os.getpid()}"})]


def test_with_another_thread_alive_envoy_is_asked_in_process(
    context: Context, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forking while another thread may hold a lock could hang the child."""
    marker = fake_envoy(monkeypatch, tmp_path, REJECTING)
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        findings = run([envoy_accepts_config.RULE], context).findings
    finally:
        release.set()
        other.join()
    assert int(marker.read_text(encoding="utf-8")) == os.getpid()
    assert [f.code for f in findings] == ["EV101"]
    assert_nothing_left(tmp_path)


def _failing_rule(marker: Path) -> Rule:
    """A rule that runs first and fails once the stand-in Envoy is running."""

    def check(_ctx: Context) -> Iterable[Finding]:
        while not marker.exists() or not marker.read_text(encoding="utf-8").strip():
            time.sleep(0.01)  # a wait for a state, not a timed assertion
        raise RuntimeError("a rule failed")

    return Rule("aaa-fails", ("X000",), ("Gateway",), "", "", check)


def test_a_failing_run_ends_the_child_envoy_and_its_files(
    context: Context, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = fake_envoy(monkeypatch, tmp_path, HANGING)
    with pytest.raises(RuntimeError, match="a rule failed"):
        run([_failing_rule(marker), envoy_accepts_config.RULE], context)
    with pytest.raises(ProcessLookupError):
        os.kill(int(marker.read_text(encoding="utf-8")), 0)  # Envoy is gone (and reaped)
    assert_nothing_left(tmp_path)


def test_an_error_in_the_child_is_raised_as_in_process(
    context: Context, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_envoy(monkeypatch, tmp_path, REJECTING)

    def broken(_snap: object) -> tuple[bool, str]:
        raise RuntimeError("cannot validate")

    monkeypatch.setattr(envoy_accepts_config, "envoy_validate", broken)
    with pytest.raises(RuntimeError, match="cannot validate"):
        run([envoy_accepts_config.RULE], context)
    assert_nothing_left(tmp_path)


def test_no_envoy_no_child_no_verdict(context: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (envoy_accepts_config, verifier.xds.validation):
        monkeypatch.setattr(module, "find_envoy", lambda: None)
    assert run([envoy_accepts_config.RULE], context).findings == []
    assert multiprocessing.active_children() == []


def test_envoy_errors_read_the_same_from_every_envoy_process() -> None:
    """protobuf varies its markers and spacing per process: a finding must not."""
    one = (
        "invalid JSON  in envoy.config.bootstrap.v3.Bootstrap   @ static_resources: "
        "message envoy.config.route.v3.RouteMatch,  near 246:43 (offset 8352):  no such field"
    )
    other = (
        "invalid JSON in envoy.config.bootstrap.v3.Bootstrap @   static_resources: "
        "message   envoy.config.route.v3.RouteMatch, near 246:43 (offset   8352): no such field"
    )
    error = envoy_accepts_config.envoy_error
    assert error(one) == error(other)
    assert error(one) == " ".join(one.split()).replace(", near 246:43 (offset 8352)", "")
    dump = 'goo.gle/debugproto \nroute {\n  match {\n    prefix: "/a"   \n  }\n}'
    assert error(dump) == 'route {\n  match {\n    prefix: "/a"\n  }\n}'


def test_a_rejection_naming_our_files_reads_the_same_on_every_run() -> None:
    """A cluster without a name: Envoy's message names the secrets file in the
    directory made for its validation, whose name is random. The finding names a
    stable stand-in, so two runs of one check write the same report."""
    if verifier.xds.validation.find_envoy() is None:
        pytest.skip("no envoy binary")
    snap = translate_scenario(SCENARIO)
    nameless = copy.copy(snap.clusters[0])
    nameless.name = ""
    broken = dataclasses.replace(snap, clusters=(nameless, *snap.clusters[1:]))
    verdicts = [envoy_validate(broken) for _ in range(2)]
    messages = [envoy_accepts_config.envoy_error(output) for _ok, output in verdicts]
    assert messages[0] == messages[1]
    message = messages[0]
    assert not verdicts[0][0] and verifier.xds.validation.VALIDATION_DIR in message
    assert "xds-validate-" not in message
