"""Shared test plumbing: where the fixtures are, and how a scenario is loaded.

A scenario is ``fixtures/base`` plus one ``fixtures/<scenario>/`` folder; every
test that runs scenarios goes through ``load_scenario`` so they all see the
same inputs (including the scenario's mesh registry, which the loader skips).
"""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from verifier.errors import InputErrors
from verifier.gatewayapi.attach import Graph, build_graph
from verifier.gatewayapi.resources import Resources, load_resources

if TYPE_CHECKING:
    from live_suite import SuiteRun

    from verifier.xds.snapshot import Snapshot

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = REPO_ROOT / "fixtures"
BASE = FIXTURES / "base"
MESH_REGISTRY = "mesh-registry.yaml"

# The smallest input that exercises the whole pipeline, independent of fixtures/:
# one Gateway of ours, one Service, one HTTPRoute attached to it.
MINIMAL_YAML = """\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: aether
spec:
  controllerName: gateway.aether.io/edge
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: edge
  namespace: web
spec:
  gatewayClassName: aether
  listeners:
  - name: http
    port: 80
    protocol: HTTP
---
apiVersion: v1
kind: Service
metadata:
  name: echo
  namespace: web
spec:
  ports:
  - port: 8080
    targetPort: 3000
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: echo
  namespace: web
spec:
  parentRefs:
  - name: edge
  rules:
  - backendRefs:
    - name: echo
      port: 8080
"""

# A GatewayClass of ours and Gateway ns/gw, one HTTP listener on 80 open to every
# namespace: the smallest world a focused test adds its routes and Services to.
GATEWAY_NS_GW = """\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: aether}
spec: {controllerName: gateway.aether.io/edge}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: ns}
spec:
  gatewayClassName: aether
  listeners:
  - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}
"""


def rel(path: Path) -> str:
    """A repo path as users type it, so reports and goldens do not depend on the checkout."""
    return str(path.relative_to(REPO_ROOT))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="rewrite fixtures/*/*.golden.* from the current code and delete orphan goldens",
    )


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))


def fixture_dirs() -> list[Path]:
    """Every scenario folder: a direct child of fixtures/ other than base, with resources.yaml."""
    if not FIXTURES.is_dir():
        return []
    return sorted(
        d
        for d in FIXTURES.iterdir()
        if d.is_dir() and d.name != "base" and (d / "resources.yaml").is_file()
    )


def declared_findings() -> int:
    """How many findings the fixtures' expected-findings.yaml declare, in all."""
    from verifier.inputs import load_yaml_file

    return sum(len(load_yaml_file(str(p)) or []) for p in FIXTURES.glob("*/expected-findings.yaml"))


def is_invalid(scenario: Path) -> bool:
    """Invalid-input scenarios must be rejected, so they have no xDS and no status."""
    return scenario.name.startswith("invalid-")


def valid_scenarios() -> list[Path]:
    return [d for d in fixture_dirs() if not is_invalid(d)]


def is_mesh(scenario: Path) -> bool:
    """A mesh scenario (``mesh-*``, named after a MESH-HTTP feature): its routes are mesh
    routes and its cases mesh cases; its edge side is fixtures/base's alone
    (tests/test_mesh_fixtures.py holds them to that)."""
    return scenario.name.startswith("mesh-")


def edge_scenarios() -> list[Path]:
    """The valid scenarios with an edge of their own. The sweeps over the edge's xDS and
    its cases (Envoy's validate mode, the Envoy model, live traffic, mutants) take these:
    a mesh scenario's edge xDS is the base's, which every one of these already sweeps."""
    return [d for d in valid_scenarios() if not is_mesh(d)]


def mesh_scenarios() -> list[Path]:
    return [d for d in valid_scenarios() if is_mesh(d)]


def invalid_scenarios() -> list[Path]:
    return [d for d in fixture_dirs() if is_invalid(d)]


def scenario_params(dirs: list[Path], what: str = "scenarios") -> list[object]:
    """pytest params named by scenario; an explicit empty marker when there are none.

    Without it an empty fixtures/ would make the test silently vanish.
    """
    if not dirs:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"no {what} in fixtures/"))]
    return [pytest.param(d, id=d.name) for d in dirs]


