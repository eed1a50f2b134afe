"""The mesh part of the base every drawn world stands on (``worlds.base_docs``).

Two mesh-registered namespaces: ``mesh-a``, the producer's, with two Services of two
ports each (``m-svc-1``, ``m-svc-2``: http 80, http-alt 8080) and the workload behind
both (``m-app``, which is also a client in the producer's own namespace), and
``mesh-b``, a consumer's, with a client workload; and a client outside the mesh
(``ns-c/client``: no sidecar, kube-proxy sends its requests). Each workload has a
ServiceAccount of its own, so each mesh identity is distinct. Data only: the
strategies that draw mesh routes over it are ``mesh_worlds``.
"""

from __future__ import annotations

from typing import Any

MESH_LABEL = {"aether.io/managed": "true"}
PRODUCER_NS = "mesh-a"
CONSUMER_NS = "mesh-b"
OUTSIDE_NS = "ns-c"  # a base namespace outside the mesh
MESH_NAMESPACES = (PRODUCER_NS, CONSUMER_NS)
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
        for ns in MESH_NAMESPACES
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
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": ns},
            }
        )
        labels = {"app": name}
        container = {"name": "app", "image": "echo", "ports": [{"containerPort": APP_PORT}]}
        docs.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": ns},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"serviceAccountName": name, "containers": [container]},
                    },
                },
            }
        )
    return docs
