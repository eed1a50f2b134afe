"""Mesh cases, live: each sent from its client pod by the pod's own echo, through its sidecar.

A mesh request has to leave from the client pod itself, so that the pod's capture
hands it to the sidecar, as a cluster's would. ``MeshTarget`` stands up the input's
mesh (``mesh_probe.MeshWorld``: a network namespace per pod, a real sidecar per
meshed pod fed its workload's ``translate --proxy`` xDS unrewritten, kube-proxy's
nftables DNAT, mTLS identities) with Istio's echo control service on every client
pod's echo, and sends each request as the upstream mesh suite does: a
``ForwardEcho`` to the client pod's echo, whose answer lines (Istio's ``output``)
are read back into a ``LiveResponse``. It offers the edge harness's interface to the
live runner (``send``, ``to_outcome``, ``observe_mirrors``, ``settle``), so a mesh
case is judged by the same code as an edge case.

- **Where to.** The URL names the Service's ClusterIP and port, the ``Host`` header
  the case's host (by default the Service's name). The mesh's routing never looks at
  the name (MeshClusterIPMatching): the address is what the client dials either way.
  (A name works too: the pods' echoes resolve it through the mesh's DNS, as a
  cluster's mesh is driven, ``mesh_cluster``.)
- **Which route served it.** Each request carries our request id
  (``served.CORRELATION_HEADER``); the client's sidecar logs it with the filter
  chain, route and cluster it chose (the one addition to the served xDS), read as
  the edge's log is (``access_log.AccessLogReader``, one per sidecar). A request
  with no line of its own went by no sidecar route: not captured, or passed through
  (``tcp_proxy`` has no request to log), so kube-proxy delivered it
  (``mesh_runner``: ``no-route``).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import signal
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import replace
from pathlib import Path

from grpclib.client import Channel
from grpclib.exceptions import GRPCError, StreamTerminatedError

from verifier.gatewayapi.resources import Resources
from verifier.live.access_log import AccessLogReader
from verifier.live.client import AccessEntry, LiveResponse
from verifier.live.dns import service_fqdn
from verifier.live.echoproto.proto import EchoTestServiceStub, ForwardEchoRequest, Header
from verifier.live.harness import answer_outcome
from verifier.live.mesh_pods import MeshPod, service_endpoints
from verifier.live.mesh_probe import MeshWorld
from verifier.live.served import CORRELATION_HEADER
from verifier.semantics.request import Backend, Outcome, Request

LOG_WAIT_S = 5.0  # for a sidecar to flush a request's line (every 50 ms)
HTTP1_ONLY = "the in-mesh client (ForwardEcho) sends plain HTTP/1.1 only"


# What making the pods' namespaces, links and nftables rules asks of the kernel.
CAPABILITIES = (("CAP_SYS_ADMIN", 21), ("CAP_NET_ADMIN", 12))


def _effective(bit: int) -> bool:
    """Whether this process holds capability ``bit`` (/proc/self/status ``CapEff``);
    True where that cannot be read, so unshare's own refusal still speaks."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return True
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> bit & 1)
    return True


def mesh_unavailable() -> str | None:
    """Why a live mesh cannot run here, or None: every pod is a network namespace of
    its own and capture and kube-proxy are nftables rules (docs/mesh.md)."""
    if os.geteuid() != 0:
        return (
            "a live mesh needs root: each pod runs in a network namespace of its own, "
            "with nftables rules for kube-proxy and the sidecar's capture"
        )
    lacking = [name for name, bit in CAPABILITIES if not _effective(bit)]
    if lacking:  # root in an unprivileged container: unshare would refuse every pod
        return (
            f"a live mesh needs {' and '.join(lacking)}, which this root lacks (an "
            "unprivileged container?): each pod runs in a network namespace of its own, "
            "with nftables rules for kube-proxy and the sidecar's capture"
        )
    if shutil.which("nft") is None:
        return (
            "a live mesh needs nft (nftables) for kube-proxy's DNAT and the sidecars' "
            "capture: apt-get install nftables (README, Install)"
        )
    return None


