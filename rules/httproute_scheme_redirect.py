"""Redirect schemes match the spec.

Why it matters: The http->https redirect is a security control; a redirect that keeps http
defeats it.

Example: `scheme: https` must give `Location: https://...`.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule, filter_path

RULE = disagreement_rule(
    name="httproute-scheme-redirect",
    code="EV210",
    features=("HTTPRouteSchemeRedirect",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httprequestredirectfilter",
    doc=__doc__ or "",
    locate=filter_path("RequestRedirect"),
)
