"""How each rule's time grows with the configuration: the n log n audit of issue 16.

A rule that compares pairs (of routes, of virtual hosts) within one virtual host can
be quadratic without showing it at 1,000 rules; ``unreachable-routes`` was, until its
pairs were indexed. This runs every rule alone on the same check context at each size
(the context's shared work, witnesses and comparisons, is timed apart, once) and prints
each one's seconds and the empirical exponent k in t ~ n^k between sizes: about 1 is
linear, about 1.05 between 1,000 and 10,000 is n log n, 2 is quadratic.

    python benchmarks/bench_rules.py [SIZES...]        # default: 1000 10000
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from generate import write
from verifier.rules import RULES

from verifier import pipeline
from verifier.heap import fewer_collections, loaded_objects_frozen

ROOT = Path(__file__).resolve().parent.parent
SHARED = ("envoy", "witnesses", "comparisons", "disagreements", "unjudged")
SKIP = {"envoy-accepts-config"}  # Envoy's own time, measured by bench_check.py


def measure(n: int, work: Path) -> dict[str, float]:
    scenario = work / f"rules-{n}"
    write(n, scenario)
    xds = work / f"xds-{n}.json"
    subprocess.run(
        [sys.executable, "-m", "verifier.cli", "translate", str(ROOT / "fixtures" / "base"),
         str(scenario), "-o", str(xds)],
        check=True,
    )  # fmt: skip
    times: dict[str, float] = {}
    with fewer_collections():
        opts = pipeline.CheckOptions(xds=str(xds))
        scn = pipeline.discover([str(ROOT / "fixtures" / "base"), str(scenario)], opts)[0]
        ctx, _ = pipeline.prepare(scn, opts)
        assert ctx is not None
        with loaded_objects_frozen():
            for name in SHARED:
                start = time.perf_counter()
                getattr(ctx, name)
                times[f"({name})"] = time.perf_counter() - start
            for rule in sorted(RULES, key=lambda r: r.name):
                if rule.name in SKIP or not rule.claimed_by(ctx.profile):
                    continue
                start = time.perf_counter()
                list(rule.check(ctx))
                times[rule.name] = time.perf_counter() - start
    return times


def main(sizes: list[int]) -> None:
    with tempfile.TemporaryDirectory(prefix="edge-bench-rules-") as tmp:
        rows = {n: measure(n, Path(tmp)) for n in sizes}
    first, last = sizes[0], sizes[-1]
    head = "".join(f"{n:>10}" for n in sizes)
    print(f"{'rule (seconds at each size)':<48}{head}  exponent {first}->{last}")
    names = sorted(rows[last], key=lambda k: -rows[last][k])
    for name in names:
        cells = "".join(f"{rows[n].get(name, float('nan')):>10.3f}" for n in sizes)
        a, b = rows[first].get(name, 0.0), rows[last].get(name, 0.0)
        grows = first != last and a > 1e-4 and b > 1e-4  # one size: no exponent to give
        k = math.log(b / a) / math.log(last / first) if grows else float("nan")
        print(f"{name:<48}{cells}  {k:8.2f}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1000, 10000])
