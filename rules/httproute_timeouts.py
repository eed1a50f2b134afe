"""Request and backendRequest timeouts are the ones configured.

Why it matters: A missing timeout falls back to Envoy's 15 s default; a wrong one cuts off long
requests.

Example: `timeouts: {request: 500ms}` must answer 504 after 500 ms, not 15 s.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule

RULE = disagreement_rule(
    name="httproute-timeouts",
    code="EV217",
    features=("HTTPRouteRequestTimeout",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httproutetimeouts",
    doc=__doc__ or "",
)
