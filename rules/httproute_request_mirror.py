"""Requests are mirrored to the backends, and in the share (percent/fraction), the spec says.

Why it matters: Mirrors copy production traffic; mirroring to the wrong place or at the wrong
rate is a data-handling incident.

Example: `requestMirror: {backendRef: {name: shadow}, percent: 10}` mirrors a tenth of requests
to shadow.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule, filter_path

RULE = disagreement_rule(
    name="httproute-request-mirror",
    code="EV216",
    features=("HTTPRouteRequestMirror",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httprequestmirrorfilter",
    doc=__doc__ or "",
    locate=filter_path("RequestMirror"),
)
