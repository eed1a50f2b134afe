"""When several rules match a request, Envoy's first match is the spec's winner.

Why it matters: Envoy takes the first matching route; the spec ranks exact > longest prefix >
method > headers > query > oldest route > name > rule order. A mis-ordered route table sends
requests to the wrong backend only where matches overlap, which tests rarely probe.

Example: Rules `/foo` (route A, older) and `/foo/bar` (route B): `/foo/bar/x` must go to B.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule

RULE = disagreement_rule(
    name="httproute-precedence",
    code="EV401",
    features=("HTTPRoute",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httprouterule",
    doc=__doc__ or "",
)
