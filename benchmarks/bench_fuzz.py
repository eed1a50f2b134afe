"""How fast ``edge-verify fuzz`` searches, beside the way the tests checked drawn
worlds before it (``check`` through the CLI on each world's files).

For each property: worlds per second and requests per world on one core over
``--seconds``, the reference translator in this process. Then the same number
of worlds (the models-agree run's) through ``main(["check", base, world])``,
the reference: what a drawn-world test cost per world before the campaign's
in-process path. With ``--bugs``, each seeded bug of tests/broken_translators.py
is hunted as the test does (seed, budget, shrink allowance), with the examples
and seconds to find it and the shrunk world's size.

With ``--envoy`` (root, an envoy binary): ``envoy-agrees`` on one Envoy fed over
ADS (snapshots per second, requests per snapshot), beside the reference of a
fresh Envoy per world (``with_isolated_harness``, as ``edge-verify run`` starts
one per scenario) sending the same worlds' witness requests.

    python benchmarks/bench_fuzz.py [--seconds 20] [--bugs] [--envoy]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import broken_translators as bt  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from verifier.cli import main as cli  # noqa: E402
from verifier.fuzz.campaign import Campaign, run_property  # noqa: E402
from verifier.fuzz.properties import DEFAULT_PROPERTIES, Env  # noqa: E402
from verifier.fuzz.trial import Translator, write_scenario  # noqa: E402
from verifier.fuzz.worlds import World, worlds  # noqa: E402


def rates(seconds: float) -> int:
    worlds_seen = 0
    for name in DEFAULT_PROPERTIES:
        env = Env(Translator())
        run = run_property(
            name, env, budget=seconds, seed_value=0, database=None, campaign=Campaign()
        )
        per_world = run.requests / max(run.examples, 1)
        print(
            f"{name:18} {run.examples / run.seconds:6.1f} worlds/s  "
            f"{per_world:6.1f} requests/world  ({run.examples} worlds, {run.seconds:.1f}s)"
        )
        if name == "models-agree":
            worlds_seen = run.examples
    return worlds_seen


def drawn_worlds(count: int) -> list[World]:
    """The first ``count`` worlds seed 0 draws."""
    drawn: list[World] = []

    @seed(0)
    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def collect(data: st.DataObject) -> None:
        drawn.append(data.draw(worlds()))

    collect()
    return drawn


def reference(count: int) -> None:
    """``check`` through the CLI on ``count`` drawn worlds (the same draws, seed 0)."""
    drawn = drawn_worlds(count)
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, open(os.devnull, "w") as quiet:
        for i, world in enumerate(drawn):
            base, path = write_scenario(Path(tmp) / str(i), world)
            with contextlib.redirect_stderr(quiet):  # check's one-line summary per world
                cli(["check", str(base), str(path), "--format", "json", "-o", os.devnull])
    spent = time.monotonic() - began
    rate = len(drawn) / spent
    print(f"{'check via the CLI':18} {rate:6.1f} worlds/s  (reference, {len(drawn)} worlds)")


def bugs() -> None:
    from test_fuzz_seeded_bugs import BUDGET, MAX_EXAMPLES, SEED, SHRINK

    with tempfile.TemporaryDirectory() as tmp:
        sock = str(Path(tmp) / "bt.sock")
        server = subprocess.Popen(
            [sys.executable, bt.__file__, "--serve", sock, tmp],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        try:
            for bug in sorted(bt.BUGS) + sorted(bt.MESH_BUGS):
                # The edge's bugs as an edge-only translator is hunted (--no-mesh).
                env = Env(Translator(bt.command(sock, bug)), mesh=bug in bt.MESH_BUGS)
                run = run_property(
                    "models-agree",
                    env,
                    budget=BUDGET,
                    seed_value=SEED,
                    database=None,
                    shrink_seconds=SHRINK,
                    max_examples=MAX_EXAMPLES,
                    campaign=Campaign(),
                )
                if run.found is None:
                    print(f"{bug:34} NOT FOUND in {run.examples} worlds ({run.seconds:.0f}s)")
                    continue
                f = run.found
                print(
                    f"{bug:34} found after {f.examples:4} worlds in {f.seconds:5.1f}s; "
                    f"shrunk in {f.shrink_steps:3} steps to {len(f.failure.world.routes())} "
                    f"route(s), {len(f.failure.world.yaml().splitlines())} YAML lines"
                )
        finally:
            server.kill()


def envoy(seconds: float, fresh: int = 10) -> None:
    import asyncio

    from verifier.fuzz.plane import in_plane
    from verifier.live.harness import EmbeddedHarness
    from verifier.live.isolated import with_isolated_harness

    env = Env(Translator())

    def search(plane: object) -> object:
        env.plane = plane  # type: ignore[assignment]
        return run_property(
            "envoy-agrees", env, budget=seconds, seed_value=0, database=None, campaign=Campaign()
        )

    began = time.monotonic()
    run = in_plane(search)  # type: ignore[arg-type]
    total = time.monotonic() - began
    print(
        f"{'envoy-agrees':18} {run.examples / run.seconds:6.1f} snapshots/s "
        f"{run.requests / max(run.examples, 1):6.1f} requests/snapshot  ({run.examples} "
        f"snapshots, {run.seconds:.1f}s; {total - run.seconds:.1f}s to start and stop the plane)"
    )
    sent = 0
    began = time.monotonic()
    for world in drawn_worlds(fresh):
        trial = Translator()(world)

        async def work(h: EmbeddedHarness, trial: object = trial) -> int:
            for w in trial.requests:  # type: ignore[attr-defined]
                await h.send(h.for_gateway(w.gateway, w.request))
            return len(trial.requests)  # type: ignore[attr-defined]

        sent += asyncio.run(with_isolated_harness(trial.res, trial.snapshot, work)).value
    spent = time.monotonic() - began
    print(
        f"{'Envoy per world':18} {fresh / spent:6.1f} snapshots/s "
        f"{sent / fresh:6.1f} requests/snapshot  (reference, {fresh} worlds, {spent:.1f}s)"
    )


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="per property")
    parser.add_argument("--bugs", action="store_true", help="hunt every seeded bug too")
    parser.add_argument("--envoy", action="store_true", help="envoy-agrees on a real Envoy")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    reference(rates(args.seconds))
    if args.envoy:
        envoy(args.seconds)
    if args.bugs:
        bugs()
    return 0


if __name__ == "__main__":
    sys.exit(run())
