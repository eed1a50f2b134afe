"""The live pass on exactly the checked xDS: ADS-fed Envoy in a network namespace of its own.

``EmbeddedHarness`` runs a rewritten copy of the snapshot on the shared
loopback (listeners moved to 127.x:0, EDS inlined with loopback IPs, SDS from
files), so it confirms a cousin of what was checked. Here, inside a fresh
network namespace (``netns``), nothing needs rewriting: the listeners bind
the addresses and ports the xDS names, pod IPs are on the namespace's
loopback with an echo behind them, Service names resolve through the run's
DNS server, and Envoy learns everything from our ADS server, which serves the
checked snapshot plus the mesh's ``default``/``ROOTCA`` secrets and one
reported addition (an access log; see ``served``). No packet can leave the
namespace: it has no interface but its loopback.

``run_cases_isolated`` is the entry point: one forked child per run, which
makes the namespace, runs ``replay.run_with`` there and sends the
``CaseRun``s back. Where no namespace can be made (not root), it runs the
rewriting harness instead and says so (``LiveRun.rewritten``, and a note).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import signal
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Generic, TypeVar

from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import Secret

from verifier.forked import on_stop
from verifier.gatewayapi.addresses import Addressing, gateway_addresses
from verifier.gatewayapi.attach import DEFAULT_CONTROLLER
from verifier.gatewayapi.resources import Resources
from verifier.live.access_log import AccessLogReader
from verifier.live.bootstrap import (
    BackendPlan,
    BootstrapError,
    listener_secrets,
    plan_backends,
    sds_secret_names,
)
from verifier.live.client import LiveResponse, send
from verifier.live.echo import EchoBackend
from verifier.live.envoy_process import EnvoyError, EnvoyProcess
from verifier.live.harness import EDGE_IDENTITY, GATEWAY_ADDRESS, EmbeddedHarness, HarnessError
from verifier.live.netns import (
    NamespaceRunError,
    NamespaceUnavailable,
    namespace_id,
    run_in_namespace,
)
from verifier.live.pki import Pki
from verifier.live.replay import PARALLEL_REQUESTS, CaseRun, LiveCase, run_with
from verifier.live.served import (
    CORRELATION_HEADER,
    FLUSH_ARGS,
    ads_bootstrap,
    mesh_secrets,
    namespace_addresses,
    with_access_log,
)
from verifier.orphans import private_dir
from verifier.semantics.request import Request, normalize_headers
from verifier.xds.ads import TYPES, AdsServer, Answer, pack_snapshot
from verifier.xds.layout import SECRET_TYPE
from verifier.xds.snapshot import WILDCARD_ADDRESSES, Snapshot, bound_addresses

ACK_WAIT_S = 30.0  # hard bound on Envoy's answer to each served type
ACCESS_LOG_WAIT_S = 5.0  # hard bound on Envoy flushing the access-log lines of a batch
ACCESS_LOG_POLL_S = 0.025  # half Envoy's flush interval (served.FLUSH_ARGS)
_KINDS = dict(zip(TYPES, ("clusters", "endpoints", "listeners", "routes", "secrets"), strict=True))


class Rejected(HarnessError):
    """Envoy NACKed the served xDS: its own message, verbatim, is the error's."""


_ERRORS: dict[str, type[Exception]] = {
    "Rejected": Rejected,
    "EnvoyError": EnvoyError,
    "HarnessError": HarnessError,
    "BootstrapError": BootstrapError,
}


@dataclass(frozen=True)
class Prepared:
    """The pure half of a run, done in the parent before it forks: the served
    snapshot (with the access log) and the run's private directory."""

    workdir: Path
    served: Snapshot
    additions: tuple[str, ...]

    @property
    def access_log(self) -> Path:
        return self.workdir / "access.log"


def prepare(snap: Snapshot, *, keep_workdir: bool = False) -> Prepared:
    """Done before the fork so that every child inherits the codec's per-message-type
    caches filled by encoding this snapshot (and packing it, as the ADS server will)
    instead of rebuilding them: measured, that halves a run's CPU."""
    workdir = private_dir("edge-live-ns-", reap=not keep_workdir)
    served, additions = with_access_log(snap, workdir / "access.log")
    pack_snapshot(served)
    ads_bootstrap(("127.0.0.1", 1), ("127.0.0.1", 1))
    return Prepared(workdir, served, tuple(additions))


