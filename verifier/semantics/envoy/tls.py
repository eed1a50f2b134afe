"""What a filter chain's DownstreamTlsContext does with a client certificate.

From tls.proto and common.proto (Envoy 1.40):

- ``require_client_certificate``: "If specified, Envoy will reject connections
  without a valid client certificate."
- ``CertificateValidationContext.trusted_ca``: "If not specified and a peer
  certificate is presented it will not be verified"; when it is set Envoy asks
  the client for a certificate and verifies one that is presented.
- ``trust_chain_verification``: "ACCEPT_UNTRUSTED: Connections where the
  certificate fails verification will be permitted."

Only CAs inlined in the xDS can be named; a bundle from a file, SDS or a
certificate provider is not in a snapshot, so a presented certificate is then
taken as verified and a note says the trust could not be checked. SAN matchers
(``match_typed_subject_alt_names``, ``match_subject_alt_names``: "the SAN is
verified if at least one matcher is matched", ``sans``) decide for a certificate
whose URI SANs are known (a mesh client's SPIFFE ID); for one whose SANs are not
known (edge witnesses), they are noted, not judged, as hash and SPKI pins are.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from verifier.semantics.envoy.sans import SanRule, accepted_by, describe, san_rules
from verifier.semantics.pem import fingerprints, short
from verifier.semantics.request import ClientCert
from verifier.xds import read
from verifier.xds.enums import CertificateValidationContextTrustChainVerification
from verifier.xds.layout import XdsLoadError

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.core.v3 import DataSource, TransportSocket
    from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import (
        CertificateValidationContext,
        SdsSecretConfig,
        Secret,
    )

ACCEPT_UNTRUSTED = CertificateValidationContextTrustChainVerification.ACCEPT_UNTRUSTED
DOWNSTREAM_TLS = "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
_PINS = ("verify_certificate_spki", "verify_certificate_hash")
_SAN_PINS = ("match_typed_subject_alt_names", "match_subject_alt_names")


@dataclass(frozen=True)
class ClientValidation:
    """A chain's client certificate policy, in the terms the handshake needs."""

    require: bool  # a connection without a (verified) certificate is refused
    asks: bool  # the server requests a certificate (there is a validation context)
    trusted: frozenset[str] | None  # CA fingerprints; None: not in the snapshot
    accept_untrusted: bool
    notes: tuple[str, ...] = ()
    sans: tuple[SanRule, ...] = ()  # empty: any identity

    def undecided(self, cert: ClientCert | None) -> bool:
        """Is it unknowable here whether ``cert`` verifies (the trusted CAs are not
        in the configuration) and would a failure refuse the handshake?"""
        return cert is not None and self.asks and self.trusted is None and not self.accept_untrusted

    def refusal(self, cert: ClientCert | None) -> str | None:
        """Why the handshake fails with ``cert``, or None."""
        if cert is None:
            return "require_client_certificate and no client certificate" if self.require else None
        if not self.asks or self.accept_untrusted:
            return None  # not verified, or failures permitted
        if self.trusted is not None and cert.issuer not in self.trusted:
            return (
                f"the client certificate (issued by CA {short(cert.issuer)}) "
                "does not verify against trusted_ca"
            )
        uris = cert.uri_sans
        if self.sans and uris is not None and accepted_by(self.sans, uris) is None:
            names = ", ".join(uris) or "none"
            return (
                f"the client certificate's URI SANs ({names}) match no SAN matcher "
                f"(it accepts {describe(self.sans)})"
            )
        return None

    def admits(self, cert: ClientCert | None) -> str | None:
        """Which identity a certificate that passes is admitted as, for a trace."""
        if cert is None or not cert.uri_sans or not self.asks:
            return None
        rule = accepted_by(self.sans, cert.uri_sans) if self.sans else None
        how = f" (SAN matcher {rule.text})" if rule is not None else ""
        return f"client identity {', '.join(cert.uri_sans)} admitted{how}"


NO_VALIDATION = ClientValidation(require=False, asks=False, trusted=None, accept_untrusted=False)


