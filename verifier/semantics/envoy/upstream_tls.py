"""A cluster's transport to its hosts, and whether the handshake with a given peer succeeds.

From tls.proto and common.proto (Envoy 1.40), for an ``UpstreamTlsContext``:

- With a validation context, Envoy verifies the peer's certificate chain and then
  its SANs (``sans``): a certificate none of the matchers accepts fails the
  handshake ("CERTIFICATE_VERIFY_FAILED"), unless ``trust_chain_verification`` is
  ACCEPT_UNTRUSTED ("Connections where the certificate fails verification will be
  permitted"). Without one, "If not specified and a peer certificate is presented
  it will not be verified": any peer is accepted.
- The client certificate Envoy presents comes from ``tls_certificates``, SDS or a
  certificate provider; a peer that demands one (a mesh sidecar) refuses a
  cluster that has none.

Which identity a peer presents, and whether it speaks TLS at all, is the
Kubernetes side (``verifier.semantics.directory.Peer``). A failed handshake, a
refused connection, cleartext sent to a TLS-only peer and TLS sent to a cleartext
port all end the same way for an HTTP request: the router gets no response and
answers 503 ("upstream connect error or disconnect/reset before headers"). Trust
bundles live in SDS secrets or files the snapshot usually does not hold, so the
peer's CA is taken to be trusted; the SAN matchers decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from verifier.semantics.directory import Peer
from verifier.semantics.envoy.sans import SanRule, accepted_by, describe, san_rules
from verifier.xds import read
from verifier.xds.enums import CertificateValidationContextTrustChainVerification
from verifier.xds.layout import XdsLoadError

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.cluster.v3 import Cluster
    from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import (
        CertificateValidationContext,
        CommonTlsContext,
        Secret,
    )

UPSTREAM_TLS = "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
RAW_BUFFER = "envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer"
RAW_BUFFER_NAME = "envoy.transport_sockets.raw_buffer"
ACCEPT_UNTRUSTED = CertificateValidationContextTrustChainVerification.ACCEPT_UNTRUSTED


@dataclass(frozen=True)
class UpstreamTls:
    """What an UpstreamTlsContext asks of the handshake."""

    verifies: bool  # there is a validation context (the chain is verified)
    sans: tuple[SanRule, ...]  # empty: any identity the chain verification passes
    accept_untrusted: bool
    client_cert: bool  # Envoy presents a certificate of its own
    sni: str = ""

    def accepts(self) -> str:
        """Which identities it accepts, for a trace."""
        if not self.verifies or self.accept_untrusted:
            return "any certificate (not verified)"
        return f"identity {describe(self.sans)}" if self.sans else "any verified certificate"


@dataclass(frozen=True)
class Transport:
    """How a cluster speaks to its hosts: ``tls`` None is cleartext."""

    tls: UpstreamTls | None
    notes: tuple[str, ...] = ()
    known: bool = True  # False: a transport socket this model does not read


CLEARTEXT = Transport(None)


def _contexts(
    common: CommonTlsContext, secrets: Mapping[str, Secret]
) -> tuple[list[CertificateValidationContext], bool, list[str]]:
    """The validation contexts in force, whether there is any, and notes."""
    notes: list[str] = []
    combined = common.combined_validation_context
    if common.validation_context is not None:
        return [common.validation_context], True, notes
    if combined is not None:
        found = [combined.default_validation_context] if combined.default_validation_context else []
        sds = combined.validation_context_sds_secret_config
        secret = secrets.get(sds.name) if sds is not None else None
        if secret is not None and secret.validation_context is not None:
            found.append(secret.validation_context)  # merged: repeated fields add up
        return found, True, notes
    sds = common.validation_context_sds_secret_config
    if sds is not None:
        secret = secrets.get(sds.name)
        if secret is not None and secret.validation_context is not None:
            return [secret.validation_context], True, notes
        notes.append(f"validation context from SDS {sds.name!r}: taken to pin no SAN")
        return [], True, notes
    if common.validation_context_certificate_provider_instance is not None:
        notes.append("validation context from a certificate provider: taken to pin no SAN")
        return [], True, notes
    return [], False, notes


def transport(cluster: Cluster, secrets: Mapping[str, Secret] | None = None) -> Transport:
    """The cluster's transport socket, read."""
    notes = ["transport_socket_matches not modelled"] if cluster.transport_socket_matches else []
    ts = cluster.transport_socket
    if ts is None or (ts.typed_config is None and ts.name in ("", RAW_BUFFER_NAME)):
        return Transport(None, tuple(notes))
    if ts.typed_config is None:
        return Transport(None, (*notes, f"transport socket {ts.name!r} not modelled"), False)
    try:
        msg = read.unpack(ts.typed_config)
    except XdsLoadError as exc:
        return Transport(None, (*notes, str(exc)), False)
    if read.is_a(msg, RAW_BUFFER):
        return Transport(None, tuple(notes))
    if not read.is_a(msg, UPSTREAM_TLS):
        kind = read.type_name(msg) or ts.name
        return Transport(None, (*notes, f"transport socket {kind} not modelled"), False)
    common = msg.common_tls_context
    if common is None:
        return Transport(UpstreamTls(False, (), False, False, msg.sni), tuple(notes))
    contexts, verifies, more = _contexts(common, secrets or {})
    notes += more
    if msg.auto_sni_san_validation:
        notes.append("auto_sni_san_validation not modelled")
    client_cert = bool(
        common.tls_certificates
        or common.tls_certificate_sds_secret_configs
        or common.tls_certificate_provider_instance is not None
        or common.tls_certificate_certificate_provider_instance is not None
    )
    untrusted = any(int(c.trust_chain_verification) == ACCEPT_UNTRUSTED for c in contexts)
    tls = UpstreamTls(verifies, san_rules(contexts), untrusted, client_cert, msg.sni)
    return Transport(tls, tuple(notes))


