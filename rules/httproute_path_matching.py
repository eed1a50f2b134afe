"""Path matching (Exact, PathPrefix, RegularExpression) behaves as the spec says.

Why it matters: PathPrefix is element-wise: a wrong encoding (a plain string prefix) sends
`/foobar` to a route for `/foo`, silently exposing a backend on paths it never claimed.

Example: PathPrefix `/foo` must match `/foo`, `/foo/` and `/foo/bar` but not `/foobar`; an xDS
route
`prefix: /foo` answers `/foobar` with the backend instead of 404.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule

RULE = disagreement_rule(
    name="httproute-path-matching",
    code="EV201",
    features=("HTTPRoute",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httppathmatch",
    doc=__doc__ or "",
)