class MeshAnswers:
    """What reads a mesh answer, whoever runs the mesh: the answering pod named by the
    Service the models named (``named``), and the runner's interface but ``send``.

    ``pods``: every pod that may answer, by (namespace, name); ``predicted``: the
    backends the models allow for a request, so the pod that answered is named by the
    Service the models named (a pod behind two Services is the same pod to both).
    ``logs``: the mesh writes our access log (attribution reads it); ``acked``: every
    sidecar had ACKed its xDS before the first case (a case the Envoy model says is
    unmet cannot converge, so it is sent once)."""

    logs = True
    acked = True

    def __init__(self, res: Resources, pods: Mapping[tuple[str, str], MeshPod]) -> None:
        self.res = res
        self.endpoints = service_endpoints(res)
        self.by_name = dict(pods)
        self.predicted: dict[Request, tuple[Backend, ...]] = {}
        self.services = {
            (svc.cluster_ip, port.port): svc.meta.key
            for svc in res.services.values()
            if svc.cluster_ip
            for port in svc.ports
        }

    def url(self, request: Request) -> str:
        """The Service's cluster DNS name, port and path, as the pod's application calls
        it (the pod resolves the name: the cluster's DNS, or the embedded mesh's); an
        address no Service holds is dialled as it is."""
        ns, name = self.services.get((request.address, request.port), ("", ""))
        host = service_fqdn(ns, name) if name else request.address
        return f"http://{host}:{request.port}{request.path}"

    def observe_mirrors(self, resp: LiveResponse) -> LiveResponse:
        return resp  # mirrors are not observed in the mesh (the runner skips those cases)

    async def settle(self) -> None:
        return None

    def to_outcome(self, resp: LiveResponse) -> Outcome:
        """The shared Outcome; ``backends`` the Service the models named whose ready
        endpoints hold the pod that answered (else the pod's workload, which no model
        names: a wrong pod shows as a wrong backend)."""
        return self.named(resp, self.predicted.get(resp.request, ()))

    def named(self, resp: LiveResponse, predicted: Sequence[Backend]) -> Outcome:
        """``to_outcome`` with the answering pod named as ``predicted`` names it: the
        models may name one pod's Service differently (a pod behind two Services), and
        each is held to the pod, not to the name."""
        echo = resp.echo
        if echo is None or not 200 <= resp.status < 300:
            return answer_outcome(resp)
        pod = self.by_name.get((str(echo.get("namespace")), str(echo.get("pod"))))
        if pod is None and not echo.get("namespace"):  # an echo that does not say its own:
            named = [p for (_, name), p in self.by_name.items() if name == echo.get("pod")]
            pod = named[0] if len(named) == 1 else None  # the one pod of that name
        if pod is None:
            return answer_outcome(resp, (), (f"echo pod {echo.get('pod')!r} is not one of ours",))
        for b in predicted:
            for ns, name, port in ((b.namespace, b.name, b.port), *b.aliases):
                if pod.ip in self.endpoints.get((ns, name), set()):
                    return answer_outcome(resp, (Backend(ns, name, port),))
        name = pod.workload or pod.name
        return answer_outcome(resp, (Backend(pod.namespace, name, resp.request.port),))

    async def attribute(
        self, responses: Sequence[LiveResponse], *, logged: bool = True
    ) -> list[LiveResponse]:
        """No log of ours: the answers as they are (``MeshTarget`` reads its sidecars')."""
        return list(responses)


def forward_headers(request: Request) -> list[Header]:
    """The request's headers as ``ForwardEcho`` carries them: ``Host`` first (the
    authority the echo sends), then the others in order."""
    headers = [Header("Host", request.host)] if request.host else []
    headers += [Header(k, v) for k, vs in request.headers for v in vs if k.lower() != "host"]
    return headers


