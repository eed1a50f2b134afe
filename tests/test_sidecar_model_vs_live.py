"""The Envoy model's reading of every fixture's sidecars equals real Envoy's, request by request.

For every scenario with mesh routes or mesh cases, every workload with a sidecar
(``conftest.mesh_proxies``) is a pod of a live mesh (``verifier.live.mesh_probe``):
its own network namespace, its real Envoy 1.40 fed its ``translate --proxy`` xDS,
its outbound traffic captured by nftables, the other pods' sidecars terminating
mTLS with their SPIFFE identities in front of echo applications, kube-proxy's DNAT
for everything not captured. Each mesh witness and mesh case the scenario sends
from that workload (``Context.mesh_witnesses``, ``Context.mesh_cases``) is sent
from its pod, and the Envoy model's prediction on that workload's xDS
(``EnvoyModel.evaluate(request, redirect=Redirect(15001))``) must be what real
Envoy did: the filter chain, route and cluster its access log names, the status,
the pod that answered (one of the predicted Services' endpoints), and what the
echo saw (Host, path, headers) or the redirect and headers the client got.

Not compared, and counted per reason in the summary: a request the sidecar does
not capture (it is kube-proxy's, not the sidecar's), one whose predicted answer
rests on an assumption (``Outcome.caveats``), and one sent from a workload without
a sidecar (no Envoy decides it). One namespace per scenario, scenarios in forked
workers, two at a time (``-k`` runs only the scenarios the selected tests read);
the figures are printed at the end of the session.

Nothing outlives a world: checked from inside the run once it has stopped (no
sidecar Envoy, no pod namespace held, no pod link on the node), after the run (its
node's namespace too), and when a sidecar refuses its xDS mid-start;
``tests/test_orphans.py`` holds the same for a mesh run killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import load_scenario, mesh_proxies, scenario_registry, translate_proxy
from leftovers import namespaces_in_use, outliving, running

from verifier.check import Context
from verifier.gatewayapi.resources import Resources
from verifier.live import netns
from verifier.live.client import LiveResponse
from verifier.live.envoy_process import EnvoyError, envoy_available
from verifier.live.mesh_pods import captured, mesh_pods
from verifier.live.mesh_probe import Identities, MeshWorld
from verifier.live.podnet import LINK_PREFIX
from verifier.live.served import ads_bootstrap
from verifier.live.sidecar_verdict import NO_SIDECAR, NOT_CAPTURED, Prediction, compare, predict
from verifier.pipeline import load_cases, with_ports
from verifier.semantics.directory import backend_directory_from
from verifier.semantics.envoy.model import EnvoyModel
from verifier.semantics.request import Request
from verifier.xds.snapshot import Snapshot

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not envoy_available(), reason="no envoy binary"),
    pytest.mark.skipif(os.geteuid() != 0, reason=netns.NEEDS),
]

PARALLEL_SCENARIOS = 2
IN_FLIGHT = 16  # requests at once in one scenario
SCENARIOS = sorted({s for s, _ns, _wl in mesh_proxies()})
PROXIES = [pytest.param(s.name, ns, wl, id=f"{s.name}:{ns}/{wl}") for s, ns, wl in mesh_proxies()]


@dataclass(frozen=True)
class Probe:
    client: tuple[str, str]
    label: str
    request: Request


@dataclass
class ClientRun:
    """What one sidecar's requests showed: problems per request, and what was not compared."""

    compared: int = 0
    problems: list[str] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)


@dataclass
class ScenarioRun:
    clients: dict[tuple[str, str], ClientRun]
    skipped: Counter[str]  # requests no sidecar of this scenario decides
    seconds: float
    sidecar_start: list[float]
    envoy_pids: list[int]
    namespaces: list[int]
    # (client A, client B of another namespace) -> A's answers that B's sidecar model
    # would not give: proof that each request went through its own client's sidecar.
    crossed: dict[tuple[tuple[str, str], tuple[str, str]], int]
    left: list[str]  # what outlived the stopped world, seen from inside its run


