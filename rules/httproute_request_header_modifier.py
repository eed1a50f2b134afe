"""The request headers a backend receives are those RequestHeaderModifier says.

Why it matters: `set` overwrites, `add` appends, `remove` deletes; confusing append and
overwrite changes what backends see (auth context, routing hints).

Example: `set: [{name: X-Env, value: prod}]` must replace a client's `X-Env: dev`, not append to
it.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule, filter_path

RULE = disagreement_rule(
    name="httproute-request-header-modifier",
    code="EV206",
    features=("HTTPRoute",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httpheaderfilter",
    doc=__doc__ or "",
    locate=filter_path("RequestHeaderModifier"),
)
