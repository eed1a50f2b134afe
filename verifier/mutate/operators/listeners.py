"""Mutation operators on listeners, route configurations and virtual host domains."""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable, Iterator

from envoy_data_plane.envoy.config.listener.v3 import FilterChain, Listener
from envoy_data_plane.envoy.config.route.v3 import RouteConfiguration, VirtualHost
from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import (
    CertificateValidationContextTrustChainVerification,
    DownstreamTlsContext,
)
from envoy_data_plane.google.protobuf import Any

from verifier.mutate.core import (
    Mutant,
    Operator,
    Site,
    each_vhost,
    vhost_path,
    with_listener,
    with_route_config,
    with_vhost,
)
from verifier.mutate.proofs import prove_domain_change, prove_ignore_port
from verifier.semantics.envoy.tls import ClientValidation, client_validation
from verifier.semantics.request import ClientCert
from verifier.xds.codec import XdsLoadError, unpack_any
from verifier.xds.snapshot import WILDCARD_ADDRESSES, Snapshot

# --- listeners, route configurations, virtual hosts ----------------------------------------------


def _listener_builder(
    snap: Snapshot, k: int, fn: Callable[[Listener], None] | None
) -> Callable[[], Snapshot]:
    return lambda: with_listener(snap, k, fn)


def _rc_builder(
    snap: Snapshot, i: int, fn: Callable[[RouteConfiguration], None]
) -> Callable[[], Snapshot]:
    return lambda: with_route_config(snap, i, fn)


def _vhost_builder(
    snap: Snapshot, i: int, j: int, fn: Callable[[VirtualHost], None]
) -> Callable[[], Snapshot]:
    return lambda: with_vhost(snap, i, j, fn)


def _drop_listener(snap: Snapshot) -> Iterator[Site]:
    for k, li in enumerate(snap.listeners):
        yield Site(
            f"listeners[{li.name}]", f"listener {li.name} removed", _listener_builder(snap, k, None)
        )


def _port_of(li: Listener) -> int | None:
    sock = li.address.socket_address if li.address else None
    return None if sock is None else sock.port_value or 0


def _set_port(port: int) -> Callable[[Listener], None]:
    def apply(li: Listener) -> None:
        assert li.address is not None and li.address.socket_address is not None
        li.address.socket_address.port_value = port

    return apply


def _listener_port(snap: Snapshot) -> Iterator[Site]:
    used = {_port_of(li) for li in snap.listeners}
    for k, li in enumerate(snap.listeners):
        old = _port_of(li)
        if old is None:
            continue
        new = old % 65535 + 1
        while new in used:
            new = new % 65535 + 1
        yield Site(
            f"listeners[{li.name}].address.socket_address.port_value",
            f"port {old} -> {new}",
            _listener_builder(snap, k, _set_port(new)),
        )


# --- per-Gateway addressing: a listener or virtual host on the wrong Gateway --------------------


def _address_of(li: Listener) -> str | None:
    sock = li.address.socket_address if li.address else None
    return None if sock is None else sock.address or ""


def _set_address(address: str) -> Callable[[Listener], None]:
    def apply(li: Listener) -> None:
        assert li.address is not None and li.address.socket_address is not None
        li.address.socket_address.address = address

    return apply


def _other_address(snap: Snapshot, k: int) -> str | None:
    """Another Gateway's address whose port is free there, else the next free address
    after this one: where a translator that mixed Gateways up would bind it."""
    li = snap.listeners[k]
    old, port = _address_of(li), _port_of(li)
    bound = {(_address_of(x), _port_of(x)) for x in snap.listeners}
    found = {_address_of(x) for x in snap.listeners}
    others = sorted(a for a in found if a is not None and a != old and a not in WILDCARD_ADDRESSES)
    for candidate in others:
        if (candidate, port) not in bound:
            return candidate
    parts = (old or "").split(".")
    if len(parts) != 4 or not all(p.isdigit() for p in parts):
        return None
    for step in range(1, 255):
        candidate = ".".join([*parts[:3], str((int(parts[3]) + step - 1) % 254 + 1)])
        if candidate not in others and (candidate, port) not in bound:
            return candidate
    return None


