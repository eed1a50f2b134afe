"""Redirect Location hosts (and whether a redirect happens at all) match the spec.

Why it matters: A redirect to the wrong host is an open-redirect risk and breaks clients.

Example: `requestRedirect: {hostname: example.org}` must answer with `Location:
http://example.org/...`.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule, filter_path

RULE = disagreement_rule(
    name="httproute-request-redirect",
    code="EV209",
    features=("HTTPRoute",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httprequestredirectfilter",
    doc=__doc__ or "",
    locate=filter_path("RequestRedirect"),
)
