"""A fixture's mesh, running as a cluster's would, for ``live --kubeconfig --mesh``'s tests.

No cluster runs here, so the cluster's mesh is the embedded one (``MeshWorld``: a
network namespace per pod, real sidecars fed their ``translate --proxy`` xDS, kube-proxy's
DNAT, the cluster DNS), in a forked child's own network namespace, with every client
pod's echo serving Istio's echo control service on one port, as a cluster's echo pods
do (``CONTROL_PORT``). The API-server stand-in (``k8s_standin``) reaches into it the
way the kubelet does for a port-forward: ``connect`` opens a connection to 127.0.0.1:PORT
*inside the pod's network namespace*, through a Unix socket per pod that the child
serves (a Unix socket's path crosses network namespaces; the pods' addresses do not).

``pods`` are the world's pods as the stand-in's Pod objects: named and addressed as
the child runs them, labelled as their workload's pod template, Running and Ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from k8s_standin import pod_object
from relay import splice

from verifier import pipeline
from verifier.gatewayapi import workloads as wl
from verifier.live import netns
from verifier.live.mesh_pods import MeshPod, mesh_pods
from verifier.live.mesh_probe import Identities, MeshWorld
from verifier.orphans import private_dir

CONTROL_PORT = 7070  # Istio's echo --grpc port, where edge-verify's --mesh looks by default
START_TIMEOUT = 90.0
LIFETIME = 600.0  # the child ends by then whatever the parent does


def _socket_name(index: int) -> str:
    return f"{index}.sock"


async def _serve(world: MeshWorld, folder: Path) -> list[asyncio.Server]:
    """Per pod, a Unix socket: the first two bytes name a port (little-endian), then the
    connection is relayed to 127.0.0.1:port in the pod (b"\\0" first), or one byte 1
    and the dial's error are sent back."""
    loop = asyncio.get_running_loop()
    servers = []
    for i, pod in enumerate(world.pods):
        net = world.nets[pod.name]

        async def relay(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter, net: Any = net
        ) -> None:
            try:
                (port,) = struct.unpack("<H", await reader.readexactly(2))
                with net.entered():
                    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setblocking(False)
                try:
                    await asyncio.wait_for(loop.sock_connect(sock, ("127.0.0.1", port)), 2.0)
                except (OSError, TimeoutError) as exc:
                    sock.close()
                    said = os.strerror(exc.errno).lower() if getattr(exc, "errno", 0) else exc
                    why = f"dial tcp4 127.0.0.1:{port}: connect: {said}"
                    writer.write(b"\x01" + why.encode())
                    await writer.drain()
                    return
                writer.write(b"\x00")
                await splice((reader, writer), await asyncio.open_connection(sock=sock))
            except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
                pass  # the peer went, or the world is stopping
            finally:
                writer.close()

        servers.append(await asyncio.start_unix_server(relay, str(folder / _socket_name(i))))
    return servers


class ClusterMeshWorld:
    """The fixture's mesh in a forked child (module docstring), from ``start`` to ``stop``."""

    def __init__(self, paths: list[Path]) -> None:
        opts = pipeline.CheckOptions()
        (scn,) = pipeline.discover([str(p) for p in paths], opts)
        ctx, _ = pipeline.prepare(scn, opts)
        assert ctx is not None
        self.res = ctx.res
        self.registry, self.trust_domain = ctx.mesh_registry, ctx.trust_domain
        self.pods: list[MeshPod] = mesh_pods(ctx.res)
        # The clients of the scenario's mesh cases (its folder's cases.yaml).
        self.clients = frozenset(
            (c.request.source.namespace, c.request.source.workload)
            for c in ctx.mesh_cases
            if c.request.source is not None
        )
        self.sidecars = pipeline.sidecar_snapshots(
            ctx.res, {p.client for p in self.pods if p.sidecar}, self.trust_domain, self.registry
        )
        # Removed by ``stop``, and by the reaper if the tests are killed.
        self.folder = private_dir("ev-cluster-mesh-", room=len("/9999.sock"))
        self.pid = 0
        self.read_fd = -1

    def pod_objects(self, ready: bool = True) -> list[dict[str, Any]]:
        out = []
        for p in self.pods:
            workload = wl.workload(self.res, p.namespace, p.workload) if p.workload else None
            labels = dict(workload.pod_labels) if workload is not None else {}
            out.append(pod_object(p.namespace, p.name, p.ip, labels, ready))
        return out

    def connect(self, namespace: str, pod: str, port: int) -> socket.socket:
        """A connection to the pod's 127.0.0.1:port, as the kubelet dials it (OSError
        with the dial's words when nothing listens there)."""
        index = next(
            i for i, p in enumerate(self.pods) if (p.namespace, p.name) == (namespace, pod)
        )
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(self.folder / _socket_name(index)))
        sock.sendall(struct.pack("<H", port))
        status = sock.recv(1)
        if status != b"\x00":
            why = sock.recv(4096).decode(errors="replace")
            sock.close()
            raise OSError(why or "the pod's relay closed")
        return sock

    def start(self) -> ClusterMeshWorld:
        identities = {p.identity(self.trust_domain) for p in self.pods if p.sidecar}
        folder = self.folder

        async def work() -> dict[str, float]:
            issued = await Identities.issue(folder / "pki", identities)
            world = MeshWorld(
                self.res,
                self.sidecars,
                issued,
                self.registry,
                self.trust_domain,
                controls=self.clients,
                control_port=CONTROL_PORT,
            )
            async with world:
                servers = await _serve(world, folder)
                (folder / "ready").write_text(json.dumps(world.timings))
                ends = time.monotonic() + LIFETIME
                while not (folder / "stop").exists() and time.monotonic() < ends:
                    await asyncio.sleep(0.05)
                for server in servers:
                    server.close()
                return dict(world.timings)

        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            os.close(read_fd)
            netns._child(write_fd, [], work, True)
        os.close(write_fd)
        self.pid, self.read_fd = pid, read_fd
        ends = time.monotonic() + START_TIMEOUT
        while not (folder / "ready").exists():
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done or time.monotonic() > ends:
                answer = self.stop()
                raise RuntimeError(f"the cluster's mesh did not start: {answer!r}")
            time.sleep(0.05)
        return self

    def stop(self) -> object:
        """End the child (it stops the world) and its answer; the folder removed."""
        (self.folder / "stop").touch()
        data = b""
        with contextlib.suppress(OSError), os.fdopen(self.read_fd, "rb") as pipe:
            data = pipe.read()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        shutil.rmtree(self.folder, ignore_errors=True)
        import pickle

        return pickle.loads(data) if data else None


@contextlib.contextmanager
def cluster_mesh(paths: list[Path]) -> Iterator[ClusterMeshWorld]:
    world = ClusterMeshWorld(paths).start()
    try:
        yield world
    finally:
        world.stop()
