"""Redirect paths (ReplaceFullPath, ReplacePrefixMatch) match the spec.

Why it matters: Prefix replacement works on path elements: `/foo` -> `/` must turn `/foo/bar`
into `/bar`, not `//bar`.

Example: `path: {type: ReplacePrefixMatch, replacePrefixMatch: /new}` on prefix `/old` sends
`/old/x` to `/new/x`.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule, filter_path

RULE = disagreement_rule(
    name="httproute-path-redirect",
    code="EV212",
    features=("HTTPRoutePathRedirect",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httppathmodifier",
    doc=__doc__ or "",
    locate=filter_path("RequestRedirect"),
)
