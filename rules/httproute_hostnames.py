"""Host-based selection (route hostnames, listener hostnames, isolation) matches the spec.

Why it matters: Hostnames decide which listener and which routes see a request; a wrong virtual
host leaks one tenant's routes to another's host, and a wildcard must never match its apex.

Example: With listeners `*.example.com` and `foo.example.com` on one port, `foo.example.com`
must
only reach routes of the `foo.example.com` listener.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule

RULE = disagreement_rule(
    name="httproute-hostnames",
    code="EV205",
    features=("HTTPRoute", "GatewayHTTPListenerIsolation"),
    spec_ref="https://gateway-api.sigs.k8s.io/concepts/hostnames/",
    doc=__doc__ or "",
)
