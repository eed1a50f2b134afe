"""Redirect status codes (301, 302 default, 303, 307, 308) match the spec.

Why it matters: 307/308 keep the method and body, 301/302 may not: the wrong code changes what
clients send.

Example: `statusCode: 308` must answer 308, not Envoy's default 301.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule, filter_path

RULE = disagreement_rule(
    name="httproute-redirect-status-code",
    code="EV213",
    features=("HTTPRoute",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httprequestredirectfilter",
    doc=__doc__ or "",
    locate=filter_path("RequestRedirect"),
)
