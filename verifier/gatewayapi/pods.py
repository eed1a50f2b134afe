"""A cluster's Pods, read for ``live --kubeconfig --mesh``: which pod sends a mesh case,
and which pod answered it.

The mesh live pass asks a client workload's pod to make each request (its echo's
``ForwardEcho``, through the API server's port-forward: ``verifier.live.portforward``),
so a pod of that workload must run and be ready first: it is polled for, by GET (a
list of the namespace's Pods, never a watch), each poll bounded as every request to
the API server is (``kubeapi``), all of them within ``--mesh-wait``; a workload
without one by then is an exit-2 error naming it. A pod belongs to a workload when it
carries every label of the workload's pod template (the Deployment's selector is a
subset of them, and a pod of an older template, which a rollout is replacing, does not
match). The answering pod is named by its echo (``Hostname``); its address, read here,
says which Services' ready endpoints hold it (``mesh_live.MeshAnswers.named``).

Only namespaces a case involves are listed (its client's, its Service's, and those of
the backends the models name), paged and bounded as every list is (``cluster``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from verifier.errors import InputError, InputErrors
from verifier.gatewayapi.cluster import ClusterSource, Kind, _Reader, connect, unexpected
from verifier.gatewayapi.kubeapi import Api, Status
from verifier.gatewayapi.kubeconfig import Endpoint

POD = Kind("Pod", "v1", "pods")
POLL_INTERVAL = 1.0
MESH_ROLE = "deploy/edge-verifier-mesh-clusterrole.yaml"


@dataclass(frozen=True)
class PodState:
    """What the mesh pass reads of one Pod."""

    namespace: str
    name: str
    ip: str
    labels: Mapping[str, str]
    ready: bool  # Running, condition Ready=True, not being deleted

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def pod_state(namespace: str, item: dict[str, Any]) -> PodState:
    """A listed Pod item (any shape: a field of the wrong type reads as absent)."""
    meta, status = _dict(item.get("metadata")), _dict(item.get("status"))
    labels = _dict(meta.get("labels"))
    conditions = status.get("conditions")
    conditions = conditions if isinstance(conditions, list) else []
    ready = any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in conditions
    )
    running = status.get("phase") == "Running" and not meta.get("deletionTimestamp")
    return PodState(
        _text(meta.get("namespace")) or namespace,
        _text(meta.get("name")),
        _text(status.get("podIP")),
        {str(k): str(v) for k, v in labels.items()},
        ready and running,
    )


def forbidden_pods(where: str, namespace: str) -> InputError:
    message = (
        f"forbidden: cannot list pods in namespace {namespace} (Pod); live --mesh needs verb "
        f"'list' on pods in apiGroup \"\" (see {MESH_ROLE})"
    )
    return InputError(where, 0, "Pod", "forbidden", message)


def list_pods(api: Api, source: ClusterSource, namespace: str) -> list[PodState]:
    """Every Pod of ``namespace``, paged and bounded as every list is."""
    reader = _Reader(api, source)
    path = f"/api/v1/namespaces/{quote(namespace)}/pods"
    try:
        return [pod_state(namespace, item) for item in reader.pages(POD, path, namespace)]
    except Status as exc:
        raise InputErrors([unexpected(api.where, "list", POD, exc)]) from None
    except InputErrors as exc:  # a 403 is worded for the reader's role: say the mesh's
        if any(e.code == "forbidden" for e in exc.errors):
            raise InputErrors([forbidden_pods(api.where, namespace)]) from None
        raise


@dataclass(frozen=True)
class Placement:
    """Where the mesh cases are sent from and who may answer: a ready pod per client
    workload, every pod read (by namespace and name), and the API server to reach them."""

    endpoint: Endpoint
    clients: Mapping[tuple[str, str], PodState]  # (namespace, workload) -> its pod
    pods: Mapping[tuple[str, str], PodState]
    waited: bool  # some client had no ready pod at the first look
    timeout: float  # one request to the API server (--cluster-timeout)


def _ready(pods: Iterable[PodState], labels: Mapping[str, str]) -> PodState | None:
    """The first ready pod (by name) carrying every one of ``labels``."""
    fitting = [
        p for p in pods if p.ready and p.ip and all(p.labels.get(k) == v for k, v in labels.items())
    ]
    return min(fitting, key=lambda p: p.name) if fitting else None


def wait_for_clients(
    source: ClusterSource,
    clients: Mapping[tuple[str, str], Mapping[str, str]],
    wait: float,
    also: Collection[str] = (),
    *,
    interval: float = POLL_INTERVAL,
    sleep: Callable[[float], None] | None = None,
) -> Placement:
    """A ready pod of each client (``clients``: (namespace, workload) -> its pod
    template's labels), polled for up to ``wait`` seconds; then every pod of the
    clients' namespaces and of ``also``. Exit 2 (InputErrors) naming the workloads
    that have none by then."""
    pause = sleep or time.sleep
    deadline = time.monotonic() + wait
    spaces = sorted({ns for ns, _ in clients})
    with connect(source, max(deadline, time.monotonic() + source.deadline)) as api:
        waited = False
        while True:
            read = {ns: list_pods(api, source, ns) for ns in spaces}
            found = {c: _ready(read[c[0]], labels) for c, labels in clients.items()}
            missing = sorted(c for c, pod in found.items() if pod is None)
            if not missing:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                raise _not_ready(api, missing, read, wait)
            waited = True
            pause(min(interval, left))
        for ns in sorted(set(also) - set(spaces)):
            read[ns] = list_pods(api, source, ns)
        pods = {p.key: p for listed in read.values() for p in listed}
        ready = {c: pod for c, pod in found.items() if pod is not None}
        return Placement(api.endpoint, ready, pods, waited, source.timeout)


def _not_ready(
    api: Api,
    missing: list[tuple[str, str]],
    read: Mapping[str, list[PodState]],
    wait: float,
) -> InputErrors:
    errors = []
    for ns, name in missing:
        seen = len(read.get(ns, ()))
        message = (
            f"workload {ns}/{name} has no Running pod with condition Ready=True after waiting "
            f"{wait:g}s (--mesh-wait); {seen} pods in namespace {ns}, none of them a ready pod "
            "of its pod template (its mesh cases are sent from one)"
        )
        errors.append(InputError(f"{api.where}/Pod/{ns}", 0, "--mesh-wait", "not-ready", message))
    return InputErrors(errors)
