"""Clusters for Services outside the mesh follow the aether edge's DNS path.

Why it matters: the aether edge dials a Service that is not mesh-registered by its
cluster DNS name, in cleartext, so kube-proxy/DNS pick the endpoints and a TLS
handshake against a plaintext backend never happens: a ``STRICT_DNS`` cluster
without a transport socket whose one endpoint is
``<svc>.<ns>.svc.cluster.local:<service port>``. LOGICAL_DNS pins one address for a
connection's lifetime, pod IPs go stale on rollout, and a clusterIP bypasses DNS
failover.

Mesh-registered means the namespace has the label ``aether.io/managed: "true"`` (or
the Service is in the mesh registry given to the check). The cluster's Service is
found from what it dials, never from its name; the protocol (HTTP/1.1, HTTP/2 for
h2c) is judged by httproute-backend-protocol, so one wrong cluster gives one finding.

Example: ``edge-web/web-backend:8080`` routed through a ``LOGICAL_DNS`` cluster: "has
type LOGICAL_DNS, expected STRICT_DNS".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from verifier.rules.support import backends as bk
from verifier.rules.support import served as spec

from verifier.check import Context
from verifier.findings import Finding
from verifier.registry import Rule

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.cluster.v3 import Cluster

NAME = "aether-non-mesh-backend"
CODE = "EV301"


def problems(cluster: Cluster, found: bk.Dialled) -> list[str]:
    svc = found.service
    fqdn = f"{svc.meta.name}.{svc.meta.namespace}.svc.cluster.local"
    ports = [found.port.port] if found.port else [p.port for p in svc.ports]
    want = f"{fqdn}:{'|'.join(map(str, ports))}"
    out = []
    kind = bk.kind(cluster)
    if kind != "STRICT_DNS":
        out.append(f"has type {kind or 'unset'}, expected STRICT_DNS")
    if bk.encrypts(cluster):
        out.append("has a transport socket, expected cleartext")
    if not found.targets:
        out.append(f"has no endpoints, expected {want}")
    wrong = [
        f"{h}:{p}" for h, p in found.targets if h.lower().rstrip(".") != fqdn or p not in ports
    ]
    if wrong:
        out.append(f"dials {', '.join(wrong)}, expected {want}")
    return out


def check(ctx: Context) -> Iterable[Finding]:
    registry = ctx.mesh_registry
    for cluster, found, _refs in bk.with_service(
        ctx.snapshot, ctx.res, unjudged=ctx.unjudged.clusters
    ):
        svc = found.service
        if spec.is_mesh(ctx.res, svc.meta.namespace, svc.meta.name, registry):
            continue
        for problem in problems(cluster, found):
            yield bk.backend_finding(CODE, NAME, cluster, svc, problem)


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("AetherEdgeBackends",),
    spec_ref="docs/translate.md#clusters-the-aether-edges-two-backend-paths",
    doc=(__doc__ or "").strip(),
    check=check,
)