def _rebind_address(snap: Snapshot) -> Iterator[Site]:
    for k, li in enumerate(snap.listeners):
        old = _address_of(li)
        if old in WILDCARD_ADDRESSES or old is None:
            continue  # a wildcard listener serves every address: nothing to mix up
        new = _other_address(snap, k)
        if new is not None:
            yield Site(
                f"listeners[{li.name}].address.socket_address.address",
                f"address {old} -> {new}",
                _listener_builder(snap, k, _set_address(new)),
            )


def _forwards(vh: VirtualHost) -> bool:
    return any(r.route is not None for r in vh.routes)


def _move_vhost(src: int, j: int, dst: int) -> Callable[[Snapshot], Snapshot]:
    def apply(snap: Snapshot) -> Snapshot:
        routes = list(snap.routes)
        moved = routes[src].virtual_hosts[j]
        routes[src] = copy.copy(routes[src])
        routes[src].virtual_hosts = [v for i, v in enumerate(routes[src].virtual_hosts) if i != j]
        routes[dst] = copy.copy(routes[dst])
        routes[dst].virtual_hosts = [*routes[dst].virtual_hosts, moved]
        return dataclasses.replace(snap, routes=tuple(routes))

    return apply


def _vhost_to_other_gateway(snap: Snapshot) -> Iterator[Site]:
    """A virtual host that forwards, moved into the first other route configuration
    (another Gateway's listener, per-Gateway addressing) that has none of its domains
    (Envoy refuses a domain twice in one configuration)."""
    for i, j, vh in each_vhost(snap):
        if not _forwards(vh):
            continue
        for k, rc in enumerate(snap.routes):
            taken = {d for v in rc.virtual_hosts for d in v.domains}
            if k == i or taken & set(vh.domains):
                continue
            yield Site(
                vhost_path(snap.routes[i], vh),
                f"virtual host moved to route configuration {rc.name}",
                functools.partial(_move_vhost(i, j, k), snap),
            )
            break


def _no_ignore_port(c: RouteConfiguration) -> None:
    c.ignore_port_in_host_matching = False


def _ignore_port(snap: Snapshot) -> Iterator[Site]:
    for k, rc in enumerate(snap.routes):
        if rc.ignore_port_in_host_matching and rc.virtual_hosts:  # no vhosts: always 404
            yield Site(
                f"routes[{rc.name}].ignore_port_in_host_matching",
                "ignore_port_in_host_matching dropped",
                _rc_builder(snap, k, _no_ignore_port),
            )


def _without_vhost(j: int) -> Callable[[RouteConfiguration], None]:
    def apply(c: RouteConfiguration) -> None:
        del c.virtual_hosts[j]

    return apply


def _without_domain(d: int) -> Callable[[VirtualHost], None]:
    def apply(v: VirtualHost) -> None:
        del v.domains[d]

    return apply


def _with_domain(domain: str) -> Callable[[VirtualHost], None]:
    def apply(v: VirtualHost) -> None:
        v.domains.append(domain)

    return apply


def _drop_domain(snap: Snapshot) -> Iterator[Site]:
    for i, j, vh in each_vhost(snap):
        base = vhost_path(snap.routes[i], vh)
        if len(vh.domains) == 1:
            yield Site(
                base,
                f"only domain {vh.domains[0]!r} dropped (with its virtual host)",
                _rc_builder(snap, i, _without_vhost(j)),
            )
            continue
        for d, domain in enumerate(vh.domains):
            yield Site(
                f"{base}.domains[{d}]",
                f"domain {domain!r} dropped",
                _vhost_builder(snap, i, j, _without_domain(d)),
            )


