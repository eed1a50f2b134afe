"""Internal versus external requests, and the scheme Envoy takes a request to have come by.

Before routing, the HTTP connection manager rewrites some request headers
(``ConnectionManagerUtility::mutateRequestHeaders``, Envoy 1.40), and routing sees the
result:

- It removes the client's ``x-envoy-internal`` ("Clean proxy headers":
  ``removeEnvoyInternalRequest``) and sets it to "true" for an internal request only.
- "If we are 'using remote address' ... the trusted client address is the source
  address of the immediate downstream's connection to us", and
  ``allow_trusted_address_checks = request_headers.ForwardedFor() == nullptr``: with
  ``use_remote_address`` a request that arrives with x-forwarded-for is external.
  Without it the address comes from x-forwarded-for (``getLastAddressFromXFF``: the
  entry ``xff_num_trusted_hops`` from the end, trusted only when the header holds
  that single address and no hop is skipped).
- "const bool internal_request = allow_trusted_address_checks && final_remote_address
  != nullptr && config.internalAddressConfig().isInternalAddress(...)". With no
  ``internal_address_config`` no address is internal (the RFC 1918 default went with
  ``envoy.reloadable_features.explicit_internal_address_config``, removed in 1.36).
- An external request loses the x-envoy-* headers ``cleanInternalHeaders`` lists, an
  edge one (``use_remote_address``) three more, and both the route configuration's
  ``internal_only_headers``.
- x-forwarded-proto: with ``use_remote_address`` "If the prior hop is not a trusted
  proxy, overwrite any x-forwarded-proto ... value it set as untrusted"; else the
  client's is kept, and set from the connection when absent; ``scheme_to_overwrite``
  sets both it and :scheme; :scheme is x-forwarded-proto when that is a valid scheme.

Checked on Envoy 1.40 (tests/test_dual_stack.py): a loopback, RFC 1918 or any other
client is external without ``internal_address_config``; with its ranges, a client in
them is internal; without ``use_remote_address`` one x-forwarded-for entry in the
ranges makes the request internal, two entries or a trailing comma do not.

The request does not say where the client connects from: with ``use_remote_address``
and ranges to compare it with, whether it is internal is unknown (``internal`` None),
and an answer that depends on it says so (a caveat), taking it as external.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from verifier.semantics.request import Caveat, Headers
from verifier.xds.enums import VirtualHostTlsRequirementType as TlsRequirement

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.extensions.filters.network.http_connection_manager.v3 import (
        HttpConnectionManager,
    )

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

UNKNOWN_ORIGIN = "whether the client's address is in internal_address_config's ranges"
INTERNAL_HEADER = "x-envoy-internal"
FORWARDED_FOR = "x-forwarded-for"
FORWARDED_PROTO = "x-forwarded-proto"
# cleanInternalHeaders: "Headers to be stripped from edge *and* intermediate-hop
# external requests"; and, for edge requests only, the three before them.
EXTERNAL_STRIPPED = (
    "x-envoy-retriable-status-codes",
    "x-envoy-retriable-header-names",
    "x-envoy-retry-on",
    "x-envoy-retry-grpc-on",
    "x-envoy-max-retries",
    "x-envoy-upstream-alt-stat-name",
    "x-envoy-upstream-rq-timeout-ms",
    "x-envoy-upstream-rq-per-try-timeout-ms",
    "x-envoy-upstream-rq-timeout-alt-response",
    "x-envoy-expected-rq-timeout-ms",
    "x-envoy-force-trace",
    "x-envoy-ip-tags",
    "x-envoy-original-url",
    "x-envoy-hedge-on-per-try-timeout",
)
EDGE_STRIPPED = (
    "x-envoy-decorator-operation",
    "x-envoy-downstream-service-cluster",
    "x-envoy-downstream-service-node",
)
# What the router reads from a request that keeps them (an internal one): retries and
# timeouts the model does not follow.
ROUTER_READS = frozenset(EXTERNAL_STRIPPED) - {"x-envoy-force-trace", "x-envoy-ip-tags"}


@dataclass(frozen=True)
class OriginConfig:
    """The HCM fields that decide a request's origin and scheme."""

    use_remote_address: bool = False
    trusted_hops: int = 0
    internal_ranges: tuple[Network, ...] = ()
    detection_extensions: bool = False  # original_ip_detection_extensions
    scheme_to_overwrite: str = ""

    @classmethod
    def of(cls, msg: HttpConnectionManager) -> tuple[OriginConfig, list[str]]:
        """The settings, and notes on what could not be read."""
        notes: list[str] = []
        ranges: list[Network] = []
        config = msg.internal_address_config
        for cidr in config.cidr_ranges if config is not None else ():
            prefix = cidr.prefix_len if cidr.prefix_len is not None else None
            text = f"{cidr.address_prefix}/{prefix}" if prefix is not None else cidr.address_prefix
            try:
                ranges.append(ipaddress.ip_network(text, strict=False))
            except ValueError:
                notes.append(f"internal_address_config range {text!r} is not a CIDR range")
        transform = msg.scheme_header_transformation
        return (
            cls(
                use_remote_address=bool(msg.use_remote_address),
                trusted_hops=int(msg.xff_num_trusted_hops or 0),
                internal_ranges=tuple(ranges),
                detection_extensions=bool(msg.original_ip_detection_extensions),
                scheme_to_overwrite=(transform.scheme_to_overwrite or "") if transform else "",
            ),
            notes,
        )

    def internal_address(self, text: str) -> bool:
        try:
            ip = ipaddress.ip_address(text)
        except ValueError:
            return False
        return any(ip in net for net in self.internal_ranges if net.version == ip.version)


