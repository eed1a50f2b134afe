"""Which Listener of a Gateway serves a request arriving on a port.

Request-centric: given the Gateway, the port and the request's TLS server name
and Host, find the one Listener that owns the request (GatewayHTTPListenerIsolation),
or the answer the spec requires when there is none (404, 421, or no HTTP
response at all). Listener validity (class, protocol, conflicts, certificates)
is decided here too, from ``apis/v1/gateway_types.go``.
"""

from __future__ import annotations

from dataclasses import dataclass

from verifier.gatewayapi.model import Gateway, GatewayListener, SecretObjectRef
from verifier.gatewayapi.resources import Resources
from verifier.semantics.request import Request
from verifier.semantics.spec.frontend import Trust, handshake_refusal, port_trust
from verifier.semantics.spec.hostnames import hostname_matches, listener_specificity
from verifier.semantics.spec.listenersets import merged_gateway
from verifier.semantics.spec.refs import gateway_may_use

# No HTTP response at all: nothing listens on the port for this kind of
# connection, or the TLS handshake cannot complete.
NO_RESPONSE = 0

# ProtocolType: "All Core ProtocolType values MUST be treated
# case-insensitively"; "If an implementation does not support a specified
# protocol, it MUST set the "Accepted" condition to False for the affected
# Listener with a reason of "UnsupportedProtocol"." The edge serves HTTPRoutes
# on HTTP and HTTPS listeners only.
SUPPORTED_PROTOCOLS = frozenset({"HTTP", "HTTPS"})
TLS_PROTOCOLS = frozenset({"HTTPS"})

# ListenerTLSConfig.certificateRefs: "Support: Core - A single reference to a
# Kubernetes Secret of type kubernetes.io/tls"; "References to a resource in
# different namespace are invalid UNLESS there is a ReferenceGrant in the
# target namespace that allows the certificate to be attached."
CERTIFICATE_KINDS = frozenset({("", "Secret")})
TLS_SECRET_TYPE = "kubernetes.io/tls"


@dataclass(frozen=True)
class ListenerSelection:
    """The Listener that owns the request, or the status answered without one."""

    listener: GatewayListener | None
    status: int
    trace: tuple[str, ...]


def describe(lst: GatewayListener) -> str:
    host = lst.hostname or "any hostname"
    return f"listener {lst.name!r} ({lst.protocol} :{lst.port}, {host})"


def gateway_problem(res: Resources, gw: Gateway, controller_name: str) -> str | None:
    """Why this controller does not program the Gateway at all, if it does not.

    GatewayClass.controllerName: "the name of the controller that is managing
    Gateways of this class"; a Gateway of another class is someone else's.
    """
    cls = res.gateway_classes.get(gw.class_name)
    if cls is None:
        return f"GatewayClass {gw.class_name!r} does not exist"
    if cls.controller_name != controller_name:
        return (
            f"GatewayClass {gw.class_name!r} belongs to controller "
            f"{cls.controller_name!r}, not {controller_name!r}"
        )
    return None


def _conflicts(gw: Gateway) -> dict[str, str]:
    """Listener name -> why it is Conflicted.

    "ProtocolConflict: multiple Listeners are specified with the same Listener
    port number, but have conflicting protocol specifications"; "HostnameConflict:
    the Listener conflicts with hostnames in other Listeners". "If a Listener is
    conflicted, its network port should not be configured" and "The
    implementation MUST NOT pick one conflicting Listener as the winner."
    """
    out: dict[str, str] = {}
    for i, lst in enumerate(gw.listeners):
        # GEP-1713: across a Gateway and its ListenerSets "the first Listener on
        # the precedence list MUST be accepted"; later ones are conflicted.
        same_port = [
            o
            for j, o in enumerate(gw.listeners)
            if o.port == lst.port and (o.listener_set == lst.listener_set or j < i)
        ]
        if len({o.protocol.upper() for o in same_port}) > 1:
            out[lst.uid] = f"ProtocolConflict on port {lst.port}"
            continue
        twins = [o for o in same_port if (o.hostname or "") == (lst.hostname or "")]
        if len(twins) > 1:
            out[lst.uid] = f"HostnameConflict on port {lst.port}"
    return out


@dataclass(frozen=True)
class CertificateProblem:
    """Why a certificateRef cannot be used: the ResolvedRefs reason the spec gives,
    what is wrong, and the (namespace, name) of a Secret that does not exist."""

    reason: str
    detail: str
    missing: tuple[str, str] | None = None


