"""`edge-verify run fixtures/` end to end, and the live pass's cases per second.

Not a test: the machines are shared and noisy, so this prints figures with the
date and the machine's load rather than asserting them. Each run is a separate
process, as a user runs it; the JSON report gives the live pass's own time and
case count, from which cases per second are computed.

    python benchmarks/bench_live.py              # run fixtures/ (cases only)
    python benchmarks/bench_live.py --witnesses  # plus every witness request
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_run(witnesses: bool) -> tuple[float, dict[str, object]]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "live.json"
        argv = ["edge-verify", "run", "fixtures/", "--format", "json", "-o", str(report)]
        if witnesses:
            argv.append("--witnesses")
        started = time.monotonic()
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
        wall = time.monotonic() - started
        if proc.returncode != 0:
            sys.exit(f"edge-verify run exited {proc.returncode}:\n{proc.stderr[-2000:]}")
        return wall, json.loads(report.read_text(encoding="utf-8"))


def main() -> None:
    witnesses = "--witnesses" in sys.argv[1:]
    load = os.getloadavg()[0]
    wall, doc = one_run(witnesses)
    summary = doc["summary"]
    assert isinstance(summary, dict)
    n = int(summary["passed"]) + int(summary["failed"])
    live = float(summary["seconds"])
    print(f"{date.today()} on {os.cpu_count()} cores, load {load:.1f}")
    print(f"run fixtures/{' --witnesses' if witnesses else ''}: {wall:.1f}s wall end to end")
    what = "cases and witness requests" if witnesses else "cases (3 passing sends each)"
    print(f"live pass: {n} {what} judged in {live:.1f}s = {n / live:.1f} per second")
    print(f"rewritten: {summary['rewritten']}")


if __name__ == "__main__":
    main()
