"""The mesh part of the base every drawn world stands on (``worlds.base_docs``).

Two mesh-registered namespaces: ``mesh-a``, the producer's, with two Services of two
ports each (``m-svc-1``, ``m-svc-2``: http 80, http-alt 8080) and the workload behind
both (``m-app``, which is also a client in the producer's own namespace), and
``mesh-b``, a consumer's, with a client workload; a third, ``mesh-c``, where a world
may draw a client of its own (``client_docs``: with or without the annotation that
captures all its outbound traffic); and a client outside the mesh (``ns-c/client``: no
sidecar, kube-proxy sends its requests). Each workload has a ServiceAccount of its
own, so each mesh identity is distinct. Data only: the strategies that draw mesh
routes and clients over it are ``mesh_worlds``.
"""

from __future__ import annotations

from typing import Any

MESH_LABEL = {"aether.io/managed": "true"}
PRODUCER_NS = "mesh-a"
CONSUMER_NS = "mesh-b"
OUTSIDE_NS = "ns-c"  # a base namespace outside the mesh
DRAWN_CLIENT_NS = "mesh-c"  # a mesh namespace whose client a world may draw
MESH_NAMESPACES = (PRODUCER_NS, CONSUMER_NS)
# The pod template annotation with which a sidecar captures all outbound TCP, not only
# the ClusterIPs of mesh-registered Services (docs/mesh.md).
REDIRECT_ALL = "capture.aether.io/redirect-all"
MESH_SERVICES: tuple[tuple[str, str], ...] = ((PRODUCER_NS, "m-svc-1"), (PRODUCER_NS, "m-svc-2"))
MESH_PORTS = ((80, "http"), (8080, "http-alt"))
APP_PORT = 3000
# (namespace, Deployment): each with a ServiceAccount of its name; m-app serves both Services.
WORKLOADS = ((PRODUCER_NS, "m-app"), (CONSUMER_NS, "client"), (OUTSIDE_NS, "client"))


def mesh_base_docs() -> list[dict[str, Any]]:
    """The mesh's namespaces, Services, ServiceAccounts and Deployments (EndpointSlices
    are derived from the Deployments at load, as a cluster would publish them)."""
    docs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": MESH_LABEL}}
        for ns in (*MESH_NAMESPACES, DRAWN_CLIENT_NS)
    ]
    for i, (ns, name) in enumerate(MESH_SERVICES, start=1):
        ports = [
            {"name": pname, "protocol": "TCP", "port": port, "targetPort": APP_PORT}
            for port, pname in MESH_PORTS
        ]
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name, "namespace": ns},
                "spec": {
                    "clusterIP": f"10.96.30.{i}",
                    "selector": {"app": "m-app"},
                    "ports": ports,
                },
            }
        )
    for ns, name in WORKLOADS:
        docs += client_docs(ns, name)
    return docs


def client_docs(ns: str, name: str, redirect_all: bool = False) -> list[dict[str, Any]]:
    """A workload (a Deployment of one pod) and its ServiceAccount; ``redirect_all``: its
    sidecar captures all outbound TCP."""
    labels = {"app": name}
    template: dict[str, Any] = {"labels": labels}
    if redirect_all:
        template["annotations"] = {REDIRECT_ALL: "true"}
    container = {"name": "app", "image": "echo", "ports": [{"containerPort": APP_PORT}]}
    account = {"name": name, "namespace": ns}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": account},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": template,
                    "spec": {"serviceAccountName": name, "containers": [container]},
                },
            },
        },
    ]
