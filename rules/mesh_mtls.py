"""Traffic between mesh workloads never leaves the pod in cleartext.

Why it matters: aether's mesh (docs/mesh.md) carries traffic between mesh workloads
only over mutual TLS to the workload's tunnel port 15008: the receiving sidecar
terminates it, knows who called, and refuses everyone else. A sidecar cluster that
sends a mesh Service's traffic in cleartext (no ``UpstreamTlsContext``, or a plain
cluster to the Service's name or ClusterIP), without the sidecar's own certificate,
to a port other than 15008, or with an SNI naming no port of the pods' Services (the
peer's inbound listener picks the targetPort by SNI and refuses one it does not
know) either fails every request (the tunnel port speaks mTLS only) or, worse,
works: the request reaches the application port unencrypted and unauthenticated,
and the answers alone never show it.

Checked on every judged sidecar's xDS (the reference translator's per client, or
``check --xds FILE --proxy NS/WORKLOAD``), for every cluster its routes forward or
mirror to whose endpoints are the pods, the ClusterIP or the DNS name of a
mesh-registered Service (namespace label ``aether.io/managed: "true"``, or the mesh
registry); and for every frontend (ClusterIP and port) of such a Service that the
sidecar captures and would speak HTTP to (an appProtocol the spec supports): the
sidecar must route it, not pass it through (``tcp_proxy``, say to the ORIGINAL_DST
cluster), which reaches the ClusterIP in cleartext and gives the same answers.
Disagreements between the models that such a cluster or passthrough explains (a 503
where the spec forwards) are this rule's; the finding points at the HTTPRoute match
of a request that goes through the cluster, with that request, else at the Service.

Example: the client's cluster ``mesh/mesh-apps/echo-v1/80`` without its transport
socket: the finding names the cluster, the Service and the request
``GET http://echo-v1.mesh-apps.svc.cluster.local/ (from mesh-apps/client ...)``.
"""

from __future__ import annotations

from collections.abc import Iterable

from verifier.rules.support import mesh

from verifier.check import Context
from verifier.findings import Finding
from verifier.registry import Rule

NAME = mesh.MTLS
CODE = "EV919"


def check(ctx: Context) -> Iterable[Finding]:
    return mesh.findings(ctx, NAME, CODE)


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("Mesh", "AetherEdgeBackends"),
    spec_ref="docs/mesh.md#what-check-judges",
    doc=(__doc__ or "").strip(),
    check=check,
    reads_models=True,
)
