"""Mesh cases against a cluster (``live --kubeconfig K --mesh``): sent by in-cluster echo
clients, the way the upstream mesh suite drives them, and judged three ways.

Nothing is started here: the cluster runs the pods, their sidecars, kube-proxy and its
DNS. Each mesh case is sent as the embedded mesh sends it (``mesh_runner``), from a
ready pod of its ``from:`` workload (``pods.wait_for_clients``), by that pod's echo:

- **Reaching the echo**: a port-forward through the API server to the pod's echo
  control port (``--mesh-control-port``, 7070: the ``--grpc`` port of Istio's echo in
  the Gateway API mesh manifests, where it serves ``EchoTestService``), relayed from
  127.0.0.1 (``portforward``), and a ``ForwardEcho`` over it (grpclib). Before the
  first case each client pod is asked ``Echo`` once, within ``--cluster-timeout``: a
  port-forward the server refuses (403: the role lacks ``create`` on
  ``pods/portforward``), a pod gone, a server that stalls, or no echo control service
  there is an exit-2 error naming the pod, not N failed cases.
- **Where to**: ``http://SVC.NS.svc.cluster.local:PORT/path``, the Service's cluster
  DNS name, as an application in the pod calls it, with the case's headers (``Host``:
  the case's host).
- **Judged** by the embedded mesh's code (``mesh_runner._judge``): the spec model, the
  Envoy model on the reference translator's sidecar xDS for the client (``translate
  --proxy``), and the answer. The answering pod (the echo's ``Hostname``) is named by
  the Services whose EndpointSlices hold its address (``pods``: its IP as read).
- **Attribution**: the cluster's sidecars write no access log of ours, so each answer
  is ``unattributed``, with the reason, as the edge's remote pass reports them: never
  the model's route.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grpclib.client import Channel
from grpclib.exceptions import GRPCError, StreamTerminatedError

from verifier.errors import InputError, InputErrors
from verifier.gatewayapi import workloads as wl
from verifier.gatewayapi.cluster import ClusterSource
from verifier.gatewayapi.pods import MESH_ROLE, Placement, wait_for_clients
from verifier.gatewayapi.resources import Resources
from verifier.inputs import limits
from verifier.live.client import LiveResponse
from verifier.live.echoproto.proto import EchoRequest, EchoTestServiceStub, ForwardEchoRequest
from verifier.live.mesh_live import HTTP1_ONLY, MeshAnswers, forward_headers, parse_output
from verifier.live.mesh_pods import MeshPod
from verifier.live.mesh_runner import (
    PARALLEL_CASES,
    MeshRun,
    _judge,
    _models,
    _Setup,
    _setup,
    split_mirrors,
)
from verifier.live.portforward import PortForward, PortForwardRefused
from verifier.live.replay import LiveCase
from verifier.report.live import MESH_REMOTE
from verifier.semantics.request import Request

if TYPE_CHECKING:
    from verifier.check import Context
    from verifier.live.runner import LiveOptions

DEFAULT_CONTROL_PORT = 7070  # Istio's echo --grpc port in the Gateway API mesh manifests
DEFAULT_WAIT = 120.0


@dataclass(frozen=True)
class ClusterMesh:
    """``--mesh`` with ``--kubeconfig``: the cluster, how long to wait for the client
    pods (``--mesh-wait``) and the echo control port (``--mesh-control-port``)."""

    source: ClusterSource
    wait: float = DEFAULT_WAIT
    port: int = DEFAULT_CONTROL_PORT


def _client(request: Request) -> tuple[str, str]:
    assert request.source is not None
    return (request.source.namespace, request.source.workload)


def setup(ctx: Context, cases: Sequence[LiveCase]) -> _Setup:
    """The client workloads' sidecar xDS (the reference translator's) and their Envoy
    models; the pods as the resources run them, for the capture facts."""
    return _setup(ctx, None, {_client(c.case.request) for c in cases})


def place(ctx: Context, cases: Sequence[LiveCase], mesh: ClusterMesh, plan: _Setup) -> Placement:
    """A ready pod of each client (waited for), and the pods of every namespace a case's
    answer may come from: its Service's and those of the backends the models name."""
    labels = {}
    for c in cases:
        client = _client(c.case.request)
        workload = wl.workload(ctx.res, *client)
        if workload is None:  # check has said so; nothing could send it
            where = "/".join(client)
            message = f"the mesh case {c.case.name!r} names workload {where}, not in the cluster"
            raise InputErrors([InputError(where, 0, "from", "not-found", message)])
        labels[client] = dict(workload.pod_labels)
    spaces = set()
    for c in cases:
        spaces.add(c.case.parent_key[0])
        spec, envoy, _ = _models(plan, c.case.request)
        for b in (*spec.outcome.backends, *envoy.outcome.backends):
            spaces |= {b.namespace, *(ns for ns, _, _ in b.aliases)}
    return wait_for_clients(mesh.source, labels, mesh.wait, spaces)