class NamespaceHarness(EmbeddedHarness):
    """``EmbeddedHarness``'s API (``send``, ``for_gateway``, ``to_outcome``,
    ``observe_mirrors``, ``settle``) on the unchanged snapshot; must be entered inside
    a network namespace of its own (``run_cases_isolated`` makes one).

    ``gateway_ports`` maps each (address, port) the xDS binds to itself; a
    Service that has endpoints gets one echo answering on its pod IPs and on
    the address its DNS name resolves to (127.1.x.y: the namespace's own).
    ``additions`` says what was added to the served xDS, ``timings`` what
    start-up cost (seconds).
    """

    rewritten = False
    extra_envoy_args: tuple[str, ...] = ()  # a subclass's additions to Envoy's command line

    def __init__(
        self,
        resources: Resources,
        snapshot: Snapshot,
        *,
        prepared: Prepared | None = None,
        **options: Any,
    ) -> None:
        """``options``: as ``EmbeddedHarness``'s (trust_domain, log_level, ...);
        ``prepared``: the served snapshot and its directory, made before the fork."""
        super().__init__(resources, snapshot, **options)
        self.prepared = prepared
        self.ads: AdsServer | None = None
        self.additions: list[str] = []
        self.access_log: Path | None = None
        self._log: AccessLogReader | None = None
        self._tick: asyncio.Future[None] | None = None
        self.timings: dict[str, float] = {}
        self._ids = itertools.count(1)
        self._claimed: set[tuple[str, int]] = set()
        self._acked_at: dict[tuple[str, str], float] = {}
        self._service_ips = (f"127.1.{i // 250}.{i % 250 + 1}" for i in itertools.count())

    async def __aenter__(self) -> NamespaceHarness:
        await super().__aenter__()
        return self

    async def start(self) -> NamespaceHarness:
        loop = asyncio.get_running_loop()
        began = loop.time()
        prepared = self.prepared or prepare(self.snapshot, keep_workdir=self.keep_workdir)
        self.workdir = prepared.workdir
        listener_secrets(self.snapshot)  # a redacted key cannot be served: say so first
        plans, self.notes = plan_backends(self.res, self.snapshot)
        mesh = any(tls for p in plans.values() for _, tls in p.ports.values())
        pki = Pki(self.workdir / "pki") if mesh else None
        await asyncio.gather(self.dns.start(), pki.create() if pki else asyncio.sleep(0))
        started = await asyncio.gather(*(self._start_pods(p, pki) for p in plans.values()))
        for plan, backend in zip(plans.values(), started, strict=True):
            self._register(plan, backend)
        await self._dns_answers()
        extra = await self._mesh_secrets(pki)
        served, self.access_log = prepared.served, prepared.access_log
        self._log = AccessLogReader(prepared.access_log)
        self.additions = list(prepared.additions)
        self.ads = AdsServer(served, extra_secrets=extra, on_answer=self._answered)
        ads_at = await self.ads.start("127.0.0.1", 0)
        self.timings["harness_start"] = loop.time() - began
        spawned = loop.time()
        self.envoy = EnvoyProcess(
            ads_bootstrap(ads_at, (self.dns.host, self.dns.port)),
            self.workdir,
            log_level=self.log_level,
            listeners=[li.name for li in served.listeners],
            extra_args=(*FLUSH_ARGS, *self.extra_envoy_args),
        )
        await self.envoy.start()
        last = await self._every_type_acked(served, bool(extra))
        self.timings["envoy_to_ack"] = last - spawned
        self.gateway_ports = {bound: bound for bound in bound_addresses(self.snapshot)}
        return self

    def _register(self, plan: BackendPlan, backend: EchoBackend | None) -> None:
        """The Service's address in DNS, and its echo (if it has ready pods) by pod."""
        self.service_ips[plan.key] = backend.ip if backend else next(self._service_ips)
        for name in plan.dns_names:
            self.dns.add(name, self.service_ips[plan.key])
        if backend is not None:
            self.backends[plan.key] = backend
            self.pods[(plan.namespace, backend.pod)] = plan.key

    async def _start_pods(self, plan: BackendPlan, pki: Pki | None) -> EchoBackend | None:
        """One echo for the Service, on the address its name resolves to (when a
        cluster dials the name) and on every pod IP a cluster dials, at the very
        ports the xDS dials."""
        if not plan.has_endpoints:
            return None  # no ready pod: the name resolves, nothing answers (503), as in a cluster
        ips = [next(self._service_ips)] if plan.dns_names else []
        ips += list(dict.fromkeys(addr for _, addr, _ in plan.ip_endpoints))
        ports = await self._echo_ports(plan, pki)
        taken = {(ip, p.port) for ip in ips for p in ports} & self._claimed
        if taken:
            raise HarnessError(
                f"{plan.namespace}/{plan.service}: {sorted(taken)} already answer for another "
                "Service (one pod IP behind two Services on one port)"
            )
        self._claimed |= {(ip, p.port) for ip in ips for p in ports}
        backend = EchoBackend(
            plan.namespace, plan.service, ips[0], ports, also=ips[1:], reuse_port=True
        )
        await backend.start()
        moved = {p: b for p, b in backend.bound.items() if p != b}
        if moved:
            await backend.stop()
            raise HarnessError(f"{plan.namespace}/{plan.service}: could not bind ports {moved}")
        return backend

    async def _dns_answers(self) -> None:
        """Every name resolves to what the table says before Envoy asks (c-ares gives
        up on a silent server, and a STRICT_DNS cluster would then have no host)."""
        for name, ip in sorted(self.dns.table.items()):
            got = await self.dns.resolve(name)
            if got != ip:
                raise HarnessError(f"the run's DNS server answered {got!r} for {name}, not {ip}")

    async def _mesh_secrets(self, pki: Pki | None) -> list[Secret]:
        identities, roots = sds_secret_names(self.snapshot)
        if pki is None or not (identities or roots):
            return []
        cert, key = await pki.issue("edge", f"spiffe://{self.trust_domain}/{EDGE_IDENTITY}")
        return mesh_secrets(
            self.snapshot, cert.read_text(), key.read_text(), pki.ca_cert.read_text()
        )

    def _answered(self, answer: Answer) -> None:
        self._acked_at.setdefault(
            (answer.type_url, answer.version), asyncio.get_running_loop().time()
        )

    async def _every_type_acked(self, served: Snapshot, mesh: bool) -> float:
        """Wait for Envoy's answer to every type served; a NACK is Envoy rejecting the
        checked xDS, reported with its own message. Returns when the last ACK came."""
        assert self.ads is not None
        wanted = [u for u in TYPES if getattr(served, _KINDS[u]) and u != SECRET_TYPE]
        if mesh or any(li for li in served.listeners if "sds_config" in str(li)):
            wanted.append(SECRET_TYPE)  # Envoy asks only for secrets something names
        answers = [
            await asyncio.wait_for(self.ads.wait_answer(u, self.ads.versions[u]), ACK_WAIT_S)
            for u in wanted
        ]
        rejected = [a for a in answers if not a.accepted]
        if rejected:
            raise Rejected(
                "Envoy rejected the checked xDS: "
                + "; ".join(f"{_KINDS[a.type_url]} {a.version}: {a.message}" for a in rejected)
            )
        return max(self._acked_at[(a.type_url, a.version)] for a in answers)

    # --- traffic ------------------------------------------------------------------------------

    def target(self, address: str, port: int) -> tuple[str, int] | None:
        """The listener's own address; a wildcard listener is reached at the request's
        destination (on the namespace's loopback, like every Gateway address). With a
        destination and a listener on its port, the connection goes there as written
        and the namespace's kernel picks the listener, as for any client: whether
        ``[::]`` takes IPv4 (``ipv4_compat``) is Envoy's to show, not ours to guess."""
        if address and any(p == port for _a, p in self.gateway_ports):
            return address, port
        found = super().target(address, port)
        if found is None:
            return None
        ip, bound_port = found
        if ip in WILDCARD_ADDRESSES:
            ip = address or (GATEWAY_ADDRESS if ip != "::" else "::1")
        return ip, bound_port

    async def _transmit(self, req: Request, target: tuple[str, int], **how: Any) -> LiveResponse:
        """With our correlation header for the access log (stripped from what the
        backend reports, absent from ``resp.request``); raises once Envoy has ended."""
        await self.alive()
        tag = f"{os.getpid()}-{next(self._ids)}"
        if self._log is not None:
            self._log.expect(tag)
        pairs = [(k, v) for k, vs in req.headers for v in vs] + [(CORRELATION_HEADER, tag)]
        resp = await send(replace(req, headers=normalize_headers(pairs)), target, **how)
        return replace(resp, request=req, correlation=tag)

    async def attribute(self, responses: Sequence[LiveResponse]) -> list[LiveResponse]:
        """Each answer with Envoy's access-log line for it (route, cluster, flags); an
        answer whose line did not come within ``ACCESS_LOG_WAIT_S`` keeps ``access``
        None (unattributed), and an answer that never reached Envoy's HTTP layer
        (status 0) has none to wait for."""
        await self.alive()
        log = self._log
        assert log is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ACCESS_LOG_WAIT_S
        wanted = {r.correlation for r in responses if r.correlation and r.status}
        log.poll()
        while not log.has(wanted) and loop.time() < deadline:
            await self._next_poll()
        await self.alive()
        logged = log.claim({r.correlation for r in responses if r.correlation})
        return [replace(r, access=logged.get(r.correlation)) for r in responses]

    async def _next_poll(self) -> None:
        """Return after the log's next read: one read per tick for every waiter (cases
        waiting each on its own read cost a loaded machine more than the wait)."""
        if self._tick is None or self._tick.done():
            self._tick = asyncio.ensure_future(self._poll_later())
        await asyncio.shield(self._tick)

    async def _poll_later(self) -> None:
        await asyncio.sleep(ACCESS_LOG_POLL_S)
        if self._log is not None:
            self._log.poll()

    async def alive(self) -> None:
        """Raise if Envoy has ended: answers after that are not Envoy's."""
        if self.envoy is not None:
            await self.envoy.ensure_running()

    def kill_now(self) -> None:
        """For a stopped run (SIGTERM): no event loop to wait on, just end things."""
        pid = self.envoy.pid if self.envoy is not None else None
        if pid is not None:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.workdir is not None and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    async def stop(self) -> None:
        await super().stop()
        if self.ads is not None:
            await self.ads.stop()


