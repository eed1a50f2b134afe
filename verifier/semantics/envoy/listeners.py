"""From a connection (destination address and port, TLS, SNI) to the filter chain's terminal filter.

Envoy hands a connection to the listener bound to its exact destination address and
port, else to one bound to the wildcard address of its family (``0.0.0.0``, ``::``) on
that port (listener.proto: a listener "bound to a specific address takes precedence").
So several Gateways can share a port, each on its own address. A request whose
destination is unknown (``address`` empty) goes to the only listener on the port, or
the wildcard one. A captured connection (``Redirect``) arrives at the proxy's
capture port instead, and the ``original_dst`` listener filter restores the address
the client dialled (``downstream``). Within a listener Envoy picks a filter chain by
narrowing on ``FilterChainMatch`` fields one at a time (``chains``), falling back to
``default_filter_chain``.

The SNI and the "tls" transport protocol are known only to a listener with the TLS
inspector listener filter: Envoy 1.40 no longer injects one, so without it every
connection looks like "raw_buffer" without a server name (found on the live edge:
such a listener resets TLS clients with no_filter_chain_match).

A chain ends in an HTTP connection manager, or in ``tcp_proxy``, which passes the
connection's bytes to a cluster's host unchanged (tcp_proxy.proto: "cluster: The
upstream cluster to connect to"; ``weighted_clusters``: "Multiple upstream clusters
can be specified for a given route. The request is routed to one of the upstream
clusters based on weights").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from verifier.semantics.envoy.binding import WILDCARDS, Bound, binds, refusal, socket_of, tiers
from verifier.semantics.envoy.chains import match_chain
from verifier.semantics.envoy.downstream import Dial, Downstream, inspect
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

HCM = "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
TCP_PROXY = "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"


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
class TcpProxy:
    """A tcp_proxy filter: the clusters it connects to, with their weights."""

    clusters: tuple[tuple[str, int], ...]  # (cluster, weight); one cluster: weight 1
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Chain:
    name: str
    match: FilterChainMatch | None
    tls: bool
    hcm: Hcm | None
    problem: str = ""
    client: ClientValidation = NO_VALIDATION
    tcp: TcpProxy | None = None


@dataclass(frozen=True)
class Selected:
    """Where a connection ends up: the chain, and the connection as it sees it."""

    chain: Chain
    downstream: Downstream
    listener: str


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
        if read.is_a(msg, TCP_PROXY):
            return Chain(name, chain.filter_chain_match, tls, None, client=client, tcp=_tcp(msg))
    return Chain(
        name, chain.filter_chain_match, tls, None, "no HttpConnectionManager or tcp_proxy", client
    )


def _tcp(msg: object) -> TcpProxy:
    kind, value = read.one_of(msg, "cluster_specifier")
    notes = [
        f"tcp_proxy {field} not modelled"
        for field in ("tunneling_config", "on_demand", "metadata_match")
        if getattr(msg, field, None) is not None
    ]
    if kind == "cluster" and isinstance(value, str):
        return TcpProxy(((value, 1),), tuple(notes))
    if kind == "weighted_clusters" and value is not None:
        picks = tuple((c.name, int(c.weight or 0)) for c in value.clusters)
        return TcpProxy(picks, tuple(notes))
    return TcpProxy((), (*notes, "tcp_proxy names no cluster"))


@dataclass
class ListenerIndex:
    by_port: dict[int, list[Bound]] = field(default_factory=dict)
    # What select decided for a connection, its notes and trace: the answer depends
    # on nothing else, and check asks it for every witness.
    _selected: dict[Dial, tuple[Selected | None, list[str], list[str]]] = field(
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
                at = socket_of(sock.address, sock.port_value, sock.ipv4_compat)
                bound = Bound(at, li, chains, default, binds(li))
                index.by_port.setdefault(bound.socket.port, []).append(bound)
        return index

    def listener_for(
        self, address: str, port: int, *, handoff: bool = False
    ) -> tuple[Bound | None, list[str], str]:
        """The listener a connection to ``address``:``port`` reaches (``handoff``: the
        one a connection is handed off to, which may bind no port), notes on what is
        ambiguous, and why it was chosen (verifier.semantics.envoy.binding)."""
        found = [b for b in self.by_port.get(port) or [] if b.binds or handoff]
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

    def select(self, dial: Dial, trace: list[str]) -> tuple[Selected | None, list[str]]:
        """The filter chain for the connection ``dial`` makes, and notes on what the
        model cannot judge; the steps go to ``trace``."""
        known = self._selected.get(dial)
        if known is None:
            steps: list[str] = []
            chosen, notes = self._select(dial, steps)
            known = self._selected[dial] = (chosen, notes, steps)
        trace += known[2]
        return known[0], list(known[1])

    def _select(self, dial: Dial, trace: list[str]) -> tuple[Selected | None, list[str]]:
        address, port, redirect = dial.address, dial.port, dial.redirect
        arrived, original = (address, port), None
        if redirect is not None:
            arrived, original = (redirect.arrives_at(address), redirect.port), (address, port)
            trace.append(
                f"the connection to {address}:{port} was redirected to "
                f"{arrived[0]}:{arrived[1]} (capture)"
            )
        found, notes, why = self.listener_for(*arrived)
        if found is None:
            trace.append(f"{why}: the connection is refused")
            return None, notes
        li = found.listener
        trace.append(f"listener {li.name} (port {arrived[1]}, {why})")
        conn = inspect(li, arrived, original, dial.tls, dial.sni, trace)
        if li.use_original_dst and conn.restored:
            found, conn = self._hand_off(found, conn, dial, trace, notes)
        li, chains, default = found.listener, found.chains, found.default
        if li.filter_chain_matcher is not None:
            notes.append(f"listener {li.name}: filter_chain_matcher not modelled (ignored)")
        candidates, facts = match_chain(chains, conn, notes)
        if len(candidates) > 1:
            notes.append(
                f"{len(candidates)} filter chains match equally; Envoy rejects such listeners"
            )
        said = f"sni {conn.sni!r}, transport {conn.transport}{facts}"
        chain = candidates[0] if candidates else default
        if chain is None:
            trace.append(f"no filter chain matches ({said}): connection closed")
            return None, notes
        which = "default filter chain" if not candidates else "filter chain"
        trace.append(f"{which} {chain.name} ({said})")
        return Selected(chain, conn, li.name), notes

    def _hand_off(
        self, found: Bound, conn: Downstream, dial: Dial, trace: list[str], notes: list[str]
    ) -> tuple[Bound, Downstream]:
        """use_original_dst: "the listener hands off redirected connections to the
        listener associated with the original destination address. If there is no
        listener associated with the original destination address, the connection is
        handled by the listener that receives it." The new listener runs its own
        listener filters; what the first ones detected stays with the socket."""
        target, more, why = self.listener_for(conn.address, conn.port, handoff=True)
        if target is None or target.listener is found.listener:
            trace.append(f"use_original_dst: no other listener for {conn.address}:{conn.port}")
            return found, conn
        notes += more
        trace.append(f"use_original_dst: handed off to listener {target.listener.name} ({why})")
        again = inspect(target.listener, (conn.address, conn.port), None, dial.tls, dial.sni, trace)
        merged = Downstream(
            conn.address,
            conn.port,
            restored=True,
            sni=conn.sni or again.sni,
            transport="tls" if "tls" in (conn.transport, again.transport) else again.transport,
            application_protocols=conn.application_protocols or again.application_protocols,
        )
        return target, merged