class ClusterMeshTarget(MeshAnswers):
    """The cluster's mesh as the live runner's target (module docstring)."""

    logs = False  # the cluster's sidecars log nothing of ours
    acked = False  # they may still be taking their configuration in

    def __init__(self, res: Resources, placement: Placement, port: int) -> None:
        pods = {
            key: MeshPod(p.namespace, "", p.name, p.ip, "", False, False, ())
            for key, p in placement.pods.items()
        }
        super().__init__(res, pods)
        self.placement = placement
        self.port = port
        self._forwards: dict[tuple[str, str], PortForward] = {}
        self._channels: dict[tuple[str, str], Channel] = {}

    async def _forward(self, client: tuple[str, str]) -> tuple[PortForward, Channel]:
        """The client pod's port-forward and gRPC channel, made on first use."""
        pod = self.placement.clients[client]
        forward = self._forwards.get(client)
        if forward is None:
            forward = PortForward(
                self.placement.endpoint,
                pod.namespace,
                pod.name,
                self.port,
                timeout=self.placement.timeout,
                budget=limits().max_bytes,
            )
            self._forwards[client] = await forward.start()
        channel = self._channels.get(client)
        if channel is None:
            channel = self._channels[client] = Channel("127.0.0.1", forward.port)
        return forward, channel

    async def probe(self, clients: Sequence[tuple[str, str]]) -> None:
        """Each client pod's echo answers ``Echo`` through the port-forward; else exit 2."""
        errors = await asyncio.gather(*(self._probe(c) for c in sorted(set(clients))))
        found = [e for e in errors if e is not None]
        if found:
            raise InputErrors(found)

    async def _probe(self, client: tuple[str, str]) -> InputError | None:
        pod = self.placement.clients[client]
        forward, channel = await self._forward(client)
        where = f"{forward.endpoint.server}: pod {pod.namespace}/{pod.name}"
        try:  # the upgrade alone first: a refusal is the server's, with its status
            ws = await forward.open()
            await ws.close()
            asked = EchoRequest(message="edge-verify")
            await EchoTestServiceStub(channel).echo(asked, timeout=forward.timeout)
        except PortForwardRefused as exc:
            return _refused(where, pod.namespace, exc)
        except (GRPCError, OSError, StreamTerminatedError, TimeoutError) as exc:
            said = forward.said() or f"{type(exc).__name__}: {exc}"
            message = (
                f"no echo control service (EchoTestService) answered Echo on port "
                f"{self.port} through the port-forward (--mesh-control-port): {said}"
            )
            return InputError(where, 0, "--mesh-control-port", "no-echo", message)
        return None

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()
        forwards, self._forwards = list(self._forwards.values()), {}
        await asyncio.gather(*(f.close() for f in forwards), return_exceptions=True)

    async def send(
        self,
        request: Request,
        *,
        protocol: str = "http1",
        websocket_messages: Sequence[str] = (),
        timeout: float = 10.0,
    ) -> LiveResponse:
        """One request from the client's ready pod, by its echo's ``ForwardEcho``."""
        if protocol != "http1" or websocket_messages:
            return LiveResponse(request, 0, error=HTTP1_ONLY)
        forward, channel = await self._forward(_client(request))
        call = ForwardEchoRequest(
            count=1,
            url=self.url(request),
            method=request.method,
            headers=forward_headers(request),
            timeout_micros=int(timeout * 1e6),
        )
        try:
            reply = await EchoTestServiceStub(channel).forward_echo(call, timeout=timeout + 5)
        except GRPCError as exc:  # the request failed: no HTTP answer (status 0)
            return LiveResponse(request, 0, error=f"ForwardEcho: {exc.message or exc}")
        except (OSError, StreamTerminatedError, TimeoutError) as exc:
            why = forward.said() or f"{type(exc).__name__}: {exc}"
            self._channels.pop(_client(request), None)
            channel.close()
            return LiveResponse(request, 0, error=f"ForwardEcho to {forward.where}: {why}")
        return parse_output(request, reply.output[0] if reply.output else "")


def _refused(where: str, namespace: str, exc: PortForwardRefused) -> InputError:
    if exc.status == 403:
        message = (
            f"port-forward forbidden ({exc.message}): live --mesh needs verb 'create' "
            f'on pods/portforward in apiGroup "" in namespace {namespace} (see {MESH_ROLE})'
        )
        return InputError(where, 0, "pods/portforward", "forbidden", message)
    message = f"the API server refused the port-forward: {exc.message}"
    return InputError(where, 0, "pods/portforward", "port-forward", message)


async def run_cluster_mesh_cases(
    scenario: str,
    ctx: Context,
    cases: list[LiveCase],
    opts: LiveOptions,
    plan: _Setup,
    placement: Placement,
    port: int,
) -> MeshRun:
    """Every mesh case of ``cases`` sent from its client's pod in the cluster."""
    found, sent = split_mirrors(scenario, cases)
    if not sent:
        return MeshRun(found)
    target = ClusterMeshTarget(ctx.res, placement, port)
    started = time.monotonic()
    try:
        await target.probe([_client(c.case.request) for c in sent])
        probed = time.monotonic() - started
        limit = asyncio.Semaphore(PARALLEL_CASES)
        found += await asyncio.gather(
            *(_judge(target, plan, scenario, c, opts, limit) for c in sent)
        )
    finally:
        await target.close()
    pods = ", ".join(f"{p.namespace}/{p.name}" for _, p in sorted(placement.clients.items()))
    where = f"remote: {MESH_REMOTE}{pods}"  # LiveReport.remote: who answered
    note = (
        f"mesh: against the cluster, each case sent by a ready pod of its client workload "
        f"through its echo's ForwardEcho on port {port}, reached by the API server's "
        "port-forward; the URL names the Service's cluster DNS name; the cluster's sidecars "
        "write no access log of ours, so no answer is attributed to a route"
    )
    return MeshRun(found, (where, note), {"port_forward_and_echo": probed})
