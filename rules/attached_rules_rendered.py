"""Every rule the spec attaches is reachable in the xDS.

Why it matters: A rule dropped in translation returns 404 for requests the spec routes, the most
visible way a controller can be wrong, and the cheapest to catch offline.

Example: An accepted HTTPRoute with `/checkout` whose xDS lacks the route answers 404.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule

RULE = disagreement_rule(
    name="attached-rules-rendered",
    code="EV106",
    features=("HTTPRoute",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httprouterule",
    doc=__doc__ or "",
)
