"""On each port, the virtual hosts cover exactly the hostnames the attached routes serve.

Why it matters: Envoy picks a virtual host by the Host header before any route runs. A
hostname a route serves that no virtual host's domains cover answers 404 for the whole
host; a virtual host forwarding traffic for a hostname no route serves lets requests
through that the spec says no listener accepts ("If a hostname is specified by both
the Listener and HTTPRoute, there must be at least one intersecting hostname for the
HTTPRoute to be attached", HTTPRouteSpec.hostnames).

What routes serve is computed here from the spec: HTTPRoutes whose parentRefs name a
Gateway of ours (sectionName and port narrowing the listeners), allowed by the
listener's ``allowedRoutes.namespaces``, serve the intersection of listener and route
hostnames, ``*`` when neither has any. The Envoy side is the union of the domains of
the route configurations its HCMs use (RDS or inline). Conservative: a domain covers
a hostname exactly or through a wildcard/``*`` domain; only virtual hosts with a route
that forwards (not redirects, not direct responses) can be "extra"; hostnames of
routes the spec does not require (on listeners that may stay unprogrammed, or with
non-standard filters) are allowed but not required.

Example: an HTTPRoute with ``hostnames: [shop.example.com]`` attached to port 80, and
RDS for port 80 with only ``domains: ["*"]``: ``*`` is extra (any Host is forwarded)
and the finding shows both sets.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from verifier.rules.support import served as spec
from verifier.rules.support import walk

from verifier.check import Context
from verifier.findings import Finding
from verifier.registry import Rule

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.route.v3 import VirtualHost

NAME = "virtual-host-domains"
CODE = "EV105"


def _domain_covers(domain: str, host: str) -> bool:
    """Envoy's domain ``domain`` matches every Host the Gateway hostname ``host`` stands for."""
    if domain in ("*", host):
        return True
    if domain.startswith("*"):
        return (host[1:] if host.startswith("*.") else host).endswith(domain[1:]) and (
            host.startswith("*.") or len(host) > len(domain) - 1
        )
    if domain.endswith("*") and not host.startswith("*"):
        return host.startswith(domain[:-1]) and len(host) > len(domain) - 1
    return False


def _forwards(vh: VirtualHost) -> bool:
    """A route that forwards any Host (no ``:authority``/``host`` header condition)."""
    for route in vh.routes:
        names = {h.name.lower() for h in (route.match.headers if route.match else [])}
        if walk.action(route) is not None and not names & {":authority", "host"}:
            return True
    return False


def check(ctx: Context) -> Iterable[Finding]:
    served = spec.served_hostnames(ctx.res, ctx.controller_name, ctx.addressing.shared)
    for port, (names, configs) in sorted(walk.configs_by_port(ctx.snapshot).items()):
        want = served.get(port)
        if want is None:
            continue
        vhosts = [vh for rc in configs for vh in rc.virtual_hosts]
        domains = sorted({walk.domain_name(d) for vh in vhosts for d in vh.domains})
        # Virtual hosts serving route kinds the edge does not read are not extra.
        judged = [
            vh
            for rc in configs
            for vh in rc.virtual_hosts
            if f"routes[{rc.name}].virtual_hosts[{vh.name}]" not in ctx.unjudged.virtual_hosts
        ]
        forwarding = {walk.domain_name(d) for vh in judged if _forwards(vh) for d in vh.domains}
        missing = sorted(h for h in want.required if not any(_domain_covers(d, h) for d in domains))
        extra = sorted(
            d for d in forwarding if not any(spec.host_covers(h, d) for h in want.allowed)
        )
        if not missing and not extra:
            continue
        gw, lst = want.listeners[0]
        hostnames = sorted(want.required)
        yield spec.gateway_finding(
            CODE,
            NAME,
            gw,
            f"{lst.path}.port",
            listener_set=spec.listener_set_of(ctx.res, lst),
            port=port,
            domains=domains,
            hostnames=hostnames,
            xds_path=f"listeners[{names[0]}]",
            expected={"hostnames": hostnames, "missing": missing},
            actual={"domains": domains, "extra": extra},
        )


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("HTTPRoute",),
    spec_ref="https://gateway-api.sigs.k8s.io/concepts/hostnames/",
    doc=(__doc__ or "").strip(),
    check=check,
    edge_xds=True,
)
