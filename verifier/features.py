"""Gateway API feature names, verbatim from the spec (``pkg/features``, v1.5).

Rules declare the features they cover with these names, and a profile claims a
set of them, so a report can say which rules ran and which were skipped
because the profile does not claim their feature.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from verifier.gatewayapi.resources import Resources
    from verifier.semantics.cases import Case

# Core features of the GATEWAY-HTTP conformance profile.
CORE = frozenset({"Gateway", "HTTPRoute", "ReferenceGrant"})

# Extended features of the GATEWAY-HTTP conformance profile (v1.5): the Gateway's
# extended features and HTTPRoute's (conformance_profiles.go).
EXTENDED = frozenset(
    {
        "GatewayPort8080",
        "GatewayStaticAddresses",
        "GatewayHTTPListenerIsolation",
        "GatewayHTTPSListenerDetectMisdirectedRequests",
        "GatewayInfrastructurePropagation",
        "GatewayAddressEmpty",
        "ListenerSet",
        "GatewayBackendClientCertificate",
        "GatewayFrontendClientCertificateValidation",
        "GatewayFrontendClientCertificateValidationInsecureFallback",
        "HTTPRouteQueryParamMatching",
        "HTTPRouteMethodMatching",
        "HTTPRouteResponseHeaderModification",
        "HTTPRoutePortRedirect",
        "HTTPRouteSchemeRedirect",
        "HTTPRoutePathRedirect",
        "HTTPRouteHostRewrite",
        "HTTPRoutePathRewrite",
        "HTTPRouteRequestMirror",
        "HTTPRouteRequestMultipleMirrors",
        "HTTPRouteRequestPercentageMirror",
        "HTTPRouteRequestTimeout",
        "HTTPRouteBackendTimeout",
        "HTTPRouteParentRefPort",
        "HTTPRouteDestinationPortMatching",
        "HTTPRouteBackendRequestHeaderModification",
        "HTTPRouteBackendProtocolH2C",
        "HTTPRouteBackendProtocolWebSocket",
        "HTTPRouteNamedRouteRule",
        "HTTPRoute303RedirectStatusCode",
        "HTTPRoute307RedirectStatusCode",
        "HTTPRoute308RedirectStatusCode",
        "HTTPRouteCORS",
    }
)

# The MESH-HTTP conformance profile (v1.5, conformance_profiles.go): core Mesh and
# HTTPRoute; extended, the mesh's own features (MeshExtendedFeatures) and
# HTTPRoute's extended features, on mesh routes (an HTTPRoute whose parentRef is a
# Service; docs/mesh.md). Fixtures named after them: fixtures/mesh-*.
MESH_CORE = frozenset({"Mesh", "HTTPRoute"})
MESH_EXTENDED = frozenset(
    {
        "MeshClusterIPMatching",
        "MeshConsumerRoute",
        "MeshHTTPRouteRewritePath",
        "MeshHTTPRouteSchemeRedirect",
        "MeshHTTPRouteRedirectPort",
        "MeshHTTPRouteRedirectPath",
        "MeshHTTPRouteBackendRequestHeaderModification",
        "MeshHTTPRouteQueryParamMatching",
        "MeshHTTPRouteNamedRouteRule",
    }
)
# What the MESH-HTTP profile claims (aether-edge claims it too). Few rules judge a mesh
# route yet (mesh-route-accepted); mesh cases are judged by the spec model
# (rules/case_expectations.py) until the sidecar's xDS is checked.
MESH_HTTP = MESH_CORE | MESH_EXTENDED | {f for f in EXTENDED if f.startswith("HTTPRoute")}

# Features no rule judges, and why. Where a Gateway asks for one that changes what
# clients see, rule `unchecked-gateway-fields` says so at the YAML line, so the
# check is never silent about behaviour it cannot judge.
NOT_CHECKED: dict[str, str] = {
    "GatewayStaticAddresses": (
        "spec.addresses say where clients reach the Gateway (its Service or load "
        "balancer), which is not in xDS"
    ),
    "GatewayAddressEmpty": "as GatewayStaticAddresses: addresses are not in xDS",
    "GatewayInfrastructurePropagation": (
        "spec.infrastructure labels and annotations go on provisioned resources, not into xDS"
    ),
    "GatewayBackendClientCertificate": (
        "spec.tls.backend is not modelled: the edge's upstream TLS is the mesh's "
        "SPIFFE identity, and non-mesh backends are cleartext"
    ),
}

# Not a spec feature: the aether edge's own contract (cluster shapes, mTLS).
AETHER_EDGE = "AetherEdgeBackends"

ALL = CORE | EXTENDED | MESH_HTTP | {AETHER_EDGE}

# What each profile claims. `gateway-api` judges behaviour any implementation
# must show; `aether-edge` adds the edge's own backend contract and the mesh
# (MESH-HTTP: aether runs both).
PROFILES: dict[str, frozenset[str]] = {
    "gateway-api": CORE | EXTENDED,
    "aether-edge": CORE | EXTENDED | {AETHER_EDGE} | MESH_HTTP,
}
DEFAULT_PROFILE = "aether-edge"


MESH_CONSUMER_ROUTE = "MeshConsumerRoute"


def exercised(res: Resources, cases: Iterable[Case]) -> frozenset[str]:
    """The features these cases exercise by what they send, whatever their scenario is
    called (a conformance report otherwise knows a feature only from a scenario named
    after it): MeshConsumerRoute, by a mesh case from a client in another namespace than
    its Service's, where a route of the client's namespace has that Service as parent
    (a consumer route: it applies to that client, or its absence from another's
    answer is the test)."""
    consumer = {
        (route.meta.namespace, ref.namespace, ref.name)
        for route in res.httproutes.values()
        for ref in route.parent_refs
        if ref.service_parent and ref.namespace != route.meta.namespace
    }
    found: set[str] = set()
    for case in cases:
        source = case.request.source
        if source is not None and (source.namespace, *case.parent_key) in consumer:
            found.add(MESH_CONSUMER_ROUTE)
    return frozenset(found)