def _wildcard_for(rc: RouteConfiguration, vh: VirtualHost) -> str | None:
    taken = {d for v in rc.virtual_hosts for d in v.domains}
    if "*" not in taken:
        return "*"
    for d in vh.domains:
        if "*" not in d and "." in d:
            candidate = "*." + d.split(".", 1)[1]
            if candidate not in taken:
                return candidate
    return None


def _add_wildcard(snap: Snapshot) -> Iterator[Site]:
    for i, j, vh in each_vhost(snap):
        new = _wildcard_for(snap.routes[i], vh)
        if new is not None:
            yield Site(
                f"{vhost_path(snap.routes[i], vh)}.domains",
                f"domain {new!r} added",
                _vhost_builder(snap, i, j, _with_domain(new)),
            )


# --- client certificate validation (DownstreamTlsContext) ----------------------------------------

TlsEdit = Callable[[DownstreamTlsContext], None]


def _tls_of(chain: FilterChain) -> DownstreamTlsContext | None:
    socket = chain.transport_socket
    if socket is None or socket.typed_config is None:
        return None
    try:
        msg = unpack_any(socket.typed_config)
    except XdsLoadError:
        return None
    return msg if isinstance(msg, DownstreamTlsContext) else None


def _edit_tls(c: int, edit: TlsEdit) -> Callable[[Listener], None]:
    def apply(li: Listener) -> None:
        chain = li.filter_chains[c]
        tls = _tls_of(chain)
        assert tls is not None and chain.transport_socket is not None
        edit(tls)
        chain.transport_socket.typed_config = Any.pack(tls)

    return apply


def _tls_sites(
    snap: Snapshot, applies: Callable[[DownstreamTlsContext], bool], detail: str, edit: TlsEdit
) -> Iterator[Site]:
    for k, li in enumerate(snap.listeners):
        for c, chain in enumerate(li.filter_chains):
            tls = _tls_of(chain)
            if tls is not None and applies(tls):
                yield Site(
                    f"listeners[{li.name}].filter_chains[{c}].transport_socket",
                    f"{chain.name or c}: {detail}",
                    _listener_builder(snap, k, _edit_tls(c, edit)),
                )


def _has_validation(tls: DownstreamTlsContext) -> bool:
    common = tls.common_tls_context
    return bool(tls.require_client_certificate) or (
        common is not None and common.validation_context is not None
    )


def _drop_validation(tls: DownstreamTlsContext) -> None:
    tls.require_client_certificate = None
    if tls.common_tls_context is not None:
        tls.common_tls_context.validation_context = None


def _verifies(tls: DownstreamTlsContext) -> bool:
    common = tls.common_tls_context
    ctx = common.validation_context if common is not None else None
    return ctx is not None and ctx.trust_chain_verification != (
        CertificateValidationContextTrustChainVerification.ACCEPT_UNTRUSTED
    )


def _accept_untrusted(tls: DownstreamTlsContext) -> None:
    assert tls.common_tls_context is not None and tls.common_tls_context.validation_context
    tls.common_tls_context.validation_context.trust_chain_verification = (
        CertificateValidationContextTrustChainVerification.ACCEPT_UNTRUSTED
    )


def _requires(tls: DownstreamTlsContext) -> bool:
    return bool(tls.require_client_certificate)


def _no_require(tls: DownstreamTlsContext) -> None:
    tls.require_client_certificate = None


def _client_validations(snap: Snapshot) -> list[ClientValidation]:
    return [
        client_validation(chain.transport_socket)
        for li in snap.listeners
        for chain in li.filter_chains
    ]


