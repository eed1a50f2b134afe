"""Any request on which the spec model and the Envoy model disagree, not owned by a feature rule.

Why it matters: Feature rules own the disagreements they can name; this rule keeps the rest from
being lost, so no wrong behaviour goes unreported.

Example: A route that sends a boundary request (e.g. `/foo` with a port in Host) to another
backend.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule

RULE = disagreement_rule(
    name="whole-config-equivalence",
    code="EV501",
    features=("HTTPRoute",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/",
    doc=__doc__ or "",
)
