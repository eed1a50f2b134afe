"""Method matches select the same requests in Envoy as in the spec.

Why it matters: A rule limited to POST must not answer GET; losing the `:method` matcher does
exactly that.

Example: `method: POST` on `/api` must leave `GET /api` to other rules or 404.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule

RULE = disagreement_rule(
    name="httproute-method-matching",
    code="EV204",
    features=("HTTPRouteMethodMatching",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httpmethod",
    doc=__doc__ or "",
)