FIGURES: dict[str, ScenarioRun] = {}


def probes(scenario: Path, res: Resources) -> list[Probe]:
    """The scenario's mesh witnesses and mesh cases, as check makes them."""
    cases = []
    table = scenario / "cases.yaml"
    if table.is_file():
        loaded, lines = load_cases(str(table))
        cases = with_ports(res, loaded, str(table), lines)
    ctx = Context(res, Snapshot(), cases=cases, mesh_registry=scenario_registry(scenario))
    found = [
        Probe((source.namespace, source.workload), f"witness {w.note or w.feature}", w.request)
        for w in ctx.mesh_witnesses
        if (source := w.request.source) is not None
    ]
    found += [
        Probe((source.namespace, source.workload), f"case {c.name}", c.request)
        for c in ctx.mesh_cases
        if (source := c.request.source) is not None
    ]
    return found


def _pod_links() -> list[str]:
    """The pods' links still on the node (this namespace)."""
    shown = subprocess.run(
        [netns.IP, "-o", "link", "show"], capture_output=True, text=True, check=True
    ).stdout
    names = (line.split(":")[1].strip().split("@")[0] for line in shown.splitlines())
    return [n for n in names if n.startswith(LINK_PREFIX)]


async def left_behind(world: MeshWorld, wait: float = 5.0) -> list[str]:
    """What outlived a stopped world, seen from its node (the run's namespace, still
    up): a sidecar Envoy still running, a pod's namespace a process is in or holds
    open, a pod's link still on the node (its namespace not destroyed: a socket left
    in it holds it, and with it its nft table). The kernel destroys a namespace
    after its last user has gone, not at once: waited for, up to ``wait`` seconds."""
    pods = set(world.namespaces()) - {netns.namespace_id()}
    deadline = time.monotonic() + wait
    while True:
        found = [f"Envoy {pid}" for pid in world.envoy_pids() if running(pid)]
        found += [f"pod namespace {ino}" for ino in sorted(pods & namespaces_in_use())]
        found += [f"link {name}" for name in _pod_links()]
        if not found or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.05)


async def run_scenario(scenario: Path, identities: Identities) -> ScenarioRun:
    """In the scenario's own namespace: the mesh up, every probe sent, each compared."""
    started = time.perf_counter()
    res, _graph = load_scenario(scenario)
    registry = scenario_registry(scenario)
    pods = mesh_pods(res)
    by_client = {p.client: p for p in reversed(pods)}  # requests go from the first pod
    sidecars = {c: translate_proxy(scenario, *c) for c, p in sorted(by_client.items()) if p.sidecar}
    directory = backend_directory_from(res, registry=registry)
    models = {c: EnvoyModel(snap, directory) for c, snap in sidecars.items()}
    clients = {c: ClientRun() for c in sidecars}
    outside: Counter[str] = Counter()
    judged: list[tuple[Probe, Prediction]] = []
    for probe in probes(scenario, res):
        pod = by_client[probe.client]
        if not pod.sidecar:
            outside[NO_SIDECAR] += 1
            continue
        run = clients[probe.client]
        if not captured(res, registry, pod, probe.request.address):
            run.skipped[NOT_CAPTURED] += 1
            continue
        guess = predict(models[probe.client], sidecars[probe.client], probe.request)
        outcome = guess.evaluation.outcome
        if outcome.unjudged:
            for caveat in {c.subject for c in outcome.all_caveats() if c.decides}:
                run.skipped[f"assumes {caveat}"] += 1
            continue
        judged.append((probe, guess))
    world = MeshWorld(res, sidecars, identities, registry)
    async with world:
        limit = asyncio.Semaphore(IN_FLIGHT)

        async def one(probe: Probe) -> tuple[str, LiveResponse]:
            async with limit:
                return await world.send(probe.client, probe.request)

        answers = await asyncio.gather(*(one(p) for p, _g in judged))
        sent = list(zip(judged, answers, strict=True))
        logs = {
            c: await world.logged(c, [s for (p, g), (s, _a) in sent if p.client == c and g.chain])
            for c in sidecars
        }
        starts = [s.start_seconds for s in world.running.values()]
    pids, spaces, left = world.envoy_pids(), world.namespaces(), await left_behind(world)
    seen = [
        (probe, guess, answer, logs[probe.client].get(source))
        for (probe, guess), (source, answer) in sent
    ]
    for probe, guess, answer, line in seen:
        run = clients[probe.client]
        run.compared += 1
        problems = compare(res, pods, guess, answer, line)
        if problems:
            run.problems.append(f"{probe.label}: {probe.request.line()}: {'; '.join(problems)}")
    crossed = {}
    firsts = {c[0]: c for c in sorted(sidecars, reverse=True)}  # one client per namespace
    for a in firsts.values():
        for b in firsts.values():
            if a[0] != b[0]:
                crossed[(a, b)] = sum(
                    1
                    for probe, _guess, answer, line in seen
                    if probe.client == a
                    and compare(
                        res, pods, predict(models[b], sidecars[b], probe.request), answer, line
                    )
                )
    seconds = time.perf_counter() - started
    return ScenarioRun(clients, outside, seconds, starts, pids, spaces, crossed, left)


