"""The Host a backend receives is the URLRewrite hostname, or the client's Host unmodified.

Why it matters: The spec says Host is forwarded unmodified absent a rewrite; virtual-hosted
backends break when it is altered, and must get the rewritten value when one is configured.

Example: `urlRewrite: {hostname: internal.example}` must reach the backend as `Host:
internal.example`.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule, filter_path

RULE = disagreement_rule(
    name="httproute-host-rewrite",
    code="EV214",
    features=("HTTPRouteHostRewrite",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httpurlrewritefilter",
    doc=__doc__ or "",
    locate=filter_path("URLRewrite"),
)
