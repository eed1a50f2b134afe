"""A mesh on one machine: the input's pods, their real sidecars, kube-proxy, mTLS identities.

What ``MeshWorld`` stands up, inside a run's own network namespace (the node:
``verifier.live.netns``), as a cluster would run the input (``mesh_pods``):

- every pod in a network namespace of its own (``verifier.live.podnet``), with an
  echo application (``verifier.live.echo``, answering as the pod) on its ports;
- for every pod with a sidecar, a real Envoy 1.40 running in the proxy's group, fed
  its workload's xDS (``translate --proxy``, or any sidecar config) over ADS, plus
  what the mesh agent serves beside it: the pod's SPIFFE certificate and the mesh CA
  under the secret names the xDS asks for; then the pod's capture (nftables);
- kube-proxy's DNAT of every ClusterIP to ready endpoints, on the node, so traffic
  that is not captured (or that the sidecar passes through) still reaches a pod;
- the cluster DNS (Service name -> ClusterIP) for the sidecars' STRICT_DNS clusters.

The one addition to the served xDS: an access log on every HTTP connection manager
and ``tcp_proxy`` naming the filter chain, route and cluster Envoy chose, keyed by
the client connection's source address (``send`` picks a source port per request),
so a decision is Envoy's own word, not inferred from the answer.

``send`` makes one HTTP/1.1 request from a workload's (first) pod, as its
application would: to the request's address and port (a Service's ClusterIP),
byte for byte, on a connection of its own (``verifier.live.wire``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifier.gatewayapi.resources import Resources
from verifier.live.client import LiveResponse
from verifier.live.dns import DnsServer
from verifier.live.echo import EchoBackend, EchoPort
from verifier.live.envoy_process import EnvoyError, EnvoyProcess
from verifier.live.mesh_pods import MeshPod, capture_scope, mesh_pods, service_names, service_rules
from verifier.live.pki import Pki
from verifier.live.podnet import GATEWAY, PROXY_GID, Node, Pod
from verifier.live.served import (
    CORRELATION_HEADER,
    FLUSH_ARGS,
    HCM,
    TCP_PROXY,
    ads_bootstrap,
    mesh_secrets,
    with_access_log,
)
from verifier.live.wire import parse_response, read_response, wire_request
from verifier.orphans import private_dir
from verifier.semantics.request import Request
from verifier.xds.ads import AdsServer
from verifier.xds.snapshot import Snapshot

LOG_FIELDS = {
    "id": f"%REQ({CORRELATION_HEADER.upper()})%",  # a request's own id, when it set one
    "source": "%DOWNSTREAM_REMOTE_ADDRESS%",
    "chain": "%FILTER_CHAIN_NAME%",
    "route": "%ROUTE_NAME%",
    "cluster": "%UPSTREAM_CLUSTER%",
    "code": "%RESPONSE_CODE%",
    "flags": "%RESPONSE_FLAGS%",
}
FIRST_SOURCE_PORT = 20000  # a request's source port names it in the access log
REQUEST_TIMEOUT = 5.0
# A hard bound on a sidecar binding its listeners: reached only when it never does (a
# loaded 2-core machine starting 40 sidecars at once took 13 s; 20 s was too close).
READY_TIMEOUT = 60.0
ADMIN_SOCKETS = "admin"  # the sidecars' admin sockets, in the world's directory


class MeshWorldError(RuntimeError):
    """The mesh could not be stood up (not a verdict on the configuration)."""


class SidecarRefused(EnvoyError):
    """A sidecar's Envoy NACKed its xDS: a verdict on the configuration."""


@dataclass(frozen=True)
class Identities:
    """The mesh CA and each workload identity's (certificate, key), all PEM."""

    ca: str
    issued: Mapping[str, tuple[str, str]]  # SPIFFE ID -> (certificate, key)

    @classmethod
    async def issue(cls, directory: Path, wanted: Iterable[str]) -> Identities:
        """A new mesh CA in ``directory`` and a certificate for each SPIFFE ID."""
        pki = await Pki(directory).create()
        issued = {}
        for i, identity in enumerate(sorted(set(wanted))):  # one Pki issues serially
            cert, key = await pki.issue(f"id{i}", identity)
            issued[identity] = (cert.read_text(), key.read_text())
        return cls(pki.ca_cert.read_text(), issued)


