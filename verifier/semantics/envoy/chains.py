"""Which filter chain of a listener takes a connection: FilterChainMatch, as Envoy narrows it.

listener_components.proto (Envoy 1.40): "In order for a filter chain to be selected,
ALL of its criteria must be fulfilled by the incoming connection ... The following
order applies: 1. Destination port. 2. Destination IP address. 3. Server name (e.g.
SNI for TLS protocol), 4. Transport protocol. 5. Application protocols (e.g. ALPN for
TLS protocol). 6. Directly connected source IP address ... 7. Source type ... 8.
Source IP address. 9. Source port. For criteria that allow ranges or wildcards, the
most specific value in any of the configured filter chains that matches the
incoming connection is going to be used ... In each step, filter chains which most
specifically matches the attributes continue to the next step."

There is no going back (filter_chain_manager_impl.cc): once a step has kept the
chains that name a value, a later step that none of them passes ends the search
with ``default_filter_chain``, even if a chain that left the earlier field unset
would have matched ("There is entry for specific port but none of the filter chain
matches. Instead of matching catch-all port 0, the fallback filter chain is
returned"). The steps:

- destination port: chains naming the port, else chains naming none;
- destination IP: the longest ``prefix_ranges`` entry containing the address (an LC
  trie); a chain without prefix ranges stands for 0.0.0.0/0 and ::/0;
- server name: exact, then the longest ``*.suffix`` ("www.example.com will be first
  matched against www.example.com, then *.example.com, then *.com"), then chains
  without server names;
- transport protocol, then application protocols (the first protocol the connection
  has that some chain names), each falling back to chains naming none;
- the source criteria need the client's address, which a request here does not
  carry: chains that differ only there are reported, not told apart.

A listener with ``filter_chain_matcher`` ignores all of this (the matcher API), which
is not modelled.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import TYPE_CHECKING

from verifier.semantics.envoy.binding import destination
from verifier.semantics.envoy.downstream import Downstream

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.core.v3 import CidrRange
    from envoy_data_plane.envoy.config.listener.v3 import FilterChainMatch

    from verifier.semantics.envoy.listeners import Chain

# The source criteria: what the client's address decides, which a request does not say.
UNMODELLED_CRITERIA = (
    "direct_source_prefix_ranges",
    "source_type",
    "source_prefix_ranges",
    "source_ports",
)


def source_criteria(match: FilterChainMatch | None) -> list[str]:
    """The source criteria ``match`` sets (``source_type`` ANY, 0, is no criterion)."""
    if match is None:
        return []
    return [c for c in UNMODELLED_CRITERIA if getattr(match, c)]


def _narrow(
    candidates: list[Chain], get: Callable[[FilterChainMatch], object], want: object
) -> list[Chain]:
    """One FilterChainMatch field: chains that name ``want`` beat chains that leave the
    field unset; chains naming another value drop out."""
    specific = [c for c in candidates if c.match is not None and get(c.match) is not None]
    matching = [c for c in specific if c.match is not None and get(c.match) == want]
    return matching or [c for c in candidates if c not in specific]


def _server_name_rank(names: list[str], sni: str) -> int | None:
    """Higher is more specific: exact beats `*.example.com` beats `*.com`."""
    best: int | None = None
    for n in names:
        n = n.lower()
        if n == sni:
            return 1_000_000
        if n.startswith("*.") and sni.endswith(n[1:]) and len(sni) > len(n) - 1:
            best = max(best or 0, len(n))
    return best


def _by_server_name(candidates: list[Chain], sni: str) -> list[Chain]:
    ranked = [
        (_server_name_rank(c.match.server_names, sni), c)
        for c in candidates
        if c.match is not None and c.match.server_names
    ]
    hits = [(r, c) for r, c in ranked if r is not None]
    if not hits:
        return [c for c in candidates if c.match is None or not c.match.server_names]
    top = max(r for r, _ in hits)
    return [c for r, c in hits if r == top]


def _network(cidr: CidrRange) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """CidrRange.prefix_len: "Length of prefix, e.g. 0, 32. Defaults to 0 when unset."
    (Envoy rejects an address that is not an IP, or a length beyond its family's.)"""
    try:
        address = ipaddress.ip_address(cidr.address_prefix)
        return ipaddress.ip_network((address, int(cidr.prefix_len or 0)), strict=False)
    except ValueError:
        return None


def _prefix_rank(chain: Chain, ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> int | None:
    """The length of the longest prefix of ``chain`` containing ``ip``; 0 for a chain
    without prefix ranges (0.0.0.0/0, ::/0); None when none contains it."""
    ranges = chain.match.prefix_ranges if chain.match is not None else []
    if not ranges:
        return 0
    lengths = [
        net.prefixlen
        for net in (_network(r) for r in ranges)
        if net is not None and net.version == ip.version and ip in net
    ]
    return max(lengths) if lengths else None


def _by_destination_ip(candidates: list[Chain], address: str, notes: list[str]) -> list[Chain]:
    _family, dest = destination(address)
    try:
        ip = ipaddress.ip_address(dest)
    except ValueError:
        if any(c.match is not None and c.match.prefix_ranges for c in candidates):
            notes.append("destination address unknown: prefix_ranges not judged")
        return candidates
    ranked = [(_prefix_rank(c, ip), c) for c in candidates]
    hits = [(r, c) for r, c in ranked if r is not None]
    if not hits:
        return []
    top = max(r for r, _ in hits)
    return [c for r, c in hits if r == top]


def _by_application_protocol(candidates: list[Chain], protocols: tuple[str, ...]) -> list[Chain]:
    for protocol in protocols:
        named = [
            c
            for c in candidates
            if c.match is not None and protocol in c.match.application_protocols
        ]
        if named:
            return named
    return [c for c in candidates if c.match is None or not c.match.application_protocols]


def match_chain(chains: list[Chain], conn: Downstream, notes: list[str]) -> tuple[list[Chain], str]:
    """The chains left after every step Envoy takes (more than one only where the
    source criteria would decide), and what the connection showed beyond its SNI and
    transport when a chain looked at it, for a trace."""
    facts = []
    candidates = _narrow(list(chains), lambda m: m.destination_port or None, conn.port)
    if conn.restored or any(c.match is not None and c.match.destination_port for c in chains):
        facts.append(f"destination port {conn.port}")
    if any(c.match is not None and c.match.prefix_ranges for c in candidates):
        facts.append(f"destination address {destination(conn.address)[1] or '(unknown)'}")
    candidates = _by_destination_ip(candidates, conn.address, notes)
    candidates = _by_server_name(candidates, conn.sni)
    candidates = _narrow(candidates, lambda m: m.transport_protocol or None, conn.transport)
    if any(c.match is not None and c.match.application_protocols for c in candidates):
        facts.append(f"application protocols {list(conn.application_protocols)}")
    candidates = _by_application_protocol(candidates, conn.application_protocols)
    for c in candidates:
        for crit in source_criteria(c.match):
            notes.append(f"filter chain {c.name}: {crit} not modelled (ignored)")
    return candidates, "".join(f", {f}" for f in facts)
