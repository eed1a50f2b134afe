"""What a live run may leave behind, read from /proc: shared by the tests that prove it
leaves nothing (a process still running, a network namespace still held)."""

from __future__ import annotations

import os
from pathlib import Path


def running(pid: int) -> bool:
    """The process exists and is not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def namespaces_in_use() -> set[int]:
    """The inode of every network namespace some process is in."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.add(os.stat(entry / "ns" / "net").st_ino)
            except OSError:
                continue
    return found