def prove_same_client_validation(original: Snapshot, mutant: Mutant) -> bool:
    """Every chain refuses exactly the same clients. The handshake depends only on
    whether a certificate is presented and whether its issuer is in the trusted
    set, so no certificate, one of each CA either side trusts, and one of a CA
    neither trusts cover every client."""
    before, after = _client_validations(original), _client_validations(mutant.snapshot)
    if len(before) != len(after):
        return False
    for a, b in zip(before, after, strict=True):
        issuers = (a.trusted or frozenset()) | (b.trusted or frozenset()) | {"untrusted"}
        certs = [None, *(ClientCert(i) for i in sorted(issuers))]
        if any(a.refusal(cert) != b.refusal(cert) for cert in certs):
            return False
    return True


OPERATORS: tuple[Operator, ...] = (
    Operator(
        "drop-listener",
        "A listener removed: its Gateway port refuses connections. The listener rules "
        "should catch it. Never equivalent.",
        _drop_listener,
    ),
    Operator(
        "change-listener-port",
        "A listener moved to another (unused) port. The listener rules should catch it. "
        "Never equivalent.",
        _listener_port,
    ),
    Operator(
        "rebind-listener-address",
        "A listener bound to another Gateway's address (or the next free one): each "
        "Gateway must be reached on its own address, so its requests are refused, or "
        "served by another Gateway's routes. The listener and attachment rules should "
        "catch it. Never equivalent.",
        _rebind_address,
    ),
    Operator(
        "move-vhost-to-other-gateway",
        "A virtual host that forwards moved into another route configuration, i.e. onto "
        "another Gateway's listener: its routes leak to a Gateway they are not attached "
        "to and vanish from their own. httproute-hostnames and attached-rules-rendered "
        "should catch it. Never equivalent.",
        _vhost_to_other_gateway,
    ),
    Operator(
        "drop-ignore-port-in-host",
        "ignore_port_in_host_matching dropped: 'Host: name:port' no longer matches its "
        "hostname. httproute-hostnames should catch it. Equivalent when every domain of the "
        "configuration is '*' (or the configuration is unused).",
        _ignore_port,
        prove_ignore_port,
    ),
    Operator(
        "drop-domain",
        "A virtual host domain dropped (with the virtual host when it was the only one): "
        "that hostname stops routing there. httproute-hostnames should catch it. "
        "Equivalent when the route configuration is unused, or the virtual host answers "
        "everything 404 and no other domain takes its hosts.",
        _drop_domain,
        prove_domain_change,
    ),
    Operator(
        "add-wildcard-domain",
        "A wildcard domain ('*', or '*.<parent>' when '*' is taken) added to a virtual "
        "host: other hostnames route there. httproute-hostnames should catch it. "
        "Equivalent when the route configuration is unused, or '*' goes to a virtual host "
        "that answers everything 404.",
        _add_wildcard,
        prove_domain_change,
    ),
    Operator(
        "drop-client-certificate-validation",
        "A TLS filter chain no longer asks for client certificates (validation context "
        "and require_client_certificate dropped): clients without a valid certificate get "
        "through. gateway-frontend-client-certificate-validation should catch it. "
        "Equivalent when the chain accepted every client anyway (AllowInsecureFallback).",
        lambda snap: _tls_sites(
            snap, _has_validation, "client certificate validation dropped", _drop_validation
        ),
        prove_same_client_validation,
    ),
    Operator(
        "accept-untrusted-client-certificates",
        "trust_chain_verification set to ACCEPT_UNTRUSTED: a client certificate of any CA "
        "passes. gateway-frontend-client-certificate-validation should catch it. "
        "Equivalent when nothing is refused either way.",
        lambda snap: _tls_sites(
            snap, _verifies, "trust_chain_verification ACCEPT_UNTRUSTED", _accept_untrusted
        ),
        prove_same_client_validation,
    ),
    Operator(
        "drop-require-client-certificate",
        "require_client_certificate dropped: a client without a certificate gets through. "
        "gateway-frontend-client-certificate-validation should catch it. Never equivalent "
        "unless nothing was refused.",
        lambda snap: _tls_sites(snap, _requires, "require_client_certificate dropped", _no_require),
        prove_same_client_validation,
    ),
)
