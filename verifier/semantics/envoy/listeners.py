"""From a connection (destination address and port, TLS, SNI) to the HTTP connection manager.

Envoy hands a connection to the listener bound to its exact destination address and
port, else to one bound to the wildcard address of its family (``0.0.0.0``, ``::``) on
that port (listener.proto: a listener "bound to a specific address takes precedence").
So several Gateways can share a port, each on its own address. A request whose
destination is unknown (``address`` empty) goes to the only listener on the port, or
the wildcard one. Within a listener Envoy picks a filter chain by
narrowing on ``FilterChainMatch`` fields one at a time, keeping the most specific
candidates at each step (listener_components.proto: "the most specific matching
filter chain is chosen"; server names: "www.example.com will be first matched
against www.example.com, then *.example.com, then *.com", then chains without
server names), falling back to ``default_filter_chain``.

The SNI and the "tls" transport protocol are known only to a listener with the TLS
inspector listener filter: Envoy 1.40 no longer injects one, so without it every
connection looks like "raw_buffer" without a server name (found on the live edge:
such a listener resets TLS clients with no_filter_chain_match).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from verifier.semantics.envoy.binding import WILDCARDS, Bound, refusal, socket_of, tiers
from verifier.semantics.envoy.origin import DEFAULT_ORIGIN, OriginConfig
from verifier.semantics.envoy.tls import NO_VALIDATION, ClientValidation, client_validation
from verifier.xds import read
from verifier.xds.enums import HttpConnectionManagerPathWithEscapedSlashesAction
from verifier.xds.layout import XdsLoadError

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.listener.v3 import FilterChain, FilterChainMatch, Listener
    from envoy_data_plane.envoy.config.route.v3 import RouteConfiguration
    from envoy_data_plane.envoy.extensions.filters.network.http_connection_manager.v3 import (
        HttpConnectionManager,
    )
    from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import Secret

Escaped = HttpConnectionManagerPathWithEscapedSlashesAction

# path_with_escaped_slashes_action: "IMPLEMENTATION_SPECIFIC_DEFAULT: Default behavior
# specific to implementation (i.e. Envoy) of this configuration option. ... by default
# KEEP_UNCHANGED" (the runtime override is not modelled).
ESCAPED_DEFAULT = Escaped.KEEP_UNCHANGED

# FilterChainMatch fields that depend on the client's network identity or ALPN: a
# request in our vocabulary says nothing about them, so they are not narrowed on.
TLS_INSPECTOR_NAME = "envoy.filters.listener.tls_inspector"
TLS_INSPECTOR_TYPE = "envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"
HCM = "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
UNMODELLED_CRITERIA = (
    "prefix_ranges",
    "direct_source_prefix_ranges",
    "source_prefix_ranges",
    "source_ports",
    "application_protocols",
)


CORS_FILTER_TYPE = "envoy.extensions.filters.http.cors.v3.Cors"


@dataclass(frozen=True)
class Hcm:
    """The HttpConnectionManager settings that change what routing sees."""

    route_config: RouteConfiguration | None
    route_config_name: str
    normalize_path: bool
    merge_slashes: bool
    escaped_slashes: int  # an Escaped, or a number Envoy's enum does not define
    strip_port: str  # "" | "any" | "matching"
    strip_trailing_dot: bool
    upgrades: dict[str, bool]  # lower-cased upgrade type -> allowed
    cors_filter: str | None  # name of the CORS http filter, which keys per-route config
    notes: tuple[str, ...] = ()
    # Http1ProtocolOptions.allow_custom_methods: without it the HTTP/1 codec answers
    # a method outside its list with 400 (checked on Envoy 1.40: `FOO` and `get`).
    custom_methods: bool = False
    # What decides whether a request is internal, and its x-forwarded-proto (origin.py).
    origin: OriginConfig = DEFAULT_ORIGIN


@dataclass(frozen=True)
class Chain:
    name: str
    match: FilterChainMatch | None
    tls: bool
    hcm: Hcm | None
    problem: str = ""
    client: ClientValidation = NO_VALIDATION


def _hcm(msg: HttpConnectionManager, routes: dict[str, RouteConfiguration]) -> Hcm:
    notes: list[str] = []
    kind, _ = read.one_of(msg, "route_specifier")
    rc: RouteConfiguration | None = None
    rc_name = ""
    if kind == "rds" and msg.rds is not None:
        rc_name = msg.rds.route_config_name
        rc = routes.get(rc_name)
        if rc is None:
            notes.append(f"RDS route configuration {rc_name!r} is not in the snapshot")
    elif kind == "route_config":
        rc = msg.route_config
        rc_name = rc.name if rc else ""
    else:
        notes.append(f"route specifier {kind or '<unset>'} not modelled")
    strip, _ = read.one_of(msg, "strip_port_mode")
    escaped = int(msg.path_with_escaped_slashes_action)  # an enum member or (record) an int
    if escaped == Escaped.IMPLEMENTATION_SPECIFIC_DEFAULT:
        escaped = ESCAPED_DEFAULT
    cors = None
    for f in msg.http_filters:
        typed = f.typed_config.type_url if f.typed_config is not None else ""
        if typed.endswith(CORS_FILTER_TYPE) or (not typed and f.name == "envoy.filters.http.cors"):
            cors = f.name
    if msg.path_normalization_options is not None:
        notes.append("path_normalization_options not modelled")
    origin, origin_notes = OriginConfig.of(msg)
    notes += origin_notes
    strip_port = ""
    if strip == "strip_any_host_port" and msg.strip_any_host_port:
        strip_port = "any"
    elif strip == "strip_matching_host_port" and msg.strip_matching_host_port:
        strip_port = "matching"
    return Hcm(
        route_config=rc,
        route_config_name=rc_name,
        normalize_path=bool(msg.normalize_path),
        merge_slashes=bool(msg.merge_slashes),
        escaped_slashes=escaped,
        strip_port=strip_port,
        strip_trailing_dot=bool(msg.strip_trailing_host_dot),
        upgrades={u.upgrade_type.lower(): u.enabled is not False for u in msg.upgrade_configs},
        cors_filter=cors,
        notes=tuple(notes),
        custom_methods=bool(
            msg.http_protocol_options is not None and msg.http_protocol_options.allow_custom_methods
        ),
        origin=origin,
    )


def _chain(
    chain: FilterChain,
    routes: dict[str, RouteConfiguration],
    where: str,
    secrets: Mapping[str, Secret] | None = None,
) -> Chain:
    tls = chain.transport_socket is not None and chain.transport_socket.name != (
        "envoy.transport_sockets.raw_buffer"
    )
    name = chain.name or where
    client = client_validation(chain.transport_socket, secrets) if tls else NO_VALIDATION
    for f in chain.filters:
        if f.typed_config is None:
            continue
        try:
            msg = read.unpack(f.typed_config)
        except XdsLoadError as exc:
            return Chain(name, chain.filter_chain_match, tls, None, str(exc), client)
        if read.is_a(msg, HCM):
            return Chain(name, chain.filter_chain_match, tls, _hcm(msg, routes), client=client)
    return Chain(name, chain.filter_chain_match, tls, None, "no HttpConnectionManager", client)


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


def has_tls_inspector(listener: Listener) -> bool:
    for f in listener.listener_filters:
        url = f.typed_config.type_url if f.typed_config is not None else ""
        if url.endswith(TLS_INSPECTOR_TYPE) or (not url and f.name == TLS_INSPECTOR_NAME):
            return True
    return False


def _narrow(
    candidates: list[Chain], get: Callable[[FilterChainMatch], object], want: object
) -> list[Chain]:
    """One FilterChainMatch field: chains that name ``want`` beat chains that leave the
    field unset; chains naming another value drop out."""
    specific = [c for c in candidates if c.match is not None and get(c.match) is not None]
    matching = [c for c in specific if c.match is not None and get(c.match) == want]
    return matching or [c for c in candidates if c not in specific]


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


@dataclass
class ListenerIndex:
    by_port: dict[int, list[Bound]] = field(default_factory=dict)
    # (address, port, tls, sni) -> what select decided, its notes and trace: the
    # answer depends on nothing else, and check asks it for every witness.
    _selected: dict[tuple[str, int, bool, str], tuple[Chain | None, list[str], list[str]]] = field(
        default_factory=dict
    )

    @classmethod
    def build(
        cls,
        listeners: tuple[Listener, ...],
        routes: dict[str, RouteConfiguration],
        secrets: Mapping[str, Secret] | None = None,
    ) -> ListenerIndex:
        index = cls()
        for li in listeners:
            addresses = [li.address] + [a.address for a in li.additional_addresses]
            chains = [
                _chain(c, routes, f"{li.name}[{i}]", secrets)
                for i, c in enumerate(li.filter_chains)
            ]
            default = (
                _chain(li.default_filter_chain, routes, f"{li.name}[default]", secrets)
                if li.default_filter_chain
                else None
            )
            for addr in addresses:
                sock = addr.socket_address if addr is not None else None
                if sock is None:
                    continue
                bound = Bound(
                    socket_of(sock.address, sock.port_value, sock.ipv4_compat), li, chains, default
                )
                index.by_port.setdefault(bound.socket.port, []).append(bound)
        return index

    def listener_for(self, address: str, port: int) -> tuple[Bound | None, list[str], str]:
        """The listener a connection to ``address``:``port`` reaches, notes on what is
        ambiguous, and why it was chosen (verifier.semantics.envoy.binding)."""
        found = self.by_port.get(port) or []
        if not found:
            return None, [], f"no listener on port {port}"
        notes: list[str] = []
        if not address:
            pick = [b for b in found if b.address in WILDCARDS] or found
            if len(found) > 1:
                notes.append(
                    f"{len(found)} listeners on port {port} and no destination address: "
                    f"the first {'wildcard one' if pick is not found else 'one'} is used"
                )
            return pick[0], notes, "the listener on the port"
        for candidates, why in tiers(found, address):
            if candidates:
                if len(candidates) > 1:
                    notes.append(
                        f"{len(candidates)} listeners bound to {candidates[0].address}:{port}; "
                        "the first is used"
                    )
                return candidates[0], notes, why
        return None, [], refusal(found, address, port)

    def select(
        self, address: str, port: int, tls: bool, sni: str, trace: list[str]
    ) -> tuple[Chain | None, list[str]]:
        """The filter chain for a connection to ``address``:``port``, and notes on what
        the model cannot judge; the steps go to ``trace``."""
        key = (address, port, tls, sni)
        known = self._selected.get(key)
        if known is None:
            steps: list[str] = []
            chain, notes = self._select(address, port, tls, sni, steps)
            known = self._selected[key] = (chain, notes, steps)
        trace += known[2]
        return known[0], list(known[1])

    def _select(
        self, address: str, port: int, tls: bool, sni: str, trace: list[str]
    ) -> tuple[Chain | None, list[str]]:
        found, notes, why = self.listener_for(address, port)
        if found is None:
            trace.append(f"{why}: the connection is refused")
            return None, notes
        li, chains, default = found.listener, found.chains, found.default
        trace.append(f"listener {li.name} (port {port}, {why})")
        transport = "tls" if tls else "raw_buffer"
        if tls and not has_tls_inspector(li):
            trace.append(
                "the listener has no TLS inspector: filter chains see no SNI and raw_buffer"
            )
            transport, sni = "raw_buffer", ""
        candidates = _narrow(list(chains), lambda m: m.destination_port or None, port)
        candidates = _by_server_name(candidates, sni)
        candidates = _narrow(candidates, lambda m: m.transport_protocol or None, transport)
        for c in candidates:
            for crit in UNMODELLED_CRITERIA:
                if c.match is not None and getattr(c.match, crit):
                    notes.append(f"filter chain {c.name}: {crit} not modelled (ignored)")
        if len(candidates) > 1:
            notes.append(
                f"{len(candidates)} filter chains match equally; Envoy rejects such listeners"
            )
        chain = candidates[0] if candidates else default
        if chain is None:
            trace.append(f"no filter chain matches (sni {sni!r}, {transport}): connection closed")
            return None, notes
        why = "default filter chain" if not candidates else "filter chain"
        trace.append(f"{why} {chain.name} (sni {sni!r}, transport {transport})")
        return chain, notes
