"""No Envoy outlives the tool, even when the tool is killed with SIGKILL.

A SIGKILLed parent runs no cleanup; its Envoy used to be re-parented to init and
keep listening. The child now asks the kernel to kill it with its parent
(verifier/orphans.py). Here a real parent process starts a real Envoy, is killed
with SIGKILL, and the Envoy must be gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

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


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


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
        assert _alive(envoy_pid)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(envoy_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(envoy_pid), "Envoy outlived its SIGKILLed parent"
    finally:
        parent.kill()
        if envoy_pid and _alive(envoy_pid):  # a failed run must not leave one behind
            os.kill(envoy_pid, signal.SIGKILL)
