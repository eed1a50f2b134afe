"""Traffic is split across backends in the spec's proportions, invalid shares answered 500.

Why it matters: Canary and migration plans rely on weights; weight 0 must mean no traffic and an
invalid backendRef's share must fail (500) rather than be redistributed.

Example: Weights 90/10 with the 10 pointing at a missing Service: 10% of requests get 500.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule

RULE = disagreement_rule(
    name="httproute-backend-weights",
    code="EV218",
    features=("HTTPRoute", "ReferenceGrant"),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httpbackendref",
    doc=__doc__ or "",
)
