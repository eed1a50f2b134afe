"""The path a backend receives follows URLRewrite's ReplaceFullPath/ReplacePrefixMatch.

Why it matters: Prefix rewrites are element-wise and keep the query string; a plain string swap
yields `//` paths or leaks the public prefix to the backend.

Example: Prefix `/api` rewritten to `/` must turn `/api/users?x=1` into `/users?x=1`.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule, filter_path

RULE = disagreement_rule(
    name="httproute-path-rewrite",
    code="EV215",
    features=("HTTPRoutePathRewrite",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httppathmodifier",
    doc=__doc__ or "",
    locate=filter_path("URLRewrite"),
)
