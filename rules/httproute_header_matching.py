"""Header matches select the same requests in Envoy as in the spec.

Why it matters: Header names are case-insensitive and values case-sensitive; only the first of
several equivalent names counts. A matcher that ignores value case or drops a header condition
routes requests a rule was meant to keep out.

Example: `headers: [{name: Version, value: two}]` must not match `Version: Two`.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule

RULE = disagreement_rule(
    name="httproute-header-matching",
    code="EV202",
    features=("HTTPRoute",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httpheadermatch",
    doc=__doc__ or "",
)