def _identities(base: Path, scenarios: Iterable[Path]) -> Identities:
    """One mesh CA and a certificate for each identity the scenarios' sidecars present."""
    wanted = {p.identity() for s in scenarios for p in mesh_pods(load_scenario(s)[0]) if p.sidecar}
    return asyncio.run(Identities.issue(base, wanted))


CROSSED = "mesh-consumer-route"  # test_each_request_went_through_its_own_clients_sidecar


def _selected(request: pytest.FixtureRequest) -> list[Path]:
    """The scenarios the selected tests of this module read (``-k`` runs only those)."""
    wanted = set()
    for item in request.session.items:
        if getattr(item, "module", None) is not request.module:
            continue
        callspec = getattr(item, "callspec", None)
        if callspec is not None:
            wanted.add(callspec.params["scenario"])
        elif item.name == test_each_request_went_through_its_own_clients_sidecar.__name__:
            wanted.add(CROSSED)
    return [s for s in SCENARIOS if s.name in wanted] or SCENARIOS[:1]


@pytest.fixture(scope="module")
def runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, ScenarioRun]:
    # Never skipped for want of nft: the README's install step installs it.
    assert shutil.which("nft"), "capture needs nft: apt-get install nftables (README, Install)"
    chosen = _selected(request)
    identities = _identities(tmp_path_factory.mktemp("mesh-pki"), chosen)
    # Once here, not in every forked worker: the xDS messages' validators are built
    # on first use (0.6 s of a scenario's 3 s).
    ads_bootstrap(("127.0.0.1", 1), ("127.0.0.1", 1))
    translate_proxy(chosen[0], *next(c for s, *c in mesh_proxies() if s == chosen[0]))

    async def run_all() -> dict[str, ScenarioRun]:
        sem = asyncio.Semaphore(PARALLEL_SCENARIOS)

        async def one(s: Path) -> tuple[str, ScenarioRun]:
            async with sem:
                done = await netns.run_in_namespace(lambda: run_scenario(s, identities), [])
                return s.name, done.value

        return dict(await asyncio.gather(*(one(s) for s in chosen)))

    started = time.perf_counter()
    found = asyncio.run(run_all())
    FIGURES.update(found)
    FIGURES_WALL.append(time.perf_counter() - started)
    return found


FIGURES_WALL: list[float] = []


@pytest.mark.parametrize(("scenario", "namespace", "workload"), PROXIES)
def test_real_envoy_does_what_the_model_predicts(
    scenario: str, namespace: str, workload: str, runs: dict[str, ScenarioRun]
) -> None:
    run = runs[scenario].clients[(namespace, workload)]
    if not run.compared and not run.skipped:
        pytest.skip(f"{scenario} sends nothing from {namespace}/{workload} (it only answers)")
    assert run.compared > 0, f"nothing compared ({dict(run.skipped)})"
    assert run.problems == []