def _inline(source: DataSource | None) -> str | None:
    if source is None:
        return None
    if source.inline_string:
        return source.inline_string
    if source.inline_bytes:
        return source.inline_bytes.decode("utf-8", "replace")
    return None


def _context(ctx: CertificateValidationContext, notes: list[str]) -> frozenset[str] | None:
    pins = [p for p in _PINS if getattr(ctx, p)]
    if pins:
        notes.append(f"validation_context {', '.join(pins)} not modelled (taken as passing)")
    sans = [p for p in _SAN_PINS if getattr(ctx, p)]
    if sans:
        notes.append(
            f"validation_context {', '.join(sans)}: judged only for certificates whose "
            "SANs are known"
        )
    pem = _inline(ctx.trusted_ca)
    if pem is None:
        if ctx.trusted_ca is not None or ctx.ca_certificate_provider_instance is not None:
            notes.append("trusted_ca is not inline: client certificates taken as verified")
            return None
        return None if ctx.system_root_certs is not None else frozenset()
    return frozenset(fingerprints(pem))


def _sds_context(
    config: SdsSecretConfig | None, secrets: Mapping[str, Secret], notes: list[str]
) -> CertificateValidationContext | None:
    """The validation context an SDS secret holds, when the snapshot has it (a
    config_dump's SecretsConfigDump); None with a note when it does not."""
    name = config.name if config is not None else ""
    secret = secrets.get(name)
    if secret is not None and secret.validation_context is not None:
        return secret.validation_context
    notes.append(
        f"the validation context comes over SDS ({name or 'unnamed'}), which the snapshot "
        "does not hold: whether a client certificate verifies is left open"
    )
    return None


def client_validation(
    socket: TransportSocket | None, secrets: Mapping[str, Secret] | None = None
) -> ClientValidation:
    """The client certificate policy of a chain's transport socket (TLS or not);
    ``secrets`` are the SDS secrets the snapshot holds, by name."""
    if socket is None or socket.typed_config is None:
        return NO_VALIDATION
    try:
        msg = read.unpack(socket.typed_config)
    except XdsLoadError:
        return NO_VALIDATION  # the chain's own problem is reported where it is read
    if not read.is_a(msg, DOWNSTREAM_TLS):
        return NO_VALIDATION
    require = bool(msg.require_client_certificate)
    common = msg.common_tls_context
    notes: list[str] = []
    ctx: CertificateValidationContext | None = None
    unknown = False  # a validation context exists but its CAs are not in the snapshot
    sources: list[CertificateValidationContext] = []  # where SAN matchers come from
    if common is not None:
        if common.validation_context is not None:
            ctx = common.validation_context
        elif common.combined_validation_context is not None:
            combined = common.combined_validation_context
            # "the default validation context is merged with the SDS one": the
            # CAs come from SDS, the default may set trust_chain_verification.
            fetched = _sds_context(
                combined.validation_context_sds_secret_config, secrets or {}, notes
            )
            default = combined.default_validation_context
            # Merged as MergeFrom does: repeated fields (the SAN matchers) add up.
            sources = [c for c in (default, fetched) if c is not None]
            if fetched is None:
                ctx, unknown = default, True
            else:
                ctx = copy.deepcopy(fetched)
                if default is not None and default.trust_chain_verification:
                    ctx.trust_chain_verification = default.trust_chain_verification
        elif common.validation_context_sds_secret_config is not None:
            ctx = _sds_context(common.validation_context_sds_secret_config, secrets or {}, notes)
            unknown = ctx is None
        elif common.validation_context_certificate_provider_instance is not None:
            unknown = True
            notes.append("the validation context comes from a certificate provider: left open")
    if ctx is None and not unknown:
        return ClientValidation(require, asks=require, trusted=None, accept_untrusted=False)
    trusted = None if unknown or ctx is None else _context(ctx, notes)
    return ClientValidation(
        require,
        asks=True,
        trusted=trusted,
        accept_untrusted=ctx is not None and int(ctx.trust_chain_verification) == ACCEPT_UNTRUSTED,
        notes=tuple(notes),
        sans=san_rules(sources or ([ctx] if ctx is not None else [])),
    )
