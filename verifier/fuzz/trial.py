"""One drawn world, translated: its resources, status graph, xDS and check context.

Worlds are loaded from their YAML text, as ``check`` loads a fixture (so a
counterexample written as a fixture behaves exactly as it did here), and
translated either by the reference translator in this process or by an
external command under the ``check --translator`` contract. A world with mesh
routes is also translated for the sidecar of every workload that has one
(``translate --proxy``; an external command is run as ``CMD --proxy NS/WORKLOAD
PATH...``), and its mesh requests are answered on their client's sidecar xDS.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from verifier.check import Comparison, Context
from verifier.errors import InputErrors
from verifier.gatewayapi import workloads
from verifier.gatewayapi.attach import Graph, build_graph
from verifier.gatewayapi.load import LoadResult, load_texts
from verifier.gatewayapi.mesh_attach import build_mesh
from verifier.gatewayapi.resources import Resources, build
from verifier.mesh_compare import MeshJudgement, SidecarXds, sidecar_clients
from verifier.orphans import private_dir
from verifier.pipeline import external_snapshot
from verifier.semantics import witness as wt
from verifier.semantics.envoy.model import ModelError
from verifier.semantics.request import Evaluation, Request, Source, evolve
from verifier.translate import TranslateOptions, translate
from verifier.translate.sidecar import translate_sidecar
from verifier.xds.snapshot import Snapshot

from .mesh_worlds import is_mesh_route
from .worlds import BASE_YAML, CONTROLLER, World

BASE_FILE = "base/base.yaml"
WORLD_FILE = "world/resources.yaml"


class TranslatorCrashed(Exception):
    """The translator raised or exited non-zero on a valid world: a property failure."""


@functools.cache
def _base(base_yaml: str) -> LoadResult:
    """The base, parsed once per campaign: it is most of a world's YAML, and building
    Resources only reads the parsed objects."""
    return load_texts([(BASE_FILE, base_yaml)])


def load_world(world: World, base_yaml: str = BASE_YAML) -> Resources:
    """The world as ``check`` would read it; InputErrors when the tool refuses it."""
    base = _base(base_yaml)
    drawn = load_texts([(WORLD_FILE, world.yaml())])
    return build(
        LoadResult(
            base.objects + drawn.objects, base.errors + drawn.errors, base.files + drawn.files
        )
    )


def has_mesh_routes(world: World) -> bool:
    return any(is_mesh_route(d) for d in world.docs)


@dataclass
class Trial:
    world: World
    res: Resources
    snapshot: Snapshot
    extra: tuple[wt.Witness, ...] = ()
    # Each meshed client's sidecar xDS: empty for a world without mesh routes.
    sidecars: dict[Source, Snapshot] = field(default_factory=dict)
    mesh_extra: tuple[wt.Witness, ...] = ()

    @cached_property
    def graph(self) -> Graph:
        return build_graph(self.res, CONTROLLER)

    @cached_property
    def ctx(self) -> Context:
        sidecars = SidecarXds(given=self.sidecars) if self.sidecars else None
        return Context(
            self.res, self.snapshot, controller_name=CONTROLLER, spec_cache={}, sidecars=sidecars
        )

    @property
    def requests(self) -> list[wt.Witness]:
        """The witness generator's requests, then the drawn ones (``extra``)."""
        return self.ctx.witnesses + list(self.extra)

    @property
    def mesh_requests(self) -> list[wt.Witness]:
        """The mesh requests (check's: every mesh route's witnesses from every client, and
        every other Service's frontend), then the drawn ones; none without sidecars."""
        if not self.sidecars:
            return []
        return self.ctx.mesh_requests + list(self.mesh_extra)

    def with_requests(self, extra: Iterable[wt.Witness], mesh: Iterable[wt.Witness] = ()) -> Trial:
        """The same translation with drawn requests: the context (witnesses, both
        models' indexes) is shared, not built again."""
        trial = Trial(self.world, self.res, self.snapshot, tuple(extra), self.sidecars, tuple(mesh))
        trial.__dict__["ctx"] = self.ctx
        if "graph" in self.__dict__:
            trial.__dict__["graph"] = self.graph
        return trial

    @property
    def sidecar_problem(self) -> str | None:
        """Why the Envoy model cannot read some sidecar's xDS, or None."""
        for source in sorted(self.sidecars):
            try:
                self.ctx.mesh_plane.model(source)
            except ModelError as exc:
                return f"the sidecar of {source.line()}: {exc}"
        return None

    def mesh(self) -> MeshJudgement:
        """Every mesh request answered on its client's sidecar xDS (or by kube-proxy) and
        compared with the spec model's answer, as check does."""
        ctx = self.ctx
        return ctx.mesh_plane.judge(self.mesh_requests, lambda r: ctx.mesh_spec(r, trace=False))

    def comparisons(self) -> list[Comparison]:
        """The requests on which the models disagree, on this core (a world is small;
        the campaign, not one world, is what would be spread over cores): the edge's,
        then the mesh's."""
        edge = [c for c in map(self.ctx.compare, self.requests) if c is not None]
        return edge + (self.mesh().found if self.sidecars else [])

    def spec(self, gateway: tuple[str, str], request: Request) -> Evaluation:
        return self.ctx.spec(gateway, request, trace=False)

    def envoy(self, request: Request) -> Evaluation:
        return self.ctx.envoy.evaluate(request, trace=False)

    def resend(self, w: wt.Witness, gateway: tuple[str, str]) -> Request:
        """``w``'s request as sent to ``gateway`` in this world, whose address may differ
        from the one it was first sent to (renamed Gateways have other addresses)."""
        new = self.ctx.addresses.get(gateway, w.request.address)
        host = new if w.request.host == w.request.address else w.request.host
        return evolve(w.request, address=new, host=host)


