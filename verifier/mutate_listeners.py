"""Mutation operators on listeners, route configurations and virtual host domains."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from envoy_data_plane.envoy.config.listener.v3 import Listener
from envoy_data_plane.envoy.config.route.v3 import RouteConfiguration, VirtualHost

from verifier.mutate_core import (
    Operator,
    Site,
    each_vhost,
    vhost_path,
    with_listener,
    with_route_config,
    with_vhost,
)
from verifier.mutate_proofs import prove_ignore_port, prove_unused_rc
from verifier.xds.snapshot import Snapshot

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
        "Equivalent only when the route configuration is unused.",
        _drop_domain,
        prove_unused_rc,
    ),
    Operator(
        "add-wildcard-domain",
        "A wildcard domain ('*', or '*.<parent>' when '*' is taken) added to a virtual "
        "host: other hostnames route there. httproute-hostnames should catch it. "
        "Equivalent only when the route configuration is unused.",
        _add_wildcard,
        prove_unused_rc,
    ),
)
