"""Which certificate identities a validation context's subject-alt-name matchers accept.

From common.proto (CertificateValidationContext, Envoy 1.40):

- ``match_typed_subject_alt_names``: "If specified, Envoy will verify that the Subject
  Alternative Name of the presented certificate matches one of the specified
  matchers. The matching uses "any" semantics, that is to say, the SAN is verified if
  at least one matcher is matched." Each matcher names a SAN type (DNS, URI, EMAIL,
  IP_ADDRESS, OTHER_NAME) and only SANs of that type are compared
  (san_matcher.cc: ``if (general_name->type != general_name_type_) return false``).
- ``match_subject_alt_names`` (deprecated) is read as one matcher per type for DNS,
  URI, EMAIL and IP_ADDRESS, and only when no typed matcher is given
  (cert_validation_context_config_impl.cc: "Ignoring match_subject_alt_names as
  match_typed_subject_alt_names is also specified").
- A DNS matcher of kind ``exact`` follows DNS wildcard rules (``dnsNameMatch``); every
  other comparison is the StringMatcher's own.

The identities here are SPIFFE IDs, which certificates carry as URI SANs (aether's
mesh certificates carry exactly one and nothing else), so a certificate is its URI
SANs and only URI matchers (typed, or converted from the deprecated field) can
accept it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from verifier.semantics.envoy.strings import Match, describe_string_matcher, string_matcher
from verifier.xds.enums import SubjectAltNameMatcherSanType, name_of

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import (
        CertificateValidationContext,
    )
    from envoy_data_plane.envoy.type.matcher.v3 import StringMatcher

URI = "URI"
LEGACY_TYPES = ("DNS", URI, "EMAIL", "IP_ADDRESS")


@dataclass(frozen=True)
class SanRule:
    """One matcher: the SAN type it reads and what it accepts."""

    san_type: str
    accepts: Match
    text: str  # for traces: ``URI exact 'spiffe://...'``


def _rule(san_type: str, matcher: StringMatcher) -> SanRule:
    text = f"{san_type} {describe_string_matcher(matcher)}"
    return SanRule(san_type, string_matcher(matcher), text)


def san_rules(contexts: Sequence[CertificateValidationContext]) -> tuple[SanRule, ...]:
    """Every SAN matcher of ``contexts`` (a combined validation context is several:
    its default one and the one SDS delivers, whose repeated fields add up)."""
    typed = [s for ctx in contexts for s in ctx.match_typed_subject_alt_names]
    if typed:
        return tuple(
            _rule(name_of(SubjectAltNameMatcherSanType, s.san_type or 0), s.matcher)
            for s in typed
            if s.matcher is not None
        )
    legacy = [m for ctx in contexts for m in ctx.match_subject_alt_names]
    return tuple(_rule(t, m) for m in legacy for t in LEGACY_TYPES)


def accepted_by(rules: Sequence[SanRule], uris: Sequence[str]) -> SanRule | None:
    """The first matcher that accepts a certificate whose URI SANs are ``uris``."""
    for rule in rules:
        if rule.san_type == URI and any(rule.accepts(u) for u in uris):
            return rule
    return None


def describe(rules: Sequence[SanRule]) -> str:
    """What the matchers accept, for a trace."""
    uri = [r.text for r in rules if r.san_type == URI]
    others = len(rules) - len(uri)
    said = " or ".join(uri) if uri else "no URI SAN"
    return said + (f" (and {others} matcher(s) of other SAN types)" if others else "")
