"""`edge-verify run fixtures/` end to end, and the live pass's cases per second.

Not a test: the machines are shared and noisy, so this prints figures with the
date and the machine's load rather than asserting them. Each run is a separate
process, as a user runs it; the JSON report gives the live pass's own time and
case count, from which cases per second are computed.

    python benchmarks/bench_live.py              # run fixtures/ (cases only)
    python benchmarks/bench_live.py --witnesses  # plus every witness request
    python benchmarks/bench_live.py --mesh       # live on the mesh fixtures alone

Where the report has mesh scenarios (their cases sent through real sidecars), it
also prints what their meshes cost to start: pod namespaces, kube-proxy and DNS,
echo backends, every sidecar up (median and slowest scenario), and one sidecar's
start (the mean of each scenario's sidecars).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def one_run(witnesses: bool, mesh: bool) -> tuple[float, dict[str, object]]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "live.json"
        if mesh:  # a suite of the base and the mesh scenarios, as links
            suite = Path(tmp) / "suite"
            suite.mkdir()
            for folder in [ROOT / "fixtures/base", *sorted(ROOT.glob("fixtures/mesh-*"))]:
                (suite / folder.name).symlink_to(folder)
            argv = ["edge-verify", "live", str(suite), "--format", "json", "-o", str(report)]
        else:
            argv = ["edge-verify", "run", "fixtures/", "--format", "json", "-o", str(report)]
        if witnesses:
            argv.append("--witnesses")
        started = time.monotonic()
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
        wall = time.monotonic() - started
        if proc.returncode != 0:
            sys.exit(f"edge-verify exited {proc.returncode}:\n{proc.stderr[-2000:]}")
        return wall, json.loads(report.read_text(encoding="utf-8"))


def mesh_lines(doc: dict[str, Any]) -> list[str]:
    """The mesh scenarios' cases and start-up costs, from the report's ``mesh``."""
    mesh = doc.get("mesh") or {}
    if not mesh:
        return []
    cases = [c for c in doc["cases"] if c["scenario"] in mesh]
    # The attribution record (docs/live.md, "Which route served each answer").
    attributed = sum(1 for c in cases if (c.get("attribution") or {}).get("route"))
    lines = [
        f"mesh: {len(mesh)} scenarios, {len(cases)} cases "
        f"({sum(c['passed'] for c in cases)} passed, {attributed} attributed to a sidecar route)"
    ]
    for stage in ("namespace_setup", "pods", "kube_proxy_dns", "echoes", "sidecars"):
        values = [m["start_seconds"][stage] for m in mesh.values()]
        lines.append(
            f"  {stage}: median {statistics.median(values):.2f}s, slowest {max(values):.2f}s"
        )
    one = [m["start_seconds"]["sidecar_start_mean"] for m in mesh.values()]
    lines.append(f"  one sidecar (mean per scenario): median {statistics.median(one):.2f}s")
    return lines


def main() -> None:
    witnesses = "--witnesses" in sys.argv[1:]
    mesh = "--mesh" in sys.argv[1:]
    load = os.getloadavg()[0]
    wall, doc = one_run(witnesses, mesh)
    summary = doc["summary"]
    assert isinstance(summary, dict)
    n = int(summary["passed"]) + int(summary["failed"])
    live = float(summary["seconds"])
    print(f"{date.today()} on {os.cpu_count()} cores, load {load:.1f}")
    what = "live <base and mesh-*>" if mesh else "run fixtures/"
    print(f"{what}{' --witnesses' if witnesses else ''}: {wall:.1f}s wall end to end")
    what = "cases and witness requests" if witnesses else "cases (3 passing sends each)"
    print(f"live pass: {n} {what} judged in {live:.1f}s = {n / live:.1f} per second")
    print(f"rewritten: {summary['rewritten']}")
    print("\n".join(mesh_lines(doc)))


if __name__ == "__main__":
    main()