def test_each_request_went_through_its_own_clients_sidecar(runs: dict[str, ScenarioRun]) -> None:
    """Where a consumer route sends a namespace's clients elsewhere, the answers they got
    are not those another namespace's sidecar would give (and agree with their own:
    above): each request was captured by its own client's Envoy."""
    consumer = ("mesh-client", "client"), ("mesh-apps", "client")
    assert runs[CROSSED].crossed[consumer] > 0
    assert runs[CROSSED].crossed[consumer[::-1]] > 0


def test_nothing_is_left_behind(runs: dict[str, ScenarioRun]) -> None:
    """No sidecar Envoy outlives its stopped world, nor any pod namespace (with its nft
    rules) or link, seen from inside the run; nor, once the run has ended, its node's
    namespace (the kube-proxy rules)."""
    assert {name: r.left for name, r in runs.items() if r.left} == {}
    pids = [pid for r in runs.values() for pid in r.envoy_pids]
    spaces = {ino for r in runs.values() for ino in r.namespaces}
    assert pids and spaces
    assert outliving(pids, spaces) == []


def _twice_the_first_chain(snap: Snapshot) -> Snapshot:
    """The outbound listener with its first filter chain twice (another name, the same
    match): Envoy refuses the listener."""
    listeners = []
    for li in snap.listeners:
        if li.name == "outbound":
            first = li.filter_chains[0]
            again = dataclasses.replace(first, name=f"{first.name}-again")
            li = dataclasses.replace(li, filter_chains=[first, again, *li.filter_chains[1:]])
        listeners.append(li)
    return dataclasses.replace(snap, listeners=tuple(listeners))


def test_a_mesh_that_cannot_start_says_why_and_leaves_nothing(tmp_path: Path) -> None:
    """One sidecar refuses its xDS while the others start: the world says which and
    why, and stops everything it started before the run ends."""
    scenario = SCENARIOS[0].parent / "mesh-basic"
    res, _graph = load_scenario(scenario)
    pods = mesh_pods(res)
    sidecars = {p.client: translate_proxy(scenario, *p.client) for p in pods if p.sidecar}
    refusing = ("mesh-client", "client")
    sidecars[refusing] = _twice_the_first_chain(sidecars[refusing])
    identities = _identities(tmp_path, [scenario])

    async def start() -> tuple[str, list[int], list[int], list[str]]:
        world = MeshWorld(res, sidecars, identities)
        try:
            async with world:
                why = "started"
        except EnvoyError as exc:
            why = str(exc)
        return why, world.envoy_pids(), world.namespaces(), await left_behind(world)

    why, pids, spaces, left = asyncio.run(netns.run_in_namespace(start, [])).value
    assert why.startswith("sidecar of client-") and "refused its xDS" in why, why
    assert len(pids) == len(sidecars) and len(spaces) == len(pods) + 1
    assert left == []
    assert outliving(pids, spaces) == []


def summary() -> list[str]:
    """One line per scenario: sidecars, requests compared, agreement, skips, cost."""
    lines = []
    for name, run in sorted(FIGURES.items()):
        compared = sum(c.compared for c in run.clients.values())
        wrong = sum(len(c.problems) for c in run.clients.values())
        skipped = Counter(run.skipped)
        for c in run.clients.values():
            skipped.update(c.skipped)
        starts = run.sidecar_start
        lines.append(
            f"{name}: {len(run.clients)} sidecars, {compared} requests compared, "
            f"{compared - wrong} agree; not compared: "
            f"{', '.join(f'{n} {why}' for why, n in sorted(skipped.items())) or 'none'}; "
            f"{run.seconds:.1f}s in its namespace "
            f"(sidecar start mean {sum(starts) / max(len(starts), 1) * 1000:.0f} ms)"
        )
    if FIGURES_WALL:
        lines.append(f"all scenarios: {FIGURES_WALL[0]:.1f}s wall")
    return lines
