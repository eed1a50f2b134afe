"""A longer campaign of the entry-point fuzz test: damaged inputs through every
entry point of the CLI, randomly drawn (not derandomized), many more of them.

tests/test_fuzz_entry_points.py runs a few thousand derandomized examples on every
CI run; this looks further, with new draws each run. Each entry point gets
``--examples`` times its share in the test (``--examples 10`` is ten times the
test), a failure is reported with its command line and the entry point's
campaign goes on to the next one; failures are kept in .hypothesis/ and replayed
first by the next run of the test or of this script.

    python benchmarks/fuzz_inputs.py [--examples N] [--only NAME]...
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from entry_points import ENTRY_POINTS, summary, survives_damage, warm, workspace  # noqa: E402


def campaign(name: str, scale: float, valid: Path, shrink: bool) -> str | None:
    """Run one entry point's property; the failure Hypothesis found, if any."""
    examples = max(1, round(ENTRY_POINTS[name].examples * scale))
    try:
        survives_damage(name, valid, examples, derandomize=False, shrink=shrink)()
    except AssertionError as exc:
        return str(exc)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--examples",
        type=float,
        default=10.0,
        metavar="N",
        help="N times each entry point's share in the test (default: 10)",
    )
    parser.add_argument(
        "--only", action="append", choices=sorted(ENTRY_POINTS), help="these entry points only"
    )
    parser.add_argument(
        "--no-shrink",
        action="store_true",
        help="report a failure as found, without shrinking it (an example costs ~0.1 s; "
        "shrinking a large one can take minutes)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fuzz-valid-") as tmp:
        valid = workspace(Path(tmp))
        warm(valid)
        start = time.perf_counter()
        failures = {}
        for name in args.only or list(ENTRY_POINTS):
            found = campaign(name, args.examples, valid, shrink=not args.no_shrink)
            print(f"{name}: {'FAILED' if found else 'ok'}", flush=True)
            if found:
                failures[name] = found
    print()
    print("\n".join(summary()))
    print(f"wall: {time.perf_counter() - start:.1f} s")
    for name, found in failures.items():
        print(f"\n=== {name}\n{found}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