# --- the run --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timings:
    """What one isolated run cost, in seconds (``requests``: samples sent)."""

    namespace_setup: float  # unshare + loopback up + addresses added
    harness_start: float  # DNS, PKI, echo backends, ADS server
    envoy_to_ack: float  # Envoy spawned -> every served type ACKed
    cases: float  # every case sent, answered, attributed
    requests: int


@dataclass(frozen=True)
class LiveRun:
    """A live run's answers and how they were had.

    ``rewritten``: True when no namespace could be made and the rewriting harness
    answered (every report should say so); ``additions``: what was added to the
    served xDS (the access log); ``namespace``: the network namespace's inode.
    """

    runs: tuple[CaseRun, ...]
    rewritten: bool
    notes: tuple[str, ...] = ()
    additions: tuple[str, ...] = ()
    timings: Timings | None = None
    namespace: int | None = None


Hook = Callable[[NamespaceHarness], Awaitable[None]]


T = TypeVar("T")


@dataclass(frozen=True)
class Isolated(Generic[T]):
    """What ``work`` returned inside a harness, and how the harness was had."""

    value: T
    rewritten: bool
    notes: tuple[str, ...] = ()
    additions: tuple[str, ...] = ()
    harness_start: float = 0.0
    envoy_to_ack: float = 0.0
    namespace_setup: float = 0.0
    namespace: int | None = None


