"""Routes attached by parentRef port serve requests on that port only.

Why it matters: A route attached to port 8080 must not answer on port 80 of the same Gateway.

Example: `parentRefs: [{name: gw, port: 8080}]`: a request on port 80 gets 404.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule, rule_path

RULE = disagreement_rule(
    name="httproute-parent-ref-port",
    code="EV220",
    features=("HTTPRouteParentRefPort", "HTTPRouteDestinationPortMatching"),
    spec_ref="https://gateway-api.sigs.k8s.io/geps/gep-957/",
    doc=__doc__ or "",
    locate=rule_path,
)
