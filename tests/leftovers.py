"""What a live run may leave behind, read from /proc: shared by the tests that prove it
leaves nothing (a process still running, a network namespace still held)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

_NET = re.compile(r"net:\[(\d+)\]")


def running(pid: int) -> bool:
    """The process exists and is not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def namespaces_in_use() -> set[int]:
    """The inode of every network namespace a process is in or holds open (a pod's
    namespace is held by a file descriptor of the run, with no process in it)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            found.add(os.stat(entry / "ns" / "net").st_ino)
            fds = os.listdir(entry / "fd")
        except OSError:
            continue
        for fd in fds:
            try:
                held = _NET.fullmatch(os.readlink(entry / "fd" / fd))
            except OSError:
                continue
            if held:
                found.add(int(held.group(1)))
    return found


def outliving(pids: Iterable[int], spaces: Iterable[int], wait: float = 10.0) -> list[str]:
    """Which of ``pids`` still run and which namespaces of ``spaces`` are still in use,
    waiting up to ``wait`` seconds for them to go: a run's last helper (the directory
    reaper, started in the run's namespace) ends just after the run does."""
    deadline = time.monotonic() + wait
    while True:
        found = [f"process {pid}" for pid in pids if running(pid)]
        found += [f"namespace {ino}" for ino in sorted(set(spaces) & namespaces_in_use())]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)