def certificate_problem(
    res: Resources, gw: Gateway, lst: GatewayListener, ref: SecretObjectRef
) -> CertificateProblem | None:
    """Why one certificateRef cannot be used, or None.

    ListenerConditionReason: "InvalidCertificateRef ... A CertificateRef is
    considered invalid when it refers to a nonexistent or unsupported resource or
    kind, or when the data within that resource is malformed"; "RefNotPermitted
    ... references an object in another namespace, where the object in the other
    namespace does not have a ReferenceGrant explicitly allowing the reference".
    A ListenerSet's listener refers from the ListenerSet: "A ListenerSet must be
    able to reference a secret/backend in the same namespace as itself without a
    ReferenceGrant", and grants to the Gateway are not inherited."""
    invalid = "InvalidCertificateRef"
    if (ref.group, ref.kind) not in CERTIFICATE_KINDS:
        detail = f"certificateRef kind {ref.group or 'core'}/{ref.kind} is not supported"
        return CertificateProblem(invalid, detail)
    if lst.listener_set is None:
        owner_kind, owner_ns = "Gateway", gw.meta.namespace
    else:
        owner_kind, owner_ns = "ListenerSet", lst.listener_set[0]
    ns = ref.namespace or owner_ns
    allowed, why = gateway_may_use(res, owner_ns, "Secret", ns, ref.name, from_kind=owner_kind)
    if not allowed:
        detail = f"Secret {ns}/{ref.name}: RefNotPermitted ({why})"
        return CertificateProblem("RefNotPermitted", detail)
    secret = res.secrets.get((ns, ref.name))
    if secret is None:
        return CertificateProblem(invalid, f"Secret {ns}/{ref.name} does not exist", (ns, ref.name))
    if secret.type != TLS_SECRET_TYPE:
        detail = f"Secret {ns}/{ref.name} has type {secret.type}, not {TLS_SECRET_TYPE}"
        return CertificateProblem(invalid, detail)
    if "BEGIN" not in secret.cert_pem or "BEGIN" not in secret.key_pem:
        return CertificateProblem(invalid, f"Secret {ns}/{ref.name} lacks a PEM tls.crt/tls.key")
    return None


def _shared_conflict(lst: GatewayListener, peers: tuple[GatewayListener, ...]) -> str | None:
    """Conflicts with the listeners of other Gateways on the same address (shared
    addressing): one address and port cannot tell the Gateways apart, so the same
    ProtocolConflict/HostnameConflict rules apply across them, and "The
    implementation MUST NOT pick one conflicting Listener as the winner"."""
    same_port = [p for p in peers if p.port == lst.port]
    if any(p.protocol.upper() != lst.protocol.upper() for p in same_port):
        return f"ProtocolConflict on port {lst.port} with another Gateway on the shared address"
    if any((p.hostname or "") == (lst.hostname or "") for p in same_port):
        return f"HostnameConflict on port {lst.port} with another Gateway on the shared address"
    return None


def shared_peers(res: Resources, gw: Gateway, controller_name: str) -> tuple[GatewayListener, ...]:
    """Shared addressing: the programmable listeners of this controller's other
    Gateways, which share this Gateway's address."""
    found: list[GatewayListener] = []
    for key in sorted(res.gateways):
        other = res.gateways[key]
        if key == gw.meta.key or gateway_problem(res, other, controller_name) is not None:
            continue
        merged = merged_gateway(res, other)
        found += [lst for lst in merged.listeners if listener_problem(res, merged, lst) is None]
    return tuple(found)


def listener_conflict(
    gw: Gateway, lst: GatewayListener, peers: tuple[GatewayListener, ...] = ()
) -> str | None:
    """Why the Listener is Conflicted ("ProtocolConflict on port 80", "HostnameConflict
    ..."), or None; ``peers`` as for ``listener_problem``."""
    return _conflicts(gw).get(lst.uid) or _shared_conflict(lst, peers)


def listener_problem(
    res: Resources, gw: Gateway, lst: GatewayListener, peers: tuple[GatewayListener, ...] = ()
) -> str | None:
    """Why the Listener is not programmed (None when it serves traffic); ``peers`` are
    the listeners of other Gateways on the same address (shared addressing only)."""
    conflict = listener_conflict(gw, lst, peers)
    if conflict:
        return f"Conflicted: {conflict}"
    protocol = lst.protocol.upper()
    if protocol not in SUPPORTED_PROTOCOLS:
        return f"UnsupportedProtocol {lst.protocol}"
    if protocol in TLS_PROTOCOLS:
        # "TLS ... This field is required if the Protocol field is "HTTPS""; the
        # HTTPS tls mode must be Terminate; certificateRefs "is required to have
        # at least one element when the mode is set to "Terminate" (default)".
        if lst.tls_mode is None:
            return "HTTPS listener without tls"
        if lst.tls_mode != "Terminate":
            return f"tls mode {lst.tls_mode} is not Terminate"
        if not lst.certificate_refs:
            return "no certificateRefs"
        for ref in lst.certificate_refs:
            problem = certificate_problem(res, gw, lst, ref)
            if problem:
                return f"ResolvedRefs=False: {problem.detail}"
        trust = port_trust(res, gw, lst.port)
        if trust is not None and not trust.usable:
            why = "; ".join(msg for _, _, msg in trust.problems) or "no caCertificateRefs"
            return f"Accepted=False: NoValidCACertificate ({why})"
    return None