async def with_isolated_harness(
    res: Resources,
    snap: Snapshot,
    work: Callable[[EmbeddedHarness], Awaitable[T]],
    *,
    destinations: Iterable[str] = (),
    fallback: bool = True,
    on_ready: Hook | None = None,
    **options: Any,
) -> Isolated[T]:
    """``await work(harness)`` with Envoy running exactly ``snap``, in a namespace of
    its own; ``work``'s value must pickle (it comes back from the namespace's process).

    ``destinations``: addresses requests are sent to besides the Gateways'.
    ``fallback``: where no namespace can be made, run ``work`` on the rewriting
    harness and mark the result ``rewritten`` (else raise ``NamespaceUnavailable``).
    ``on_ready`` runs in the namespace once Envoy has ACKed everything (tests use it).
    ``options`` are ``EmbeddedHarness``'s (addressing, trust_domain, ...).
    Errors inside the namespace come back as the class raised there
    (``EnvoyError``, ``HarnessError``, ``BootstrapError``) or ``NamespaceRunError``.
    """
    addressing = options.get("addressing") or Addressing()
    gateways = gateway_addresses(res, DEFAULT_CONTROLLER, addressing)
    wanted = [*gateways.values(), GATEWAY_ADDRESS, *destinations]
    prepared = prepare(snap)

    async def inside() -> Isolated[T]:
        harness = NamespaceHarness(res, snap, prepared=prepared, **options)
        async with harness:
            with on_stop(harness.kill_now):
                if on_ready is not None:
                    await on_ready(harness)
                value = await work(harness)
        return Isolated(
            value,
            False,
            tuple(harness.notes),
            tuple(harness.additions),
            harness.timings["harness_start"],
            harness.timings["envoy_to_ack"],
            namespace=namespace_id(),
        )

    try:
        done = await run_in_namespace(inside, namespace_addresses(snap, wanted))
    except NamespaceUnavailable as exc:
        shutil.rmtree(prepared.workdir, ignore_errors=True)
        if not fallback:
            raise
        why = str(exc.strerror or exc)
        note = f"rewritten: {why}; Envoy ran a rewritten copy of the xDS on loopback"
        async with EmbeddedHarness(res, snap, **options) as harness:
            value = await work(harness)
        return Isolated(value, True, (note, *harness.notes))
    except NamespaceRunError as exc:
        shutil.rmtree(prepared.workdir, ignore_errors=True)  # a child that died could not
        cls = _ERRORS.get(exc.kind)
        if cls is not None:
            raise cls(str(exc)) from None
        raise
    return replace(done.value, namespace_setup=done.setup_seconds)


