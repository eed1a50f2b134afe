"""No Envoy, listener, network namespace or temporary directory outlives the tool, even on
SIGKILL or Ctrl-C.

A SIGKILLed parent runs no cleanup; its Envoy used to be re-parented to init and
keep listening. The child now asks the kernel to kill it with its parent
(verifier/orphans.py). Here a real parent process starts a real Envoy, is killed
with SIGKILL, and the Envoy must be gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from leftovers import namespaces_in_use, outliving, running

from verifier.live.envoy_process import envoy_available

PARENT = """
import asyncio, sys
from pathlib import Path
from verifier.live.envoy_process import EnvoyProcess

async def main():
    boot = {"admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}}}
    envoy = EnvoyProcess(boot, Path(sys.argv[1]))
    await envoy.start()
    print(envoy.proc.pid, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs /proc")
def test_envoy_dies_with_a_sigkilled_parent(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path)],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    envoy_pid = 0
    try:
        assert parent.stdout is not None
        envoy_pid = int(parent.stdout.readline())
        assert running(envoy_pid)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while running(envoy_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not running(envoy_pid), "Envoy outlived its SIGKILLed parent"
    finally:
        parent.kill()
        if envoy_pid and running(envoy_pid):  # a failed run must not leave one behind
            os.kill(envoy_pid, signal.SIGKILL)


# A live run as the tool makes one: a harness (Envoy, echo backends, DNS, a private
# directory) replaying a scenario's cases over and over until it is stopped.
LIVE_RUN = """
import asyncio, sys
from pathlib import Path
from verifier.live.harness import EmbeddedHarness
from verifier.live.replay import load_cases, load_scenario, run_with

async def main():
    scenario = Path(sys.argv[1])
    res, snap = load_scenario(scenario)
    cases = load_cases(scenario, res)
    async with EmbeddedHarness(res, snap) as harness:
        (ip, port), = list(harness.gateway_ports.values())[:1]
        print(harness.envoy.proc.pid, harness.workdir, ip, port, flush=True)
        while True:
            runs = await run_with(harness, cases)
            assert all(r.outcomes for r in runs)

try:
    asyncio.run(main())
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    sys.exit(130)
"""


def _start_live_run(tmp_path: Path) -> tuple[subprocess.Popen[str], int, Path, tuple[str, int]]:
    """The run, its Envoy's pid, its private directory and a listener it serves."""
    run = subprocess.Popen(
        [sys.executable, "-c", LIVE_RUN, "fixtures/httproute-header-matching"],
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        start_new_session=True,  # its own process group, as a terminal gives a command
    )
    assert run.stdout is not None
    pid, workdir, ip, port = run.stdout.readline().split()
    time.sleep(0.5)  # well into the replay loop
    return run, int(pid), Path(workdir), (ip, int(port))


def _listening(address: tuple[str, int]) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(address) == 0


def _nothing_left(envoy_pid: int, workdir: Path, address: tuple[str, int], tmp: Path) -> None:
    deadline = time.monotonic() + 10
    # The kernel closes a killed process's sockets as it tears the process down, which
    # can trail the pid's disappearance under load: wait (bounded) for that too.
    while (
        running(envoy_pid) or workdir.exists() or _listening(address)
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(envoy_pid), "Envoy outlived the run"
    assert not _listening(address), f"something still listens on {address}"
    assert not workdir.exists(), f"{workdir} outlived the run"
    assert list(tmp.iterdir()) == [], list(tmp.iterdir())


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs /proc")
def test_a_sigkilled_live_run_leaves_no_envoy_listener_or_directory(tmp_path: Path) -> None:
    run, envoy_pid, workdir, address = _start_live_run(tmp_path)
    try:
        assert running(envoy_pid) and workdir.is_dir() and _listening(address)
        os.kill(run.pid, signal.SIGKILL)
        run.wait(timeout=10)
        _nothing_left(envoy_pid, workdir, address, tmp_path)
    finally:
        run.kill()
        if running(envoy_pid):
            os.kill(envoy_pid, signal.SIGKILL)


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs /proc")
def test_ctrl_c_stops_a_live_run_at_once_and_leaves_nothing(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) stops the
    run where it is: it does not go on replaying against a dead Envoy."""
    run, envoy_pid, workdir, address = _start_live_run(tmp_path)
    try:
        os.killpg(run.pid, signal.SIGINT)
        _, err = run.communicate(timeout=20)
        assert run.returncode == 130, err
        assert err.strip() == "interrupted", err
        _nothing_left(envoy_pid, workdir, address, tmp_path)
    finally:
        run.kill()
        if running(envoy_pid):
            os.kill(envoy_pid, signal.SIGKILL)


# A mesh as the sidecar test stands one up (tests/test_sidecar_model_vs_live.py): pods in
# namespaces of their own, inside a run's namespace, each sidecar a real Envoy.
MESH_RUN = """
import asyncio, json, os, sys
from pathlib import Path
sys.path.insert(0, "tests")
from conftest import FIXTURES, load_scenario, translate_proxy
from verifier.live import netns
from verifier.live.mesh_pods import mesh_pods
from verifier.live.mesh_probe import Identities, MeshWorld

async def main():
    scenario = FIXTURES / "mesh-basic"
    res, _graph = load_scenario(scenario)
    pods = [p for p in mesh_pods(res) if p.sidecar]
    sidecars = {p.client: translate_proxy(scenario, *p.client) for p in pods}
    identities = await Identities.issue(Path(sys.argv[1]), {p.identity() for p in pods})

    async def run():
        async with MeshWorld(res, sidecars, identities) as world:
            seen = [os.getpid(), world.envoy_pids(), world.namespaces(), str(world.workdir)]
            print(json.dumps(seen), flush=True)
            await asyncio.sleep(600)

    await netns.run_in_namespace(run, [])

asyncio.run(main())
"""


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
@pytest.mark.skipif(os.geteuid() != 0, reason="pod namespaces need root")
def test_a_sigkilled_mesh_run_leaves_no_sidecar_pod_namespace_or_directory(
    tmp_path: Path,
) -> None:
    """Killed with its world up, a mesh run leaves no sidecar Envoy, no namespace (its
    pods', with their links and nft rules, nor its node's, with kube-proxy's rules), no
    worker and no directory: nothing outside the killed process cleans up for it."""
    run = subprocess.Popen(
        [sys.executable, "-c", MESH_RUN, str(tmp_path / "pki")],
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    worker, envoys = 0, []
    try:
        assert run.stdout is not None
        worker, envoys, spaces, workdir = json.loads(run.stdout.readline())
        assert envoys and all(running(pid) for pid in [worker, *envoys])
        assert len(spaces) > 1 and set(spaces) <= namespaces_in_use()
        assert Path(workdir).is_dir()
        os.kill(run.pid, signal.SIGKILL)
        run.wait(timeout=10)
        deadline = time.monotonic() + 10
        while (
            any(running(pid) for pid in [worker, *envoys])
            or set(spaces) & namespaces_in_use()
            or Path(workdir).exists()
        ) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [pid for pid in [worker, *envoys] if running(pid)] == []
        assert set(spaces) & namespaces_in_use() == set()
        assert not Path(workdir).exists()
    finally:
        run.kill()
        for pid in [worker, *envoys]:
            if pid and running(pid):
                os.kill(pid, signal.SIGKILL)


KILLED_CHECK = """
import sys
from verifier.cli import main
sys.exit(main(["check", "fixtures/", "--format", "json"]))
"""


@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs /proc")
def test_a_sigkilled_check_leaves_no_directory(tmp_path: Path) -> None:
    """``check`` asks a validating Envoy in a private directory; killed while it does,
    the directory still goes (the reaper sees the tool's end, however it came)."""
    run = subprocess.Popen(
        [sys.executable, "-c", KILLED_CHECK],
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("xds-validate-*")) and time.monotonic() < deadline:
        if run.poll() is not None:
            pytest.skip("the check ended before a validating Envoy started")
        time.sleep(0.01)
    os.kill(run.pid, signal.SIGKILL)  # the tool only: its children must follow by themselves
    run.wait(timeout=10)
    deadline = time.monotonic() + 30
    while list(tmp_path.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(tmp_path.iterdir()) == []


def _descendants(root: int) -> set[int]:
    """Every process below ``root`` (read from /proc: each process's parent)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[-1].split()[1])
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
@pytest.mark.skipif(os.geteuid() != 0, reason="pod namespaces need root")
def test_an_interrupted_live_run_of_mesh_cases_leaves_nothing() -> None:
    """``edge-verify live`` with mesh cases, interrupted (Ctrl-C) once its sidecars run:
    it exits 130, and every sidecar Envoy, the run's worker, its namespaces (node and
    pods) and its directories go. (SIGKILL: the mesh SIGKILL test above; the worker
    and the directory reaper are the same.) Its TMPDIR is short, so the run's directory
    is made in it, where this test looks (the next test: a deep one)."""
    tmp_path = Path(tempfile.mkdtemp(prefix="ev-", dir="/tmp"))
    run = subprocess.Popen(
        [sys.executable, "-m", "verifier.cli", "live", "fixtures/base", "fixtures/mesh-basic"],
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        start_new_session=True,
    )
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        envoys: set[int] = set()
        while len(envoys) < 5 and time.monotonic() < deadline and run.poll() is None:
            seen |= _descendants(run.pid)
            envoys = {pid for pid in seen if _comm(pid) == "envoy" and running(pid)}
            time.sleep(0.05)
        assert len(envoys) == 5, f"sidecars seen: {envoys} (exit {run.poll()})"  # mesh-basic's
        spaces = set()
        for pid in seen:
            with contextlib.suppress(OSError):
                spaces.add(os.stat(f"/proc/{pid}/ns/net").st_ino)
        spaces -= {os.stat("/proc/self/ns/net").st_ino}
        assert spaces and spaces <= namespaces_in_use()
        # Ctrl-C reaches the terminal's whole process group: the tool and its helpers.
        os.killpg(run.pid, signal.SIGINT)
        assert run.wait(timeout=20) == 130
        assert outliving(seen, spaces) == []
        deadline = time.monotonic() + 10
        while list(tmp_path.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(tmp_path.iterdir()) == []
    finally:
        run.kill()
        for pid in seen:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
@pytest.mark.skipif(os.geteuid() != 0, reason="pod namespaces need root")
def test_a_mesh_run_under_a_deep_tmpdir_still_binds_its_sidecars_admin_sockets(
    tmp_path: Path,
) -> None:
    """A sidecar's admin endpoint is a Unix socket, and a socket's path must fit in 107
    bytes or Envoy refuses its bootstrap: CI's pytest ``tmp_path`` once made every mesh
    case fail. Under a TMPDIR deeper than that, the run's directory goes in /tmp, the
    cases pass, and nothing is left there."""
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    before = {p.name for p in Path("/tmp").glob("edge-verify-mesh-*")}
    done = subprocess.run(
        [sys.executable, "-m", "verifier.cli", "live", "fixtures/base", "fixtures/mesh-basic"],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(deep)},
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed, 0 failed" in done.stdout + done.stderr
    assert {p.name for p in Path("/tmp").glob("edge-verify-mesh-*")} <= before
    assert list(deep.iterdir()) == []
