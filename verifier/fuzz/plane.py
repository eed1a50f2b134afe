"""One real Envoy for a whole campaign: the oracle of ``envoy-agrees`` (and the NACK
half of ``envoy-accepts``).

Starting an Envoy costs about a second; a campaign asks it about hundreds of
worlds. So one Envoy runs in a network namespace of its own (as the live pass
runs, ``verifier.live.isolated``), fed by our ADS server, and each world's
snapshot is pushed to it in turn: Envoy ACKs or NACKs it, its new listeners
and clusters warm, and the world's requests go through it to echo backends.

Every world stands on the same base (``worlds.base_docs``), so the DNS
server and one echo backend per Service are started once, from the
translation of a world that reaches every Service; a translation that dials
something else gets its backend (and the addresses it needs) when it first
appears.

The campaign runs inside the namespace's process (a forked child, as every
live run is): Hypothesis in a worker thread, the plane on the event loop;
a property asks the plane through ``SyncPlane``, which blocks that thread
only. What the campaign found comes back to the parent pickled.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, TypeVar

import aiohttp

from verifier.destinations import Destinations
from verifier.forked import on_stop
from verifier.gatewayapi.addresses import Addressing, gateway_addresses
from verifier.gatewayapi.attach import DEFAULT_CONTROLLER
from verifier.gatewayapi.resources import Resources
from verifier.live.bootstrap import BackendPlan, plan_backends
from verifier.live.echo import EchoBackend
from verifier.live.echo_model import echo_reply
from verifier.live.harness import GATEWAY_ADDRESS, HarnessError
from verifier.live.isolated import NamespaceHarness
from verifier.live.mesh_probe import Identities
from verifier.live.netns import bring_up, local_addresses, run_in_namespace
from verifier.live.served import namespace_addresses
from verifier.live.verdict import live_mismatches
from verifier.orphans import private_dir
from verifier.semantics import witness as wt
from verifier.xds.layout import CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, ROUTE_TYPE
from verifier.xds.snapshot import Snapshot, bound_addresses

from .mesh_base import MESH_SERVICES
from .mesh_plane import MeshAsked, ask_mesh, identities_wanted
from .properties import Mismatch
from .trial import Translator, Trial
from .worlds import CLASS, GATEWAY_NS, GATEWAYS, GROUP, PORTS, RENAME_PREFIX, SERVICES, World
from .worlds import grant as reference_grant

T = TypeVar("T")

ANSWER_WAIT_S = 10.0  # bound on Envoy's ACK or NACK of one pushed type
WARM_WAIT_S = 10.0  # bound on new listeners and clusters warming
REQUEST_TIMEOUT_S = 5.0
PARALLEL = 16  # requests in flight to the one Envoy
# A replaced listener is drained at once: no request of ours is ever in flight on it.
DRAIN_ARGS = ("--drain-time-s", "0", "--drain-strategy", "immediate")
# Until these are 0, some connection may still meet a configuration being replaced: a
# listener warming, or an old one (or filter chain) draining.
_WARMING = (
    "listener_manager.total_listeners_warming",
    "cluster_manager.warming_clusters",
    "listener_manager.total_listeners_draining",
    "listener_manager.total_filter_chains_draining",
)
# A mismatch is asked again after this long before it counts (``Plane.ask``).
RECHECK_AFTER_S = 0.05


def everything_world() -> World:
    """Both Gateways on every port, one route reaching every Service of the base, the
    mesh's too (with the grants that permit it): its translation is what the plane
    starts with."""
    services = [(p + ns, p + name) for p in ("", RENAME_PREFIX) for ns, name in SERVICES]
    services += list(MESH_SERVICES)  # dialled over mTLS to their pods' :15008
    listeners = [
        {
            "name": f"l{port}",
            "port": port,
            "protocol": "HTTP",
            "allowedRoutes": {"namespaces": {"from": "All"}},
        }
        for port in PORTS
    ]
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "Gateway",
            "metadata": {"name": gw, "namespace": GATEWAY_NS},
            "spec": {"gatewayClassName": CLASS, "listeners": listeners},
        }
        for gw in GATEWAYS
    ]
    docs.append(
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": "everything", "namespace": GATEWAY_NS},
            "spec": {
                "parentRefs": [{"name": gw} for gw in GATEWAYS],
                "rules": [
                    {"backendRefs": [{"name": name, "namespace": ns, "port": 8080}]}
                    for ns, name in services
                ],
            },
        }
    )
    docs += [
        reference_grant(GATEWAY_NS, ns)
        for ns in sorted({ns for ns, _ in services})
        if ns != GATEWAY_NS
    ]
    return World(tuple(docs))


class Plane(NamespaceHarness):
    """``NamespaceHarness`` whose snapshot changes: ``load`` pushes a world's, ``ask``
    sends its requests. Must be entered inside a network namespace of its own."""

    extra_envoy_args = DRAIN_ARGS

    def __init__(self, first: Trial, **options: Any) -> None:
        super().__init__(first.res, first.snapshot, log_level="error", **options)
        self.http: aiohttp.ClientSession | None = None
        self.identities: Identities | None = None  # the mesh's CA and certificates, so far
        self.pki_dirs: list[str] = []

    async def start(self) -> Plane:
        await super().start()
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        return self

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.close()
        for directory in self.pki_dirs:
            shutil.rmtree(directory, ignore_errors=True)
        await super().stop()

    async def ask_mesh(self, trial: Trial) -> MeshAsked:
        """The trial's mesh requests through its pods' real sidecars, stood up for it in
        a network namespace of their own (``verifier.fuzz.mesh_plane``)."""
        wanted = identities_wanted(trial)
        if self.identities is None or not wanted <= set(self.identities.issued):
            have = set(self.identities.issued) if self.identities is not None else set()
            directory = private_dir("edge-verify-fuzz-pki-")
            self.pki_dirs.append(str(directory))
            self.identities = await Identities.issue(directory, wanted | have)
        identities = self.identities
        done = await run_in_namespace(lambda: ask_mesh(trial, identities), [])
        asked: MeshAsked = done.value
        return asked

    async def load(self, res: Resources, snap: Snapshot) -> str | None:
        """Serve ``snap``: Envoy's NACK message, or None once it ACKed every type and
        warmed what is new (requests then meet exactly this configuration)."""
        assert self.ads is not None
        await self._backends_for(res, snap)
        versions = self.ads.update(snap)
        wanted = [
            CLUSTER_TYPE,
            *([ENDPOINT_TYPE] if snap.endpoints else []),
            LISTENER_TYPE,
            *([ROUTE_TYPE] if snap.routes else []),
        ]
        for url in wanted:
            try:
                answer = await asyncio.wait_for(
                    self.ads.wait_answer(url, versions[url]), ANSWER_WAIT_S
                )
            except TimeoutError:
                await self.alive()
                raise HarnessError(
                    f"Envoy did not answer {url} {versions[url]} in {ANSWER_WAIT_S:g}s"
                ) from None
            if not answer.accepted:
                return answer.message or "rejected, no message"
        await self._warm()
        self.res, self.snapshot = res, snap
        self.destinations = Destinations.of(res, DEFAULT_CONTROLLER, Addressing())
        self.gateway_ports = {b: b for b in bound_addresses(snap)}
        return None

    async def _warm(self) -> None:
        """Until Envoy has no listener or cluster warming (a new one serves nothing yet)
        and no listener or filter chain draining (an old one still serves)."""
        assert self.http is not None and self.envoy is not None
        url = f"http://{self.envoy.admin}/stats?format=json&filter=warming|draining"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WARM_WAIT_S
        while True:
            async with self.http.get(url) as resp:
                doc = await resp.json(content_type=None)
            stats = {s.get("name"): s.get("value", 0) for s in doc.get("stats", [])}
            if all(not stats.get(name) for name in _WARMING):
                return
            if loop.time() > deadline:
                await self.alive()
                raise HarnessError(f"still warming after {WARM_WAIT_S:g}s: {stats}")
            await asyncio.sleep(0.005)

    async def _backends_for(self, res: Resources, snap: Snapshot) -> None:
        """Start an echo for any Service ``snap`` reaches that has none yet."""
        plans, _ = plan_backends(res, snap)
        for key, plan in plans.items():
            if key in self.backends or key in self.service_ips:
                _same_ports(plan, self.backends.get(key))
                continue
            bring_up(local_addresses([a for _, a, _ in plan.ip_endpoints]))
            self._register(plan, await self._start_pods(plan, None))

    async def ask(self, trial: Trial) -> list[Mismatch]:
        """Every request of ``trial`` through Envoy (loaded with its snapshot); where
        the Envoy model does not predict the answer, what differs."""
        limit = asyncio.Semaphore(PARALLEL)

        async def judged(w: wt.Witness) -> Mismatch | None:
            async with limit:
                try:
                    resp = await self.send(
                        self.for_gateway(w.gateway, w.request), timeout=REQUEST_TIMEOUT_S
                    )
                except ValueError:  # a client certificate this plane cannot present
                    return None
            live = self.to_outcome(resp)
            model = trial.ctx.envoy.evaluate(resp.request, echo_reply(resp.request), trace=False)
            problems = live_mismatches(model.outcome, live)
            if not problems:
                return None
            return Mismatch(replace(w, request=resp.request), live, model.outcome, tuple(problems))

        async def one(w: wt.Witness) -> Mismatch | None:
            """A mismatch counts when the request meets it twice. Envoy ACKs a route
            update before every worker thread has it, and a loaded machine can time a
            request out; a translator's mistake answers the same way again (Hypothesis
            also replays a failure, and calls one that goes away flaky)."""
            if await judged(w) is None:
                return None
            await asyncio.sleep(RECHECK_AFTER_S)
            return await judged(w)

        found = await asyncio.gather(*(one(w) for w in trial.requests))
        return [m for m in found if m is not None]


def _same_ports(plan: BackendPlan, backend: EchoBackend | None) -> None:
    if backend is None:
        return
    missing = set(plan.ports) - set(backend.bound)
    if missing:
        raise HarnessError(
            f"{plan.namespace}/{plan.service} is dialled on ports {sorted(missing)} its "
            "echo backend was not started on"
        )


class SyncPlane:
    """The plane as the properties call it: from Hypothesis's thread, blocking only it."""

    def __init__(self, plane: Plane, loop: asyncio.AbstractEventLoop) -> None:
        self.plane = plane
        self.loop = loop

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def load(self, trial: Trial) -> str | None:
        nack: str | None = self._run(self.plane.load(trial.res, trial.snapshot))
        return nack

    def ask(self, trial: Trial) -> list[Mismatch]:
        found: list[Mismatch] = self._run(self.plane.ask(trial))
        return found

    def ask_mesh(self, trial: Trial) -> MeshAsked:
        asked: MeshAsked = self._run(self.plane.ask_mesh(trial))
        return asked


def _addresses(first: Trial) -> list[str]:
    gateways = gateway_addresses(first.res, DEFAULT_CONTROLLER, Addressing())
    return namespace_addresses(first.snapshot, [*gateways.values(), GATEWAY_ADDRESS])


def in_plane(work: Callable[[SyncPlane], T]) -> T:
    """``work(plane)`` in a forked child, in a network namespace of its own, with the
    plane up; its value comes back pickled. Raises ``NamespaceUnavailable`` where no
    namespace can be made, and the errors of ``with_isolated_harness`` otherwise."""
    first = Translator()(everything_world())  # the reference's: reaches every Service

    async def inside() -> T:
        plane = Plane(first)
        async with plane:
            with on_stop(plane.kill_now):
                loop = asyncio.get_running_loop()
                with ThreadPoolExecutor(1, thread_name_prefix="fuzz-campaign") as pool:
                    return await loop.run_in_executor(pool, work, SyncPlane(plane, loop))

    done = asyncio.run(run_in_namespace(inside, _addresses(first)))
    return done.value