class Translator:
    """The reference translator, or ``command`` (the ``check --translator`` contract)."""

    def __init__(self, command: str | None = None, timeout: float = 60.0) -> None:
        self.command = command
        self.timeout = timeout  # seconds per world (--translator-timeout)
        self.calls = 0

    @property
    def name(self) -> str:
        return self.command or "reference"

    def __call__(self, world: World, base_yaml: str = BASE_YAML) -> Trial:
        res = load_world(world, base_yaml)
        self.calls += 1
        clients = sidecar_clients(res) if has_mesh_routes(world) else []
        if self.command is None:
            try:
                snap = translate(res, build_graph(res, CONTROLLER), TranslateOptions(CONTROLLER))
                sidecars = self._reference_sidecars(res, clients)
            except Exception as exc:  # a crash on a valid world is a finding, not our error
                raise TranslatorCrashed(f"{type(exc).__name__}: {exc}") from exc
            return Trial(world, res, snap, sidecars=sidecars)
        # Removed by the reaper too if the tool is killed while the translator runs.
        tmp = private_dir("edge-verify-fuzz-")
        try:
            paths = [str(p) for p in write_scenario(tmp, world, base_yaml)]
            snap, _notes = external_snapshot(self.command, paths, timeout=self.timeout)
            sidecars = {}
            for source in clients:
                sidecars[source], _notes = external_snapshot(
                    self.command, paths, timeout=self.timeout, proxy=source.line()
                )
        except InputErrors as exc:
            raise TranslatorCrashed("; ".join(e.message for e in exc.errors)) from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return Trial(world, res, snap, sidecars=sidecars)

    @staticmethod
    def _reference_sidecars(res: Resources, clients: list[Source]) -> dict[Source, Snapshot]:
        if not clients:
            return {}
        graph = build_mesh(res)
        out = {}
        for source in clients:
            found = workloads.workload(res, source.namespace, source.workload)
            assert found is not None  # sidecar_clients names workloads of res
            out[source] = translate_sidecar(res, graph, found)
        return out


def write_scenario(root: Path, world: World, base_yaml: str = BASE_YAML) -> Sequence[Path]:
    """``root/base/base.yaml`` and ``root/world/resources.yaml``: a suite ``check`` reads."""
    (root / "base").mkdir(parents=True, exist_ok=True)
    (root / "world").mkdir(parents=True, exist_ok=True)
    (root / BASE_FILE).write_text(base_yaml, encoding="utf-8")
    (root / WORLD_FILE).write_text(world.yaml(), encoding="utf-8")
    return (root / "base", root / "world")
