"""Requests that no attached rule matches get 404.

Why it matters: The spec: 'When no rules matching a request have been successfully attached to
the parent a request is coming from, a HTTP 404 status code MUST be returned.' A catch-all that
answers instead exposes a backend to every host.

Example: A request for `unmatched.invalid` gets 404.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule

RULE = disagreement_rule(
    name="no-route-default-404",
    code="EV107",
    features=("HTTPRoute",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httprouterule",
    doc=__doc__ or "",
)