DEFAULT_ORIGIN = OriginConfig()


@dataclass(frozen=True)
class Origin:
    """What the HCM decided: ``internal`` (None: it depends on the client's address,
    which the request does not carry), the x-forwarded-proto and :scheme routing
    sees, and why."""

    internal: bool | None
    forwarded_proto: str
    scheme: str
    why: str


def _header(headers: Headers, name: str) -> str | None:
    """A header's values as one, joined by "," (as the codec joins repeated ones)."""
    for key, values in headers:
        if key == name:
            return ",".join(values)
    return None


def last_from_xff(xff: str | None, skip: int) -> tuple[str | None, bool]:
    """``Utility::getLastAddressFromXFF``: the address ``skip`` entries from the end
    (None if that is no IP), and whether the header was that single address."""
    if xff is None:
        return None, False
    for _ in range(skip):
        comma = xff.rfind(",")
        if comma == -1:
            return None, False
        xff = xff[:comma]
    comma = xff.rfind(",")
    if comma != -1 and comma + 1 < len(xff):
        xff = xff[comma + 1 :]
    text = xff.strip()
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return None, False
    return text, comma == -1 and skip == 0


def decide(config: OriginConfig, headers: Headers, connection_scheme: str) -> Origin:
    """Internal or external, and the scheme, for a request with these headers."""
    xff = _header(headers, FORWARDED_FOR)
    client_proto = _header(headers, FORWARDED_PROTO)
    internal: bool | None
    if config.use_remote_address:
        keep_proto = config.trusted_hops > 0 and client_proto is not None
        proto = client_proto if keep_proto and client_proto is not None else connection_scheme
        if xff is not None:
            internal, why = False, "external: use_remote_address and x-forwarded-for is present"
        elif not config.internal_ranges:
            internal, why = False, "external: no internal_address_config range"
        else:
            internal = None
            why = "internal only if the client's address is in internal_address_config"
    else:
        proto = client_proto if client_proto is not None else connection_scheme
        if not config.internal_ranges:
            internal, why = False, "external: no internal_address_config range"
        elif config.detection_extensions:
            internal, why = None, "internal as original_ip_detection_extensions find"
        else:
            address, single = last_from_xff(xff, config.trusted_hops)
            internal = single and address is not None and config.internal_address(address)
            why = (
                f"{'internal' if internal else 'external'}: x-forwarded-for "
                f"{xff!r} ({'one address' if single else 'not one trusted address'})"
            )
    if config.scheme_to_overwrite:
        proto = config.scheme_to_overwrite
    scheme = proto.lower() if proto.lower() in ("http", "https") else connection_scheme
    return Origin(internal, proto, scheme, why)


def hcm_headers(
    headers: Headers, origin: Origin, config: OriginConfig, internal_only: tuple[str, ...]
) -> tuple[Headers, dict[str, str]]:
    """The client's headers as the HCM forwards them, and the ones it sets for routing.

    Forwarded: without the client's x-envoy-internal and, for a request that is not
    known to be internal, without what Envoy strips from external ones (the HCM's own
    x-forwarded-* and x-envoy-* additions are not modelled: ``Outcome``). Set for
    routing: x-forwarded-proto, :scheme and, for an internal request,
    ``x-envoy-internal: true``."""
    set_by_hcm = {FORWARDED_PROTO: origin.forwarded_proto, ":scheme": origin.scheme}
    if origin.internal:
        set_by_hcm[INTERNAL_HEADER] = "true"
    if not any(k.startswith("x-envoy-") or k in internal_only for k, _ in headers):
        return headers, set_by_hcm  # nearly every request
    drop = {INTERNAL_HEADER}
    if origin.internal is not True:
        drop.update(EXTERNAL_STRIPPED, internal_only)
        if config.use_remote_address:
            drop.update(EDGE_STRIPPED)
    return tuple((k, v) for k, v in headers if k not in drop), set_by_hcm


def depends_on_origin(
    headers: Headers, config: OriginConfig, internal_only: tuple[str, ...]
) -> list[str]:
    """The headers of this request whose fate depends on an unknown origin."""
    stripped = set(EXTERNAL_STRIPPED) | set(internal_only)
    if config.use_remote_address:
        stripped |= set(EDGE_STRIPPED)
    return [k for k, _ in headers if k in stripped]


def tls_redirect(need: int, origin: Origin) -> tuple[bool, str, Caveat | None]:
    """Whether VirtualHost.require_tls sends the request a 301 to https, the trace
    line, and the caveat when that rests on an unknown origin.

    ALL: "All requests must use TLS. If a request is not using TLS, a 301 redirect
    will be sent telling the client to use HTTPS"; EXTERNAL_ONLY: "External requests
    must use TLS". Envoy judges by the x-forwarded-proto the HCM left
    (``getForwardedProtoValue() != "https"``) and by x-envoy-internal (checked on
    Envoy 1.40: an internal request is not redirected; a client's
    ``x-forwarded-proto: https`` counts without use_remote_address)."""
    if need == TlsRequirement.NONE or origin.forwarded_proto == "https":
        return False, "", None
    if need == TlsRequirement.EXTERNAL_ONLY and origin.internal:
        return False, "virtual host requires TLS of external requests; this one is internal", None
    caveat = None
    if need == TlsRequirement.EXTERNAL_ONLY and origin.internal is None:
        caveat = Caveat(UNKNOWN_ORIGIN, "taken as external: 301 to https")
    return True, "virtual host requires TLS: 301 to https", caveat
