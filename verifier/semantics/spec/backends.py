"""Where a matched rule sends the request: backendRefs, weights, validity, timeouts.

Written from ``apis/v1/httproute_types.go`` (HTTPRouteRule.backendRefs,
HTTPBackendRef, HTTPRouteTimeouts) and ``apis/v1/shared_types.go``
(BackendRef.weight). A backendRef is resolved to a Service port or to the
reason it is invalid; invalid shares become 500s.
"""

from __future__ import annotations

from dataclasses import dataclass

from verifier.gatewayapi.model import GATEWAY_GROUP, HTTPRoute, ObjectRef
from verifier.gatewayapi.resources import Resources
from verifier.semantics.request import Backend
from verifier.semantics.spec.refs import reference_allowed

# HTTPBackendRef: "Support: Core for Kubernetes Service ... Implementation-specific
# for any other resource". The edge supports core Services only; anything else
# is "an unknown or unsupported kind of resource" (InvalidKind).
SUPPORTED_BACKEND_KINDS = frozenset({("", "Service")})

# HTTPBackendRef: "implementations SHOULD honor the appProtocol field ...
# SHOULD recognize the Kubernetes Standard Application Protocols defined in
# KEP-3726 ... If a Route is not able to send traffic to the backend using the
# specified protocol then the backend is considered invalid" (UnsupportedProtocol).
# appProtocol -> what the edge speaks upstream.
SUPPORTED_APP_PROTOCOLS = {
    None: "HTTP/1.1",
    "": "HTTP/1.1",
    "http": "HTTP/1.1",
    "kubernetes.io/h2c": "HTTP/2 cleartext (prior knowledge)",
    "kubernetes.io/ws": "HTTP/1.1 with WebSocket upgrades",
}


@dataclass(frozen=True)
class Resolved:
    """A backendRef resolved to a Service port, or the reason it is invalid.

    An invalid one also names the ResolvedRefs reason the spec gives (InvalidKind,
    RefNotPermitted, BackendNotFound, UnsupportedProtocol) and the backendRef field
    that is at fault (kind, namespace, name, port; empty when the fault is the
    Service's), so a report can point at that field."""

    backend: Backend | None
    problem: str | None
    protocol: str = ""
    reason: str = ""
    field: str = ""

    @property
    def missing_port(self) -> bool:
        """A BackendNotFound for a port the Service lacks, not for a missing Service."""
        return self.reason == "BackendNotFound" and self.field == "port"


def resolve_ref(res: Resources, route: HTTPRoute, ref: ObjectRef, weight: int) -> Resolved:
    """HTTPBackendRef: "A BackendRef is invalid if: * It refers to an unknown or
    unsupported kind of resource ... * It refers to a resource that does not
    exist ... * It refers a resource in another namespace when the reference
    has not been explicitly allowed by a ReferenceGrant ... * It refers to a
    Kubernetes Service that has an incompatible appProtocol"."""
    if (ref.group, ref.kind) not in SUPPORTED_BACKEND_KINDS:
        problem = f"InvalidKind {ref.group or 'core'}/{ref.kind} {ref.name}"
        return Resolved(None, problem, reason="InvalidKind", field="kind")
    ns = ref.namespace or route.meta.namespace
    allowed, why = reference_allowed(
        res,
        from_group=GATEWAY_GROUP,
        from_kind="HTTPRoute",
        from_namespace=route.meta.namespace,
        to_group="",
        to_kind="Service",
        to_namespace=ns,
        to_name=ref.name,
    )
    if not allowed:
        problem = f"RefNotPermitted Service {ns}/{ref.name}: {why}"
        return Resolved(None, problem, reason="RefNotPermitted", field="namespace")
    svc = res.services.get((ns, ref.name))
    if svc is None:
        problem = f"BackendNotFound Service {ns}/{ref.name}"
        return Resolved(None, problem, reason="BackendNotFound", field="name")
    port = next((p for p in svc.ports if p.port == ref.port), None)
    if port is None:
        problem = f"BackendNotFound Service {ns}/{ref.name} has no port {ref.port}"
        return Resolved(None, problem, reason="BackendNotFound", field="port")
    if port.app_protocol not in SUPPORTED_APP_PROTOCOLS:
        problem = f"UnsupportedProtocol appProtocol {port.app_protocol} on {ns}/{ref.name}"
        return Resolved(None, problem, reason="UnsupportedProtocol")
    return Resolved(
        Backend(ns, ref.name, port.port, weight), None, SUPPORTED_APP_PROTOCOLS[port.app_protocol]
    )


def has_ready_endpoint(res: Resources, backend: Backend) -> bool:
    """HTTPRouteRule.backendRefs: "When a HTTPBackendRef refers to a Service that has
    no ready endpoints, implementations SHOULD return a 503 for requests to that
    backend instead." A Service is without ready endpoints when EndpointSlices are
    given (or derived from its workloads) for it and none lists a ready address; a
    Service the input gives no EndpointSlice for (one without a selector) is taken
    to answer, since nothing says it does not."""
    slices = [
        s
        for s in res.endpoint_slices.values()
        if s.meta.namespace == backend.namespace and s.service_name == backend.name
    ]
    return not slices or any(s.addresses for s in slices)


# Gateway API Duration (GEP-2257): "^([0-9]{1,5}(h|m|s|ms)){1,4}$".
DURATION_UNITS_MS = {"h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}


def duration_ms(value: str | None) -> int | None:
    """Milliseconds of a GEP-2257 duration (None if absent or malformed); "0s" is
    0, which "SHOULD disable the timeout completely" (HTTPRouteTimeouts.request)."""
    if value is None:
        return None
    total, i = 0, 0
    while i < len(value):
        j = i
        while j < len(value) and value[j].isdigit():
            j += 1
        unit = "ms" if value.startswith("ms", j) else value[j : j + 1]
        if j == i or unit not in DURATION_UNITS_MS:
            return None
        total += int(value[i:j]) * DURATION_UNITS_MS[unit]
        i = j + len(unit)
    return total if value else None
