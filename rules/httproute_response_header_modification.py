"""The response headers clients receive are those ResponseHeaderModifier says.

Why it matters: Security headers are often added here; one lost on the way is a silent
regression.

Example: `add: [{name: X-Frame-Options, value: DENY}]` must appear on every response of the
rule.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule, filter_path

RULE = disagreement_rule(
    name="httproute-response-header-modification",
    code="EV207",
    features=("HTTPRouteResponseHeaderModification",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httpheaderfilter",
    doc=__doc__ or "",
    locate=filter_path("ResponseHeaderModifier"),
)
