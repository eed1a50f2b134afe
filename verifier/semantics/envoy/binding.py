"""Which listener a connection reaches: its destination address and port, as Envoy on Linux binds.

Envoy binds one socket per listener address and lets the kernel pick the socket a
connection reaches, so the rules are Linux's, with Envoy choosing the socket options:

- An IPv6 listener is dual-stack only with ``ipv4_compat``. SocketAddress.ipv4_compat:
  "When binding to an IPv6 address above, this enables IPv4 compatibility. Binding to
  ``::`` will allow both IPv4 and IPv6 connections, with peer IPv4 addresses mapped into
  IPv6 space as ``::FFFF:<IPv4-address>``." Without it Envoy sets the option the other
  way (socket_interface_impl.cc: "Setting IPV6_V6ONLY restricts the IPv6 socket to IPv6
  connections only", with ``v6only`` = not ``ipv4_compat``), so ``[::]`` refuses IPv4.
- A dual-stack socket bound to an IPv4-mapped address (``::ffff:192.0.2.7``) takes the
  IPv4 connections to that address; a client that connects to ``::ffff:192.0.2.7``
  makes an IPv4 connection to 192.0.2.7.
- Linux looks a connection up by its exact destination first, then by the wildcard
  (``__inet_lookup_listener``), and among equals prefers the IPv4 socket
  (``compute_score``: ``if (sk->sk_family == PF_INET) score++``). So an IPv4 connection
  to A:P reaches, in this order: an IPv4 listener on A, a dual-stack one on
  ``::ffff:A``, ``0.0.0.0``, a dual-stack ``::``; an IPv6 connection: a listener on its
  address, then ``::`` (dual-stack or not).

Checked on Envoy 1.40 in a network namespace (tests/test_dual_stack.py): ``[::]:P``
with ipv4_compat answers IPv4 connections to any local address and IPv6 ones; without
it (unset or false) IPv4 is refused; beside ``0.0.0.0:P`` it gets only IPv6.

A listener with ``bind_to_port: false`` binds no socket ("the listener will not bind
to the port... useful when the listener is used as a target of use_original_dst"): no
connection reaches it directly, only one handed off to it (``use_original_dst``),
which Envoy finds in the same order (``getBalancedHandlerByAddress``: the exact
address, where a dual-stack listener also stands for its IPv4-mapped address, then
the family's wildcard, where ``[::]`` with ipv4_compat stands for ``0.0.0.0``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.listener.v3 import Listener

    from verifier.semantics.envoy.listeners import Chain

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
WILDCARDS = ("0.0.0.0", "::")


def parse_ip(value: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return None


def canonical(value: str) -> str:
    """An IP in canonical form (``::1`` and ``0:0::1`` compare equal); other text as is."""
    ip = parse_ip(value)
    return str(ip) if ip is not None else value


@dataclass(frozen=True)
class Socket:
    """One address and port a listener binds (its ``address`` or one of its
    ``additional_addresses``), with the option that decides which families it takes."""

    address: str  # canonical
    port: int
    ipv4_compat: bool = False

    @property
    def ipv4(self) -> str | None:
        """The IPv4 address whose connections this socket takes (``0.0.0.0``: any), or
        None for an IPv6-only socket."""
        ip = parse_ip(self.address)
        if ip is None or ip.version == 4:
            return self.address if ip is not None else None
        if not self.ipv4_compat:
            return None
        if ip.is_unspecified:
            return "0.0.0.0"
        mapped = ip.ipv4_mapped
        return str(mapped) if mapped is not None else None

    @property
    def ipv6(self) -> bool:
        return (ip := parse_ip(self.address)) is not None and ip.version == 6


@dataclass(frozen=True)
class Bound:
    """A listener as bound at one of its addresses, with its filter chains."""

    socket: Socket
    listener: Listener
    chains: list[Chain]
    default: Chain | None
    binds: bool = True  # bind_to_port (unset: true)

    @property
    def address(self) -> str:
        return self.socket.address


def binds(listener: Listener) -> bool:
    """Listener.bind_to_port: "Whether the listener should bind to the port... Default
    is true" (a BoolValue: unset is true)."""
    return listener.bind_to_port is not False


def sockets(listeners: Iterable[Listener]) -> list[Socket]:
    """Every address and port the listeners bind; an unset address is ``0.0.0.0``."""
    found = []
    for li in listeners:
        if not binds(li):
            continue
        for addr in [li.address] + [a.address for a in li.additional_addresses]:
            sock = addr.socket_address if addr is not None else None
            if sock is not None:
                found.append(socket_of(sock.address, sock.port_value, sock.ipv4_compat))
    return found


def socket_of(address: str | None, port: int | None, ipv4_compat: bool | None) -> Socket:
    return Socket(canonical(address or "0.0.0.0"), port or 0, bool(ipv4_compat))


def reaches(bound: Iterable[Socket], address: str, port: int) -> bool:
    """Whether a connection to ``address``:``port`` is taken by one of ``bound``; with no
    address, whether the port has a wildcard listener."""
    on_port = [s for s in bound if s.port == port]
    if not address:
        return any(s.address in WILDCARDS for s in on_port)
    return any(found for found, _ in tiers(on_port, address))


def destination(address: str) -> tuple[int, str]:
    """(family, address) of the connection a client makes to ``address``: an
    IPv4-mapped IPv6 address is an IPv4 connection."""
    ip = parse_ip(address)
    if ip is None:
        return 4, address
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return 4, str(ip.ipv4_mapped)
    return ip.version, str(ip)


B = TypeVar("B", Socket, Bound)


def _socket(b: Socket | Bound) -> Socket:
    return b if isinstance(b, Socket) else b.socket


def tiers(found: list[B], address: str) -> list[tuple[list[B], str]]:
    """The listeners that may take a connection to ``address``, in the kernel's order
    of preference, each with why (module docstring)."""
    family, dest = destination(address)
    socks = [(_socket(b), b) for b in found]
    if family == 6:
        return [
            (
                [b for s, b in socks if s.ipv6 and s.address == dest],
                "bound to the destination address",
            ),
            ([b for s, b in socks if s.address == "::"], "bound to ::"),
        ]
    return [
        (
            [b for s, b in socks if not s.ipv6 and s.address == dest],
            "bound to the destination address",
        ),
        (
            [b for s, b in socks if s.ipv6 and s.ipv4 == dest],
            f"bound to ::ffff:{dest} with ipv4_compat",
        ),
        ([b for s, b in socks if s.address == "0.0.0.0"], "bound to 0.0.0.0"),
        (
            [b for s, b in socks if s.address == "::" and s.ipv4 == "0.0.0.0"],
            "bound to :: with ipv4_compat (dual-stack)",
        ),
    ]


def refusal(found: list[Bound], address: str, port: int) -> str:
    """Why no listener on ``port`` takes a connection to ``address``."""
    family, dest = destination(address)
    bound = ", ".join(sorted({b.address for b in found}))
    why = f"no listener on {dest}:{port} (port {port} is bound on {bound})"
    if family == 4 and any(b.address == "::" and not b.socket.ipv4_compat for b in found):
        why += "; [::] without ipv4_compat refuses IPv4 (IPV6_V6ONLY)"
    return why
