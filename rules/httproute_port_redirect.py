"""Redirect ports follow the spec's rules, including its defaults.

Why it matters: Without a port the spec derives it (the scheme's well-known port, else the
listener's); Envoy keeps the Host header's port unless told otherwise, so redirects leak
listener ports.

Example: On a listener at 8080, `scheme: https` without a port must redirect to port 443, not
8080.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule, filter_path

RULE = disagreement_rule(
    name="httproute-port-redirect",
    code="EV211",
    features=("HTTPRoutePortRedirect",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httprequestredirectfilter",
    doc=__doc__ or "",
    locate=filter_path("RequestRedirect"),
)