@dataclass(frozen=True)
class Handshake:
    """How connecting to one host goes: ``failure`` says why it fails (None: it
    works), ``line`` how it works, for a trace (empty for plain cleartext), and
    ``identity`` the peer identity the cluster accepted over mTLS."""

    failure: str | None
    line: str = ""
    identity: str | None = None


def handshake(how: Transport, peer: Peer | None, where: str) -> Handshake:
    """Connecting to the peer at ``where`` (``peer`` None: nobody the directory knows)."""
    if peer is None or not how.known:
        if how.tls is None and how.known:
            return Handshake(None)
        speaks = "TLS" if how.tls is not None else "a transport socket not modelled"
        return Handshake(None, f"{where}: {speaks} to a peer this model does not know")
    if not peer.answers:
        return Handshake(f"{where}: {peer.why}: the connection is refused")
    tls = how.tls
    if tls is None:
        if peer.tls:
            why = f"cleartext to a TLS-only peer ({peer.why}): it closes the connection"
            return Handshake(f"{where}: {why}")
        return Handshake(None)
    if not peer.tls:
        return Handshake(f"{where}: TLS to a cleartext port ({peer.why}): the handshake fails")
    if not tls.client_cert:
        why = f"{peer.why} and demands a client certificate; the cluster has none"
        return Handshake(f"{where}: {why}")
    if tls.verifies and not tls.accept_untrusted and tls.sans:
        rule = accepted_by(tls.sans, [peer.identity or ""])
        if rule is None:
            accepts = describe(tls.sans)
            why = f"{peer.why}, which the cluster does not accept (it accepts {accepts})"
            return Handshake(f"{where}: {why}: the handshake fails")
        line = f"{where}: mTLS; {peer.why}, accepted by SAN matcher {rule.text}"
        return Handshake(None, line, peer.identity)
    line = f"{where}: mTLS; {peer.why}; the cluster accepts {tls.accepts()}"
    return Handshake(None, line, peer.identity)