@dataclass(frozen=True)
class LogLine:
    """The sidecar's own word on one connection (``-`` fields read as empty)."""

    chain: str
    route: str
    cluster: str
    code: int
    flags: str


def _line(doc: Mapping[str, Any]) -> LogLine:
    got = {k: "" if doc.get(k) in (None, "-") else str(doc[k]) for k in LOG_FIELDS}
    code = got["code"]
    return LogLine(
        got["chain"], got["route"], got["cluster"], int(code) if code.isdigit() else 0, got["flags"]
    )


@dataclass
class Sidecar:
    pod: MeshPod
    net: Pod
    envoy: EnvoyProcess
    ads: AdsServer
    log: Path
    start_seconds: float = 0.0


async def _all(steps: Iterable[Awaitable[object]]) -> None:
    """Every step to its end, then the first failure raised: a step left running
    after another failed could start an Envoy after ``stop`` has been and gone."""
    done = await asyncio.gather(*steps, return_exceptions=True)
    failed = [d for d in done if isinstance(d, BaseException)]
    if failed:
        raise failed[0]


def _as_proxy(enter: Callable[[], None]) -> Callable[[], None]:
    """In the pod, in the proxy's group only (what its capture lets through)."""

    def become() -> None:
        enter()
        os.setgroups([])
        os.setgid(PROXY_GID)

    return become