def translate_args(scenario: Path) -> list[str]:
    """``edge-verify translate`` arguments for ``scenario``, relative to the repo root."""
    args = [rel(BASE), rel(scenario)]
    registry = scenario / MESH_REGISTRY
    if registry.is_file():
        args += ["--mesh-registry", rel(registry)]
    return args


@pytest.fixture
def repo_cwd(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from the repo root, so file names in outputs read ``fixtures/...`` on every machine."""
    monkeypatch.chdir(REPO_ROOT)
    return REPO_ROOT


def load_scenario(scenario: Path) -> tuple[Resources, Graph]:
    """Load as ``edge-verify ... fixtures/base fixtures/<scenario>`` would (use ``repo_cwd``)."""
    try:
        res = load_resources([rel(BASE), rel(scenario)])
    except InputErrors as exc:
        # Show what the CLI would print, not just "4 input error(s)".
        pytest.fail("\n".join(map(str, exc.errors)), pytrace=False)
    return res, build_graph(res)


def scenario_registry(scenario: Path) -> frozenset[tuple[str, str]]:
    """The scenario's mesh registry (``mesh-registry.yaml`` beside it), if any."""
    from verifier.gatewayapi.mesh_registry import load_mesh_registry

    registry = scenario / MESH_REGISTRY
    return load_mesh_registry(rel(registry)) if registry.is_file() else frozenset()


def translate_scenario(scenario: Path) -> Snapshot:
    # Imported late: the translator is not needed to collect (or run) the other tests.
    from verifier.translate import TranslateOptions, translate

    res, graph = load_scenario(scenario)
    return translate(res, graph, TranslateOptions(mesh_registry=scenario_registry(scenario)))


@functools.cache
def _mesh_cases(scenario: Path) -> bool:
    """The scenario's cases.yaml sends a request from a mesh client (mesh-basic, which
    has no route: its sidecars' default routes are what it is about)."""
    from verifier.pipeline import load_cases

    table = scenario / "cases.yaml"
    return table.is_file() and any(c.mesh for c in load_cases(str(table))[0])


@functools.cache
def mesh_proxies() -> tuple[tuple[Path, str, str], ...]:
    """(scenario, namespace, workload) of every sidecar of every valid scenario that has
    mesh routes (HTTPRoutes whose parent is a Service) or mesh cases: each gets goldens
    of its own and is held to real Envoy, found by reading the fixtures, never listed
    by hand. Read once per session (every fixture is loaded)."""
    from verifier.gatewayapi import mesh_attach

    found = []
    for scenario in valid_scenarios():
        try:
            res = load_resources([str(BASE), str(scenario)])
        except InputErrors:
            continue  # test_goldens reports it
        if any(mesh_attach.is_mesh_route(r) for r in res.httproutes.values()) or _mesh_cases(
            scenario
        ):
            found += [
                (scenario, ns, name)
                for (_kind, ns, name), wl in sorted(res.workloads.items())
                if mesh_attach.has_sidecar(res, wl)
            ]
    return tuple(found)


def proxy_params() -> list[object]:
    """pytest params ``scenario:ns/workload``; an explicit skip when there are none."""
    found = mesh_proxies()
    if not found:
        return [pytest.param(None, "", "", marks=pytest.mark.skip(reason="no mesh scenarios"))]
    return [pytest.param(s, ns, n, id=f"{s.name}:{ns}/{n}") for s, ns, n in found]


def translate_proxy(scenario: Path, namespace: str, workload: str) -> Snapshot:
    """The sidecar's xDS, as ``edge-verify translate ... --proxy NS/WORKLOAD`` writes it."""
    from verifier.gatewayapi import mesh_attach
    from verifier.translate import TranslateOptions
    from verifier.translate.sidecar import translate_sidecar

    res, _graph = load_scenario(scenario)
    wl = mesh_attach.sidecar_workload(res, f"{namespace}/{workload}")
    opts = TranslateOptions(mesh_registry=scenario_registry(scenario))
    return translate_sidecar(res, mesh_attach.build_mesh(res), wl, opts)


def as_records(snap: Snapshot) -> Snapshot:
    """The same snapshot read as ``check --xds`` reads a file: every resource decoded
    from its JSON into records (verifier.xds.records), or as messages where the records
    decoder declines, as the loader does."""
    from verifier.xds.codec import to_json_dict
    from verifier.xds.layout import KIND_OF
    from verifier.xds.snapshot import from_config_dump

    responses = [  # unredacted, as the file a user gives holds its keys
        {
            "type_url": url,
            "resources": [to_json_dict(m, with_type=True) for m in getattr(snap, kind)],
        }
        for url, kind in KIND_OF.items()
    ]
    read, notes = from_config_dump(responses, "<records>", records=True)
    assert not notes, notes
    return read


@pytest.fixture(scope="session")
def fixtures_run() -> SuiteRun:
    """``edge-verify run fixtures/``, once per session: every case of every fixture
    through real Envoy (tests/live_suite.py), read by each test that needs its answers."""
    from live_suite import run_fixtures

    return run_fixtures()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the selected modules' ``BACKGROUND`` computations on the idle core
    (tests/background.py), so that their results are ready when their tests come;
    only for a module whose tests come after others' (alone, nothing would overlap
    and the fixture computes faster over every core itself)."""
    if session.config.option.collectonly or not session.items:
        return
    import background

    first = getattr(session.items[0], "module", None)
    modules = {id(m): m for m in (getattr(i, "module", None) for i in session.items) if m}
    background.start(
        [
            (f"{module.__name__}:{name}", fn)
            for module in modules.values()  # in the order their tests come
            if module is not first
            for name, fn in getattr(module, "BACKGROUND", {}).items()
        ]
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    """No background computation outlives the session (one whose test never ran)."""
    started = sys.modules.get("background")
    if started is not None:
        started.cancel_all()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How many damaged inputs each entry point was fed (tests/test_fuzz_entry_points.py),
    how many hostile peers each network surface met (tests/test_hostile_peers.py), what
    each scenario's sidecars showed against real Envoy (tests/test_sidecar_model_vs_live.py)
    and what finding each seeded translator bug took (tests/test_fuzz_seeded_bugs.py)."""
    fuzzed = sys.modules.get("entry_points")
    if fuzzed is not None and fuzzed.COUNTS:
        terminalreporter.section("damaged inputs per entry point")
        for line in fuzzed.summary():
            terminalreporter.write_line(line)
    hostile = sys.modules.get("test_hostile_cluster")
    if hostile is not None and hostile.FIGURES:
        terminalreporter.section("hostile peers per surface (tests/test_hostile_cluster.py)")
        for line in hostile.summary():
            terminalreporter.write_line(line)
    peers = sys.modules.get("hostile_peers")
    if peers is not None and peers.COUNTS:
        terminalreporter.section("hostile peers per surface (tests/test_hostile_peers.py)")
        for line in peers.summary():
            terminalreporter.write_line(line)
    sidecars = sys.modules.get("test_sidecar_model_vs_live")
    if sidecars is not None and sidecars.FIGURES:
        terminalreporter.section(
            "sidecars against real Envoy (tests/test_sidecar_model_vs_live.py)"
        )
        for line in sidecars.summary():
            terminalreporter.write_line(line)
    seeded = sys.modules.get("test_fuzz_seeded_bugs")
    if seeded is not None and seeded.FIGURES:
        terminalreporter.section("edge-verify fuzz: seeded translator bugs")
        for bug, (examples, seconds, steps, routes) in sorted(seeded.FIGURES.items()):
            terminalreporter.write_line(
                f"{bug}: found after {examples} worlds in {seconds:.1f}s, "
                f"shrunk in {steps} steps to {routes} route(s)"
            )


@pytest.fixture(scope="session")
def broken_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The deliberately broken translators' server (tests/broken_translators.py),
    warmed up, for ``fuzz --translator``; its socket path."""
    import broken_translators as bt

    from verifier.orphans import die_with_parent

    tmp = tmp_path_factory.mktemp("broken")
    sock = str(tmp / "bt.sock")
    proc = subprocess.Popen(
        [sys.executable, bt.__file__, "--serve", sock, str(tmp)],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=die_with_parent(),
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield sock
    proc.kill()
    proc.wait()