async def run_cases_isolated_async(
    res: Resources,
    snap: Snapshot,
    cases: Sequence[LiveCase],
    *,
    parallel: int = PARALLEL_REQUESTS,
    fallback: bool = True,
    on_ready: Hook | None = None,
    addressing: Addressing | None = None,
) -> LiveRun:
    """Every case through Envoy running exactly ``snap`` (``with_isolated_harness``)."""

    async def work(harness: EmbeddedHarness) -> tuple[tuple[CaseRun, ...], float, int]:
        loop = asyncio.get_running_loop()
        began = loop.time()
        runs = await run_with(harness, cases, parallel)
        return tuple(runs), loop.time() - began, sum(len(r.responses) for r in runs)

    done = await with_isolated_harness(
        res,
        snap,
        work,
        destinations=[c.case.request.address for c in cases],
        fallback=fallback,
        on_ready=on_ready,
        addressing=addressing,
    )
    runs, spent, requests = done.value
    timings = Timings(done.namespace_setup, done.harness_start, done.envoy_to_ack, spent, requests)
    return LiveRun(
        runs,
        done.rewritten,
        done.notes,
        done.additions,
        None if done.rewritten else timings,
        done.namespace,
    )


def run_cases_isolated(
    res: Resources, snap: Snapshot, cases: Sequence[LiveCase], **options: object
) -> LiveRun:
    """``run_cases_isolated_async`` with an event loop of its own (not from async code)."""
    return asyncio.run(run_cases_isolated_async(res, snap, cases, **options))  # type: ignore[arg-type]