@dataclass
class MeshWorld:
    """The input's pods and sidecars, up (``start``) until ``stop``; module docstring.

    ``sidecars``: each (namespace, workload) with a sidecar -> its xDS; every pod with a
    sidecar needs one. ``identities``: the CA and a certificate for each pod's SPIFFE ID.
    ``controls``: the workloads whose pods' echoes also serve Istio's echo control service
    (``ForwardEcho``: the in-mesh client), on a port of their own (``control_ports``;
    ``control_port`` when not 0, as a cluster's echo pods all serve it on one), their
    forwarded requests' names resolved through the world's DNS, as a pod's are.
    ``senders``: when given, only the pods that answer on some port (backends) and those
    of these workloads (the clients that send) are started: a world asked from two
    clients need not stand up every other client's pod and sidecar.
    ``timings``: seconds each stage of ``start`` took (pods, kube-proxy and DNS, echoes,
    sidecars). ``additions``: what was added to each sidecar's xDS (its access log).
    """

    res: Resources
    sidecars: Mapping[tuple[str, str], Snapshot]
    identities: Identities
    registry: frozenset[tuple[str, str]] = frozenset()
    trust_domain: str = "cluster.local"
    controls: frozenset[tuple[str, str]] = frozenset()
    control_port: int = 0  # where the controls' echoes serve it (0: a free port each)
    senders: frozenset[tuple[str, str]] | None = None
    pods: list[MeshPod] = field(default_factory=list)
    control_ports: dict[str, int] = field(default_factory=dict)  # pod name -> its control port
    timings: dict[str, float] = field(default_factory=dict)
    additions: dict[str, list[str]] = field(default_factory=dict)  # pod name -> its lines
    node: Node | None = None
    nets: dict[str, Pod] = field(default_factory=dict)  # pod name -> its namespace
    running: dict[str, Sidecar] = field(default_factory=dict)  # pod name -> its sidecar
    echoes: list[EchoBackend] = field(default_factory=list)
    dns: DnsServer | None = None
    workdir: Path | None = None
    # Every Envoy and pod namespace it ever made, kept after ``stop``: what a check
    # that nothing outlived the world looks for.
    started: list[int] = field(default_factory=list)
    spaces: list[int] = field(default_factory=list)
    _ports: Any = field(default_factory=lambda: itertools.count(FIRST_SOURCE_PORT))

    async def __aenter__(self) -> MeshWorld:
        try:
            return await self.start()
        except BaseException:
            await self.stop()
            raise

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> MeshWorld:
        self.pods = [
            p
            for p in mesh_pods(self.res)
            if self.senders is None or p.ports or p.client in self.senders | self.controls
        ]
        missing = sorted({p.client for p in self.pods if p.sidecar} - set(self.sidecars))
        if missing:
            raise MeshWorldError(f"no sidecar xDS for {', '.join('/'.join(c) for c in missing)}")
        self.workdir = private_dir("edge-verify-mesh-", room=len(f"/{ADMIN_SOCKETS}/99999.sock"))
        (self.workdir / ADMIN_SOCKETS).mkdir()
        self.node = Node()
        self.spaces.append(self.node.inode())
        began = time.perf_counter()
        nets = await self.node.add_pods([(p.name, p.ip) for p in self.pods])
        self.spaces += [os.fstat(n.fd).st_ino for n in nets]
        self.nets = {p.name: n for p, n in zip(self.pods, nets, strict=True)}
        self.timings["pods"] = (at := time.perf_counter()) - began
        await self.node.kube_proxy(service_rules(self.res))
        self.dns = await DnsServer(service_names(self.res), host=GATEWAY).start()
        self.timings["kube_proxy_dns"] = (began := time.perf_counter()) - at
        await _all(self._echo(p) for p in self.pods if p.ports or p.client in self.controls)
        self.timings["echoes"] = (at := time.perf_counter()) - began
        await _all(self._sidecar(p) for p in self.pods if p.sidecar)
        await _all(s.net.capture(self._scope(s.pod)) for s in self.running.values())
        self.timings["sidecars"] = time.perf_counter() - at
        return self

    def _scope(self, pod: MeshPod) -> list[str] | None:
        return None if pod.captures_all else capture_scope(self.res, self.registry, pod)

    async def _echo(self, pod: MeshPod) -> None:
        net = self.nets[pod.name]
        echo = EchoBackend(
            pod.namespace,
            pod.workload,
            "0.0.0.0",
            [EchoPort(p) for p in pod.ports],
            pod.name,
            listen=net.listen,
            sockets=net.socket,
            control=self.control_port if pod.client in self.controls else None,
            nameserver=(GATEWAY, self.dns.port) if self.dns is not None else None,
        )
        self.echoes.append(echo)
        await echo.start()
        if echo.control_port is not None:
            self.control_ports[pod.name] = echo.control_port

    async def _sidecar(self, pod: MeshPod) -> Sidecar:
        assert self.workdir is not None and self.dns is not None
        snap = self.sidecars[pod.client]
        workdir = self.workdir / f"sidecar-{pod.name}"
        workdir.mkdir()
        log = workdir / "access.log"
        served, added = with_access_log(snap, log, fields=LOG_FIELDS, filters=(HCM, TCP_PROXY))
        self.additions[pod.name] = added
        identity = pod.identity(self.trust_domain)
        if identity not in self.identities.issued:
            raise MeshWorldError(f"no certificate for {identity} (pod {pod.name})")
        cert, key = self.identities.issued[identity]
        secrets = mesh_secrets(snap, cert, key, self.identities.ca, listeners=True)
        ads = AdsServer(served, extra_secrets=secrets)
        at = await ads.start(GATEWAY, 0)
        boot = ads_bootstrap(at, (GATEWAY, self.dns.port))
        # Named by the pod's place, not its name: a workload's name may be 253 bytes,
        # and a socket's whole path must fit in 107.
        admin = self.workdir / ADMIN_SOCKETS / f"{self.pods.index(pod)}.sock"
        boot["admin"] = {"address": {"pipe": {"path": str(admin)}}}
        net = self.nets[pod.name]
        envoy = EnvoyProcess(
            boot, workdir, listeners=[], extra_args=FLUSH_ARGS, preexec=_as_proxy(net.preexec())
        )
        sidecar = Sidecar(pod, net, envoy, ads, log)
        self.running[pod.name] = sidecar  # stopped with the rest if what follows fails
        started = time.perf_counter()
        try:
            await envoy.start()
        finally:
            if envoy.pid is not None:
                self.started.append(envoy.pid)
        await self._serving(sidecar, snap)
        sidecar.start_seconds = time.perf_counter() - started
        return sidecar

    async def _serving(self, sidecar: Sidecar, snap: Snapshot) -> None:
        """Every listener bound in the pod, and no configuration refused."""
        ports = sorted(
            {
                sock.port_value
                for li in snap.listeners
                if li.address is not None
                and (sock := li.address.socket_address) is not None
                and sock.port_value is not None
                and li.bind_to_port is not False
            }
        )
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            if sidecar.ads.nacks:  # a refused listener never binds: say so at once
                refused = "; ".join(a.message for a in sidecar.ads.nacks)
                raise SidecarRefused(f"sidecar of {sidecar.pod.name} refused its xDS: {refused}")
            if all(sidecar.net.listening(p) for p in ports):
                return
            if time.monotonic() > deadline:
                raise MeshWorldError(f"sidecar of {sidecar.pod.name}: nothing listens on {ports}")
            await asyncio.sleep(0.02)

    async def sidecars_running(self) -> None:
        """Raise (``EnvoyError``) if a sidecar has ended: the mesh is then not the one
        the xDS describes, and the answers after it are not the sidecars' to judge."""
        for name, sidecar in list(self.running.items()):
            await sidecar.envoy.ensure_running(f"the sidecar of pod {name}")

    def pod_of(self, client: tuple[str, str]) -> MeshPod:
        return next(p for p in self.pods if p.client == client)

    async def send(self, client: tuple[str, str], request: Request) -> tuple[str, LiveResponse]:
        """One request from the client's pod; (its source address, the answer)."""
        pod = self.pod_of(client)
        port = next(self._ports)
        source = f"{pod.ip}:{port}"
        try:
            reader, writer = await self.nets[pod.name].connect(
                request.address, request.port, port, REQUEST_TIMEOUT
            )
        except (OSError, TimeoutError) as exc:
            return source, LiveResponse(request, 0, error=f"{type(exc).__name__}: {exc}")
        try:
            writer.write(wire_request(request))
            data = await asyncio.wait_for(read_response(reader), REQUEST_TIMEOUT)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
            return source, LiveResponse(request, 0, error=f"{type(exc).__name__}: {exc}")
        finally:
            writer.close()
        return source, parse_response(request, data)

    def access_log(self, client: tuple[str, str], key: str = "source") -> dict[str, LogLine]:
        """The client sidecar's lines so far, by source address (``key`` "id": those
        that carry a request id, by that id; a connection passed through, ``tcp_proxy``,
        has none)."""
        sidecar = self.running.get(self.pod_of(client).name)
        if sidecar is None or not sidecar.log.exists():
            return {}
        out = {}
        for text in sidecar.log.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                doc = json.loads(text)
            except ValueError:
                continue  # a line still being written
            if doc.get(key) not in (None, "-", ""):
                out[str(doc[key])] = _line(doc)
        return out

    async def logged(
        self, client: tuple[str, str], sources: Collection[str], limit: float = 2.0
    ) -> dict[str, LogLine]:
        """The lines of ``sources``, waiting for them (flushed every 50 ms; a
        tcp_proxy's when its connection closes) up to ``limit`` seconds."""
        deadline = time.monotonic() + limit
        while True:
            found = self.access_log(client)
            if all(s in found for s in sources) or time.monotonic() > deadline:
                return found
            await asyncio.sleep(0.05)

    def envoy_pids(self) -> list[int]:
        """Every sidecar Envoy started, running or not."""
        return list(self.started)

    def namespaces(self) -> list[int]:
        """The node's namespace and every pod's, by inode, made or not yet let go of."""
        return list(self.spaces)

    async def stop(self) -> None:
        sidecars, self.running = list(self.running.values()), {}
        await asyncio.gather(*(s.envoy.stop() for s in sidecars), return_exceptions=True)
        await asyncio.gather(*(s.ads.stop() for s in sidecars), return_exceptions=True)
        echoes, self.echoes = self.echoes, []
        await asyncio.gather(*(e.stop() for e in echoes), return_exceptions=True)
        if self.dns is not None:
            await self.dns.stop()
            self.dns = None
        if self.node is not None:
            self.node.close()
            self.node = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
