"""A downstream connection as Envoy sees it once its listener filters have run.

Where a connection arrives is deployment data, not xDS: a client dials an address
and port, and the kernel may redirect the connection to the proxy (iptables or
nftables REDIRECT, as a sidecar's capture does). ``Redirect`` says so, as an input
of the evaluation; without one the connection arrives where the client dialled.

The listener filters the model reads (listener/listener_filters docs, Envoy 1.40):

- ``original_dst``: "reads the SO_ORIGINAL_DST socket option set when a connection
  has been redirected by an iptables REDIRECT target ... Later processing in Envoy
  sees the restored destination address as the connection's local address, rather
  than the address at which the listener is listening at", and marks it restored
  (``restoreLocalAddress``), which an ORIGINAL_DST cluster requires. Whether a
  connection that was not redirected also counts as restored (SO_ORIGINAL_DST
  answers when conntrack tracks it) is not knowable here; its address is the same
  either way.
- ``tls_inspector``: the SNI and transport protocol "tls" (or "raw_buffer"); the
  ALPN the client offers (our clients offer none).
- ``http_inspector``: for a connection that is not TLS, the application protocol of
  an HTTP/1.x request is "http/1.1" (http_inspector.cc: "set application protocol
  to http/1.1"); the model's requests are HTTP/1.1.

REDIRECT of traffic a pod makes itself sends it to the loopback ("locally-generated
packets are mapped to the localhost address, 127.0.0.1 for IPv4 and ::1 for IPv6").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from verifier.semantics.envoy.binding import destination

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.listener.v3 import Listener

_TYPES = "envoy.extensions.filters.listener"
ORIGINAL_DST = ("envoy.filters.listener.original_dst", f"{_TYPES}.original_dst.v3.OriginalDst")
TLS_INSPECTOR = ("envoy.filters.listener.tls_inspector", f"{_TYPES}.tls_inspector.v3.TlsInspector")
HTTP_INSPECTOR = (
    "envoy.filters.listener.http_inspector",
    f"{_TYPES}.http_inspector.v3.HttpInspector",
)
# The listener filters this model reads, (name, type): any other is unmodelled.
MODELLED_LISTENER_FILTERS = (ORIGINAL_DST, TLS_INSPECTOR, HTTP_INSPECTOR)
HTTP11 = "http/1.1"


@dataclass(frozen=True)
class Redirect:
    """The connection was captured: the kernel redirected it to the proxy's ``port``
    (on ``address``; empty: the loopback of the original destination's family). The
    request's own address and port are its original destination, which
    SO_ORIGINAL_DST returns."""

    port: int
    address: str = ""

    def arrives_at(self, original: str) -> str:
        return self.address or ("::1" if destination(original)[0] == 6 else "127.0.0.1")


@dataclass(frozen=True)
class Dial:
    """A client's connection as it sets out: the address and port it dials, whether
    it speaks TLS and with which server name, and whether it was captured."""

    address: str
    port: int
    tls: bool = False
    sni: str = ""
    redirect: Redirect | None = None


@dataclass(frozen=True)
class Downstream:
    """The connection as filter chain matching and the clusters see it: its local
    address and port (restored or not), and what the inspectors detected."""

    address: str
    port: int
    restored: bool = False
    sni: str = ""
    transport: str = "raw_buffer"
    application_protocols: tuple[str, ...] = ()


def has_filter(listener: Listener, which: tuple[str, str]) -> bool:
    """Whether the listener runs the listener filter ``which`` (by type, else by name)."""
    name, suffix = which
    for f in listener.listener_filters:
        url = f.typed_config.type_url if f.typed_config is not None else ""
        if url.endswith(suffix) or (not url and f.name == name):
            return True
    return False


def inspect(
    listener: Listener,
    arrived: tuple[str, int],
    original: tuple[str, int] | None,
    tls: bool,
    sni: str,
    trace: list[str],
) -> Downstream:
    """The connection after ``listener``'s filters: ``arrived`` is where it reached the
    listener, ``original`` its original destination when it was redirected."""
    address, port, restored = arrived[0], arrived[1], False
    if original is not None:
        if has_filter(listener, ORIGINAL_DST):
            address, port, restored = original[0], original[1], True
            trace.append(
                f"original_dst: the redirected connection's local address is restored to "
                f"{address}:{port}"
            )
        else:
            trace.append(
                "the listener has no original_dst filter: the connection's local address "
                f"stays {address}:{port}"
            )
    transport = "tls" if tls else "raw_buffer"
    if tls and not has_filter(listener, TLS_INSPECTOR):
        trace.append("the listener has no TLS inspector: filter chains see no SNI and raw_buffer")
        transport, sni = "raw_buffer", ""
    protocols: tuple[str, ...] = ()
    if transport == "raw_buffer" and not tls and has_filter(listener, HTTP_INSPECTOR):
        protocols = (HTTP11,)
    return Downstream(address, port, restored, sni if tls else "", transport, protocols)