def _most_specific(listeners: list[GatewayListener], host: str) -> GatewayListener | None:
    matching = [
        lst for lst in listeners if not lst.hostname or hostname_matches(lst.hostname, host)
    ]
    matching.sort(key=lambda lst: listener_specificity(lst.hostname))
    return matching[0] if matching else None


def select_listener(
    res: Resources, gw: Gateway, request: Request, peers: tuple[GatewayListener, ...] = ()
) -> ListenerSelection:
    """The Listener that owns ``request`` on ``request.port``.

    GatewaySpec.listeners: "inbound request hostnames MUST match from the most
    specific to least specific Hostname values to choose the correct Listener
    and its associated set of Routes" and "requests SHOULD match at most one
    Listener"; "If traffic to a Gateway does not match any Listener's hostname
    ... HTTP returns a 404 status code".
    """
    trace: list[str] = []
    usable: list[GatewayListener] = []
    for lst in gw.listeners:
        if lst.port != request.port:
            continue
        problem = listener_problem(res, gw, lst, peers)
        if problem:
            trace.append(f"{describe(lst)} not programmed: {problem}")
        else:
            usable.append(lst)
    if not usable:
        trace.append(f"no programmed listener on port {request.port}: no HTTP response")
        return ListenerSelection(None, NO_RESPONSE, tuple(trace))
    tls = usable[0].protocol.upper() in TLS_PROTOCOLS
    if tls != (request.scheme == "https"):
        trace.append(
            f"port {request.port} speaks {usable[0].protocol}, request is {request.scheme}: "
            "no HTTP response"
        )
        return ListenerSelection(None, NO_RESPONSE, tuple(trace))
    host = request.hostname
    if tls:
        return _select_tls(usable, request, host, trace, port_trust(res, gw, request.port))
    chosen = _most_specific(usable, host)
    if chosen is None:
        trace.append(f"no listener hostname matches host {host!r}: 404")
        return ListenerSelection(None, 404, tuple(trace))
    trace.append(f"{describe(chosen)} is the most specific match for host {host!r}")
    return ListenerSelection(chosen, 200, tuple(trace))


def _select_tls(
    usable: list[GatewayListener],
    request: Request,
    host: str,
    trace: list[str],
    trust: Trust | None,
) -> ListenerSelection:
    """HTTPS: the SNI picks the Listener at the handshake, the Host must agree.

    Listener.hostname: "To detect misdirected requests, Gateways SHOULD match
    the authority of the requests with all the SNI hostname(s) configured
    across all the Gateway Listeners on the same port and protocol: * If
    another Listener has an exact match or more specific wildcard entry, the
    Gateway SHOULD return a 421. * If the current Listener (selected by SNI
    matching during ClientHello) does not match the Host: * If another
    Listener does match the Host, the Gateway SHOULD return a 421. * If no
    other Listener matches the Host, the Gateway MUST return a 404."
    """
    sni = request.sni if request.sni is not None else host
    by_sni = _most_specific(usable, sni)
    if by_sni is None:
        trace.append(f"no listener hostname matches SNI {sni!r}: TLS handshake fails")
        return ListenerSelection(None, NO_RESPONSE, tuple(trace))
    trace.append(f"SNI {sni!r} selects {describe(by_sni)}")
    refusal = handshake_refusal(trust, request.client_cert)
    if refusal is not None:
        trace.append(f"client certificate validation: {refusal}: TLS handshake fails")
        return ListenerSelection(None, NO_RESPONSE, tuple(trace))
    if trust is not None:
        trace.append(f"client certificate validation ({trust.validation.mode}) passes")
    by_host = _most_specific(usable, host)
    if by_host is None:
        trace.append(f"no listener hostname matches host {host!r}: 404")
        return ListenerSelection(None, 404, tuple(trace))
    if by_host is not by_sni:
        trace.append(f"host {host!r} belongs to {describe(by_host)}: 421 Misdirected Request")
        return ListenerSelection(None, 421, tuple(trace))
    trace.append(f"host {host!r} agrees with the SNI listener")
    return ListenerSelection(by_sni, 200, tuple(trace))


def listener_ports(gw: Gateway) -> tuple[int, ...]:
    return tuple(sorted({lst.port for lst in gw.listeners}))
