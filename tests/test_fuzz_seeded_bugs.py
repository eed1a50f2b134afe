"""The fuzzer finds real translation bugs: every deliberately broken translator in
tests/broken_translators.py, run through ``--translator`` as any external
translator is, is found and shrunk with a fixed seed within a bounded budget,
(at most ``MAX_EXAMPLES`` worlds, the same worlds on any machine), and the
fixture written for it fails ``check`` with that translator and passes
with the reference one. The mesh controller's mistakes (a consumer route applied to
every namespace, ``parentRef.port`` ignored) are found on the sidecars' xDS (the
translator run as ``CMD --proxy NS/WORKLOAD PATH...``), from mesh requests. Examples
and seconds to find each bug are printed in the terminal summary (the figures, not
assertions: no test here is timed).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import broken_translators as bt
import pytest
import yaml

from verifier.cli import main
from verifier.forked import map_forked
from verifier.fuzz.campaign import fixture_name, run_campaign
from verifier.fuzz.fixtures import write_found
from verifier.fuzz.properties import Env
from verifier.fuzz.trial import Translator

SEED = 1
# The bounds are in worlds and shrink steps, so that the result is the same however
# loaded the machine: with a fixed seed the same worlds are drawn and shrunk. The
# time budgets are only a safety net (shrinking had 20 s a bug, 100 steps on a quiet
# machine and 6 on a loaded one; 40 steps reach 1 to 3 routes on every bug).
MAX_EXAMPLES = 300
BUDGET = 900.0
SHRINK_STEPS = 40
SHRINK = 120.0

# name -> (examples to find, seconds to find, shrink steps, routes left) for the summary
FIGURES: dict[str, tuple[int, float, int, int]] = {}


@dataclass(frozen=True)
class Hunt:
    bug: str
    found: bool
    examples: int
    seconds: float
    shrink_steps: int
    summary: str
    fixture: str | None
    routes: int


def _hunt(bug: str, sock: str, out: Path) -> Hunt:
    # The edge's bugs are hunted as an edge-only translator is (--no-mesh): a mesh world
    # costs a translator run per sidecar besides the edge's and shows them no better.
    env = Env(Translator(bt.command(sock, bug)), mesh=bug in bt.MESH_BUGS)
    campaign = run_campaign(
        env,
        ["models-agree"],
        budget=BUDGET,
        seed_value=SEED,
        database_dir=None,
        shrink_seconds=SHRINK,
        max_examples=MAX_EXAMPLES,
        shrink_steps=SHRINK_STEPS,
    )
    run = campaign.properties[0]
    if run.found is None:
        return Hunt(bug, False, run.examples, run.seconds, 0, "", None, 0)
    failure = run.found.failure
    folder = write_found(out / bug, failure, fixture_name(failure), f"seeded bug {bug}")
    return Hunt(
        bug,
        True,
        run.found.examples,
        run.found.seconds,
        run.found.shrink_steps,
        failure.summary,
        str(folder),
        len(failure.world.routes()),
    )


@pytest.fixture(scope="module")
def hunts(broken_server: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Hunt]:
    """Every bug hunted, two at a time (one per core)."""
    out = tmp_path_factory.mktemp("found")
    bugs = ALL_BUGS
    found = dict(zip(bugs, map_forked(lambda b: _hunt(b, broken_server, out), bugs), strict=True))
    for h in found.values():
        FIGURES[h.bug] = (h.examples, h.seconds, h.shrink_steps, h.routes)
    return found


ALL_BUGS = sorted(bt.BUGS) + sorted(bt.MESH_BUGS)


@pytest.mark.parametrize("bug", ALL_BUGS)
def test_the_fuzzer_finds_and_shrinks_the_bug(
    bug: str, hunts: dict[str, Hunt], broken_server: str
) -> None:
    hunt = hunts[bug]
    assert hunt.found, f"{bug}: not found in {hunt.examples} worlds ({hunt.seconds:.0f}s)"
    assert hunt.fixture is not None
    # Shrunk: small worlds (each of these bugs shows with one or two routes; the
    # shrink allowance may end a step short of the smallest).
    assert hunt.routes <= 3, Path(hunt.fixture, "resources.yaml").read_text()
    # The fixture is a regression test as it is: it fails with the broken translator
    # and passes with the reference one.
    root = str(Path(hunt.fixture).parent)
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "r.json"
        args = ["check", root, "--format", "json", "-o", str(report)]
        broken = main([*args, "--translator", bt.command(broken_server, bug)])
        broken_findings = json.loads(report.read_text())["findings"]
        assert broken == 1, f"{bug}: the fixture does not fail with the broken translator"
        assert broken_findings
        assert main(args) == 0, json.loads(report.read_text())["findings"]


def test_the_fixture_reads_as_written(hunts: dict[str, Hunt]) -> None:
    """cases.yaml holds the spec model's answers; README.md says what failed."""
    hunt = next(h for h in hunts.values() if h.found)
    assert hunt.fixture is not None
    folder = Path(hunt.fixture)
    assert "models-agree" in (folder / "README.md").read_text()
    assert (folder.parent / "base" / "base.yaml").is_file()


@pytest.mark.parametrize("bug", sorted(bt.MESH_BUGS))
def test_a_mesh_bug_is_shown_by_a_mesh_request_at_a_mesh_route(
    bug: str, hunts: dict[str, Hunt], broken_server: str
) -> None:
    """The counterexample of a mesh controller's mistake is a mesh route and requests
    a client workload sends to a Service (``from:``/``service:`` cases); check with the
    broken translator reports it at that route, from the client's sidecar."""
    hunt = hunts[bug]
    assert hunt.fixture is not None
    folder = Path(hunt.fixture)
    world = list(yaml.safe_load_all((folder / "resources.yaml").read_text()))
    mesh = {
        f"HTTPRoute {d['metadata']['namespace']}/{d['metadata']['name']}"
        for d in world
        if d
        and d["kind"] == "HTTPRoute"
        and any(r.get("kind") == "Service" for r in d["spec"]["parentRefs"])
    }
    cases = yaml.safe_load((folder / "cases.yaml").read_text())
    assert cases and all("from" in c and "service" in c for c in cases), cases
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "r.json"
        command = bt.command(broken_server, bug)
        args = ["check", str(folder.parent), "--format", "json", "-o", str(report)]
        assert main([*args, "--translator", command]) == 1
        findings = json.loads(report.read_text())["findings"]
    assert {f["resource"] for f in findings} & mesh, (findings, mesh)
    assert all(f["severity"] == "error" for f in findings if f["resource"] in mesh)