class MeshTarget(MeshAnswers):
    """A started ``MeshWorld`` as the live runner's target (module docstring)."""

    def __init__(self, world: MeshWorld) -> None:
        super().__init__(world.res, {(p.namespace, p.name): p for p in world.pods})
        self.world = world
        self._logs: dict[tuple[str, str], AccessLogReader] = {}  # per client sidecar
        self._ids = itertools.count(1)
        self._channels: dict[str, Channel] = {}

    def close(self) -> None:
        """Close the control channels (before the world stops)."""
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()

    # --- the runner's interface ---------------------------------------------------------------

    async def send(
        self,
        request: Request,
        *,
        protocol: str = "http1",
        websocket_messages: Sequence[str] = (),
        timeout: float = 10.0,
    ) -> LiveResponse:
        """One request from the client's pod, by its echo's ``ForwardEcho``."""
        if protocol != "http1" or websocket_messages:
            return LiveResponse(request, 0, error=HTTP1_ONLY)
        assert request.source is not None
        pod = self.world.pod_of((request.source.namespace, request.source.workload))
        port = self.world.control_ports[pod.name]
        tag = f"mesh-{os.getpid()}-{next(self._ids)}"
        log = self._log(pod.client)
        if log is not None:  # before any read that may pass its line
            log.expect(tag)
        headers = [*forward_headers(request), Header(CORRELATION_HEADER, tag)]
        call = ForwardEchoRequest(
            count=1,
            url=self.url(request),
            method=request.method,
            headers=headers,
            timeout_micros=int(timeout * 1e6),
        )
        channel = self._channels.get(pod.name)
        if channel is None:  # one HTTP/2 connection per client pod, for all its calls
            channel = self._channels[pod.name] = Channel(pod.ip, port)
        try:
            reply = await EchoTestServiceStub(channel).forward_echo(call, timeout=timeout + 5)
        except GRPCError as exc:  # the request failed: no HTTP answer (status 0)
            await self.world.sidecars_running()  # not the xDS's doing if a sidecar died
            return LiveResponse(request, 0, error=exc.message or str(exc), correlation=tag)
        except (OSError, StreamTerminatedError, TimeoutError) as exc:
            why = f"ForwardEcho to {pod.name}: {type(exc).__name__}: {exc}"
            self._channels.pop(pod.name, None)
            channel.close()
            await self.world.sidecars_running()
            return LiveResponse(request, 0, error=why, correlation=tag)
        await self.world.sidecars_running()
        return replace(
            parse_output(request, reply.output[0] if reply.output else ""), correlation=tag
        )

    # --- attribution --------------------------------------------------------------------------

    def _log(self, client: tuple[str, str]) -> AccessLogReader | None:
        """The reader of the client's sidecar's access log (None: no sidecar runs)."""
        log = self._logs.get(client)
        sidecar = self.world.running.get(self.world.pod_of(client).name)
        if log is None and sidecar is not None:
            log = self._logs[client] = AccessLogReader(sidecar.log)
        return log

    async def attribute(
        self, responses: Sequence[LiveResponse], *, logged: bool = True
    ) -> list[LiveResponse]:
        """Each answer with its client sidecar's access-log line, by request id (an
        answer whose request no sidecar logs has none: it went by no sidecar route).
        ``logged``: a line is expected (an HTTP connection manager takes the request,
        by the Envoy model), so it is waited for while the sidecar may still flush it;
        else the lines there are read at once."""
        wanted: dict[AccessLogReader, set[str]] = {}  # the ids to claim, per sidecar log
        for r in responses:
            log = self._log(_client(r.request)) if r.correlation else None
            if log is not None:
                wanted.setdefault(log, set()).add(r.correlation)
        waited = {
            log: {r.correlation for r in responses if r.correlation in ids and r.status}
            for log, ids in wanted.items()
        }
        deadline = asyncio.get_running_loop().time() + (LOG_WAIT_S if logged else 0.0)
        while True:
            for log in wanted:
                log.poll()
            done = all(log.has(ids) for log, ids in waited.items())
            if done or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.05)
        found: dict[str, AccessEntry] = {}
        for log, ids in wanted.items():
            found.update(log.claim(ids))
        return [replace(r, access=found.get(r.correlation)) for r in responses]

    def kill_now(self) -> None:
        """For a stopped run (SIGTERM, Ctrl-C): no event loop to wait on, just end things."""
        for pid in self.world.envoy_pids():
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.world.workdir is not None:
            shutil.rmtree(self.world.workdir, ignore_errors=True)


def _client(request: Request) -> tuple[str, str]:
    assert request.source is not None
    return (request.source.namespace, request.source.workload)


def parse_output(request: Request, output: str) -> LiveResponse:
    """One request's ``output`` of a ``ForwardEcho`` (``forward``'s lines) as the answer
    it was: status, response headers, and the echo's report of what it received (the
    fields ``forward.echo_lines`` writes) when an echo answered."""
    status, headers, body = 0, [], []
    for raw in output.splitlines():
        tag, _, line = raw.partition("] ")
        if tag.endswith(" body"):
            body.append(line)
            continue
        key, _, value = line.partition("=")
        if key == "StatusCode" and value.isdigit():
            status = int(value)
        elif key == "ResponseHeader":
            name, _, val = value.partition(":")
            headers.append((name, val))
    fields: dict[str, str] = {}
    sent: dict[str, list[str]] = {}
    for line in body:
        key, _, value = line.partition("=")
        if key == "RequestHeader":
            name, _, val = value.partition(":")
            sent.setdefault(name, []).append(val)
        else:
            fields.setdefault(key, value)
    echo = None
    if {"Hostname", "URL", "Host", "Method"} <= fields.keys():
        echo = {
            "namespace": fields.get("Namespace", ""),
            "pod": fields["Hostname"],
            "host": fields["Host"],
            "path": fields["URL"],
            "method": fields["Method"],
            "proto": fields.get("Proto", ""),
            "headers": sent,
        }
    text = "\n".join(body).encode()
    if not status:
        return LiveResponse(request, 0, error="the ForwardEcho answer has no StatusCode")
    return LiveResponse(request, status, tuple(headers), echo, text)
