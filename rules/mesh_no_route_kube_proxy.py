"""A request to a Service no mesh route applies to behaves as kube-proxy would.

Why it matters: GAMMA leaves a Service without mesh routes as it was: its clients reach
one of its ready endpoints, the request unchanged. A client's sidecar that answers
such a request itself (404, 503), sends it to another Service, or changes it breaks
every call to a Service nobody routes; and where no sidecar sees the connection (a
client outside the mesh, a destination its capture leaves out), kube-proxy answers,
and the spec model must say the same.

Owns the disagreements on mesh requests that no route applies to: on the client's
sidecar, whose default route must send them to the Service itself (docs/mesh.md);
and on requests no sidecar captures, which check answers as kube-proxy does (a ready
endpoint of the Service at that ClusterIP and port, else a refused connection),
without asking the Envoy model. The finding points at the Service.

Example: the client's route table for mesh-backend-v1:8080 without its default route:
``GET http://mesh-backend-v1.mesh-apps.svc.cluster.local:8080/`` gets 404 where
kube-proxy would reach the Service.
"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule

RULE = disagreement_rule(
    name="mesh-no-route-kube-proxy",
    code="EV923",
    features=("Mesh",),
    spec_ref="docs/mesh.md#what-check-judges",
    doc=__doc__ or "",
)
