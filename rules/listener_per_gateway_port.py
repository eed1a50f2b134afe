"""Every port a Gateway of ours listens on has an Envoy listener bound to it.

Why it matters: "Port is the network port. Multiple listeners may use the same port,
subject to the Listener compatibility rules" (Listener.port): clients reach a Gateway
listener on its port, so a port with no Envoy listener refuses every connection,
whatever the routes say.

Which listeners: those of Gateways whose GatewayClass names our controller, with
protocol HTTP or HTTPS, that the spec requires to be programmed. Listeners the spec
lets an implementation leave unprogrammed are skipped: conflicted ones (same port with
another protocol, or same protocol and hostname), HTTPS ones whose certificateRefs do
not resolve to a ``kubernetes.io/tls`` Secret we may use, and ones allowing other
route kinds. The Envoy side is any listener whose ``address`` or
``additional_addresses`` binds that port on the Gateway's own address (per-Gateway
addressing: verifier.gatewayapi.addresses) or on the wildcard address of its family
(``[::]`` takes IPv4 only with ``ipv4_compat``: verifier.semantics.envoy.binding): a
listener on another Gateway's address does not serve this one.

Example: Gateway ``edge-infra/all-namespaces`` has an HTTP listener on 8080 but LDS only
binds port 80: every request to :8080 is refused.
"""

from __future__ import annotations

from collections.abc import Iterable

from verifier.rules.support import served as spec

from verifier.check import Context
from verifier.findings import Finding
from verifier.registry import Rule
from verifier.semantics.envoy.binding import reaches, sockets

NAME = "listener-per-gateway-port"
CODE = "EV104"


def check(ctx: Context) -> Iterable[Finding]:
    where = sockets(ctx.snapshot.listeners)
    for gw in spec.our_gateways(ctx.res, ctx.controller_name):
        address = ctx.addresses.get(gw.meta.key, "")
        reported: set[int] = set()
        others = (
            spec.shared_with(ctx.res, ctx.controller_name, gw) if ctx.addressing.shared else None
        )
        for lst in gw.listeners:
            port = ctx.addressing.proxy_port(gw.meta.key, lst.port)
            if reaches(where, address, port) or lst.port in reported:
                continue
            if spec.listener_state(ctx.res, gw, lst, others) != "ready":
                continue
            reported.add(lst.port)
            yield spec.gateway_finding(
                CODE,
                NAME,
                gw,
                f"{lst.path}.port",
                listener_set=spec.listener_set_of(ctx.res, lst),
                expected={"address": address, "port": lst.port, "bound": True},
                actual={"address": address, "port": lst.port, "bound": False},
                gateway=f"{gw.meta.namespace}/{gw.meta.name}",
                port=lst.port,
                address=address or "(any)",
            )


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("Gateway",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#listener",
    doc=(__doc__ or "").strip(),
    check=check,
    edge_xds=True,
)
