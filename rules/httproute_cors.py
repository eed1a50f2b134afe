"""CORS preflights and response headers match the CORS filter's configuration.

Why it matters: CORS headers decide which web origins may read responses; an over-broad allow-
origin is a cross-site data leak, a missing one breaks the application.

Example: `allowOrigins: [https://app.example]`: a preflight from https://evil.example gets no
`access-control-allow-origin`.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule, filter_path

RULE = disagreement_rule(
    name="httproute-cors",
    code="EV219",
    features=("HTTPRouteCORS",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httpcorsfilter",
    doc=__doc__ or "",
    locate=filter_path("CORS"),
)
