"""Filters on a backendRef apply to requests sent to that backend only.

Why it matters: A backend-level header applied to every backend (or to none) breaks canary
markers and per-backend auth.

Example: backendRefs v1 (filter sets `X-Canary: false`) and v2 (sets `true`): each backend sees
its own value.

"""

from __future__ import annotations

from verifier.rules.support.disagreement import disagreement_rule, filter_path

RULE = disagreement_rule(
    name="httproute-backend-request-header-modification",
    code="EV208",
    features=("HTTPRouteBackendRequestHeaderModification",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httpbackendref",
    doc=__doc__ or "",
    locate=filter_path("RequestHeaderModifier"),
)
