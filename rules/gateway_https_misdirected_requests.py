"""A TLS request whose SNI and Host pick different listeners is refused with 421.

Why it matters: Connection coalescing can send a request for one host over a connection
negotiated for another; without 421 the request crosses a listener (and certificate) boundary.

Example: SNI `foo.example.com`, Host `bar.example.com`, on separate HTTPS listeners: 421.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule

RULE = disagreement_rule(
    name="gateway-https-misdirected-requests",
    code="EV223",
    features=("GatewayHTTPSListenerDetectMisdirectedRequests",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#listener",
    doc=__doc__ or "",
)
