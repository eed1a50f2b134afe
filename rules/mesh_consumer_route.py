"""A consumer route changes only its own namespace's traffic, and there it takes precedence.

Why it matters: GEP-1294 (MeshConsumerRoute): a mesh route in another namespace than
its Service is a consumer route, "only applied to outbound connections originating
from the same namespace as the Route", and for those clients it replaces the Service's
producer routes. A sidecar that applies a consumer route to a client of another
namespace lets one team reroute, rewrite or break another team's calls; one that
keeps the producer routes where the client's namespace has its own leaves the
consumer's routing unapplied.

Owns the disagreements between the spec model and the Envoy model on a mesh request
whose client's route table for that Service port (its sidecar's xDS) holds a consumer
route of another namespace, or a producer route where the client's namespace has a
consumer route (docs/mesh.md, per port). One finding per leaked route, at its match.

Example: mesh-client's consumer route for echo-v2 in mesh-apps/client's route table:
``GET http://echo-v2.mesh-apps.svc.cluster.local/`` from mesh-apps/client gets the
consumer route's answer, where the spec says the producer route's.
"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule

RULE = disagreement_rule(
    name="mesh-consumer-route",
    code="EV921",
    features=("MeshConsumerRoute",),
    spec_ref="https://gateway-api.sigs.k8s.io/geps/gep-1294/",
    doc=__doc__ or "",
)
