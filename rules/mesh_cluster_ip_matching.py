"""A mesh route applies to traffic sent to its Service's ClusterIP and port, and only there.

Why it matters: GEP-1426 (MeshClusterIPMatching): a mesh route applies to the traffic
its client sends to the Service's frontend, its ClusterIP and port, whatever the Host
header says. A sidecar that routes one Service's traffic over another Service's routes
(a filter chain matching the wrong ClusterIP or port, or naming the wrong route table)
sends calls to backends the caller never meant; one whose frontend takes no route
table at all passes its traffic through untouched, as if no route existed.

Owns the disagreements on a mesh request whose client's route table for that frontend
holds a route made from an HTTPRoute that does not name this Service, or, for a
frontend the spec routes, no route table at all; and those on a request whose Host
names another Service (the frontend decides, not the Host). One finding per wrongly
applied route, at its match.

Example: the client's filter chain for echo-v1:80 routing over echo-v2's route table:
``GET http://echo-v1.mesh-apps.svc.cluster.local/`` gets echo-v2's answer.
"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule

RULE = disagreement_rule(
    name="mesh-cluster-ip-matching",
    code="EV922",
    features=("MeshClusterIPMatching",),
    spec_ref="https://gateway-api.sigs.k8s.io/geps/gep-1426/",
    doc=__doc__ or "",
)
