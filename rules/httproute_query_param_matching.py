"""Query parameter matches select the same requests in Envoy as in the spec.

Why it matters: Query parameter names and values match exactly; a dropped or loosened matcher
widens a rule.

Example: `queryParams: [{name: animal, value: whale}]` must not match `?animal=dolphin`.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule

RULE = disagreement_rule(
    name="httproute-query-param-matching",
    code="EV203",
    features=("HTTPRouteQueryParamMatching",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httpqueryparammatch",
    doc=__doc__ or "",
)
