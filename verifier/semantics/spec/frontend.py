"""Client certificate validation at the Gateway (GEP-91, spec.tls.frontend).

Written from ``apis/v1/gateway_types.go`` (FrontendTLSValidation, TLSConfig,
TLSPortConfig): the validation of a port applies to "all Listeners handling
HTTPS traffic that match this port", is decided in the TLS handshake (so it
comes before any Host or route), and trusts the CA bundles of its valid
caCertificateRefs.
"""

from __future__ import annotations

from dataclasses import dataclass

from verifier.gatewayapi.model import (
    ALLOW_INSECURE_FALLBACK,
    ALLOW_VALID_ONLY,
    FrontendValidation,
    Gateway,
    SecretObjectRef,
)
from verifier.gatewayapi.resources import Resources
from verifier.semantics.pem import fingerprints, short
from verifier.semantics.request import ClientCert
from verifier.semantics.spec.refs import gateway_may_use

# caCertificateRefs: "Support: Core - A single reference to a Kubernetes
# ConfigMap, with the CA certificate in a key named `ca.crt`."
CA_KINDS = frozenset({("", "ConfigMap")})
CA_KEY = "ca.crt"


@dataclass(frozen=True)
class Trust:
    """What a port's validation trusts, and why each unusable reference is not used."""

    validation: FrontendValidation
    issuers: frozenset[str]
    problems: tuple[tuple[SecretObjectRef, str, str], ...]  # (ref, Reason, message)

    @property
    def usable(self) -> bool:
        """ "If ALL CACertificateRefs are invalid, ... the `Accepted` condition on
        the listener is set to `status: False`, with the Reason `NoValidCACertificate`"."""
        return bool(self.issuers)


def _resolve(res: Resources, gw: Gateway, ref: SecretObjectRef) -> tuple[str, str, tuple[str, ...]]:
    """(Reason, message, ()) for an invalid reference, else ("", "", its CA fingerprints).

    "It refers to an unknown or unsupported kind of resource ... `InvalidCACertificateKind`";
    "It refers to a resource in another namespace UNLESS there is a ReferenceGrant
    ... `RefNotPermitted`"; "It refers to a resource that cannot be resolved ... or
    is misconfigured (e.g., a ConfigMap does not contain a key named ca.crt)
    ... `InvalidCACertificateRef`".
    """
    if (ref.group, ref.kind) not in CA_KINDS:
        return (
            "InvalidCACertificateKind",
            f"caCertificateRef kind {ref.group or 'core'}/{ref.kind} is not supported",
            (),
        )
    ns = ref.namespace or gw.meta.namespace
    allowed, why = gateway_may_use(res, gw.meta.namespace, "ConfigMap", ns, ref.name)
    if not allowed:
        return "RefNotPermitted", f"ConfigMap {ns}/{ref.name}: {why}", ()
    cm = res.config_maps.get((ns, ref.name))
    if cm is None:
        return "InvalidCACertificateRef", f"ConfigMap {ns}/{ref.name} does not exist", ()
    if cm.ca_crt is None:
        return "InvalidCACertificateRef", f"ConfigMap {ns}/{ref.name} has no key {CA_KEY}", ()
    found = fingerprints(cm.ca_crt)
    if not found:
        return (
            "InvalidCACertificateRef",
            f"ConfigMap {ns}/{ref.name}: {CA_KEY} holds no PEM certificate",
            (),
        )
    return "", "", found


def port_trust(res: Resources, gw: Gateway, port: int) -> Trust | None:
    """The client certificate validation of HTTPS listeners on ``port``, or None."""
    validation = gw.frontend_validation(port)
    if validation is None:
        return None
    issuers: set[str] = set()
    problems = []
    for ref in validation.ca_refs:
        reason, message, found = _resolve(res, gw, ref)
        if reason:
            problems.append((ref, reason, message))
        issuers.update(found)
    return Trust(validation, frozenset(issuers), tuple(problems))


def handshake_refusal(trust: Trust | None, cert: ClientCert | None) -> str | None:
    """Why the TLS handshake fails for this client certificate, or None.

    AllowValidOnly: "the gateway will accept connections only if the client
    presents a valid certificate"; AllowInsecureFallback: "the gateway will
    accept connections even if the client certificate is not presented or
    fails verification".
    """
    if trust is None or trust.validation.mode == ALLOW_INSECURE_FALLBACK:
        return None
    if trust.validation.mode != ALLOW_VALID_ONLY:
        return f"unknown validation mode {trust.validation.mode!r}"
    if cert is None:
        return "AllowValidOnly and the client presents no certificate"
    if cert.issuer not in trust.issuers:
        return (
            f"AllowValidOnly and the client certificate (issued by CA {short(cert.issuer)}) "
            "does not chain to a trusted CA"
        )
    return None
