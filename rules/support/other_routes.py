"""The xDS that serves route kinds the edge does not read, left unjudged.

Another implementation's xDS also serves GRPCRoutes, TCPRoutes, TLSRoutes and
UDPRoutes: their virtual hosts, routes and clusters (often an HTTP/2 cluster to a
Service whose appProtocol is unset) are not mistakes in the HTTPRoutes, and judging
them as if they were is a false positive. The edge skips those routes at load, so
no model says what they should do; check leaves what serves them alone and says so
in one warning.

What serves them is decided from what they reference, never from names: a virtual
host is theirs when every one of its domains is a hostname such a route serves on
that port (its hostnames intersected with the listener's, as for an HTTPRoute) and
no HTTPRoute serves it; a cluster is theirs when every Service port its endpoints
stand for is a backendRef of theirs that no HTTPRoute names, or when every xDS route
sending to it is theirs; an xDS route is theirs when it is in such a virtual host, or
sends only to clusters of the first kind. A virtual host shared with HTTPRoutes (a
GRPCRoute without hostnames beside an HTTPRoute without hostnames) is judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verifier.rules.support import backends as bk
from verifier.rules.support import served as spec
from verifier.rules.support import walk

from verifier.gatewayapi import model as m
from verifier.gatewayapi.resources import Resources
from verifier.xds.snapshot import Snapshot

# Which listener protocols each route kind attaches to (Listener.protocol, and the
# kinds derived from it when allowedRoutes.kinds is empty).
PROTOCOLS = {
    "GRPCRoute": frozenset({"HTTP", "HTTPS"}),
    "TLSRoute": frozenset({"TLS"}),
    "TCPRoute": frozenset({"TCP"}),
    "UDPRoute": frozenset({"UDP"}),
}


@dataclass(frozen=True)
class Unjudged:
    """Routes of kinds the edge does not read, and the xDS attributed to them."""

    routes: tuple[m.OtherRoute, ...] = ()
    clusters: frozenset[str] = frozenset()
    virtual_hosts: frozenset[str] = frozenset()  # ``routes[<rc>].virtual_hosts[<vh>]``
    xds_routes: frozenset[str] = field(default_factory=frozenset)  # ``...routes[<i>]``

    def has(self, ref: walk.RouteRef) -> bool:
        """``ref`` serves one of ``routes``."""
        return _path(ref) in self.xds_routes

    def warning(self) -> str | None:
        """One line naming what was not judged, or None when nothing was skipped."""
        if not self.routes:
            return None
        names = ", ".join(
            f"{r.meta.kind} {r.meta.namespace}/{r.meta.name} ({r.meta.where()})"
            for r in self.routes
        )
        parts = [
            f"{len(items)} {what}{'' if len(items) == 1 else 's'} ({', '.join(sorted(items))})"
            for what, items in (
                ("cluster", self.clusters),
                ("virtual host", self.virtual_hosts),
            )
            if items
        ]
        rest = {p for p in self.xds_routes if not any(p.startswith(v) for v in self.virtual_hosts)}
        if rest:
            parts.append(
                f"{len(rest)} route{'' if len(rest) == 1 else 's'} ({', '.join(sorted(rest))})"
            )
        served = "; the xDS serving them: " + ", ".join(parts) if parts else ""
        kinds = "a route kind" if len(self.routes) == 1 else "route kinds"
        return f"not judged: {names}, {kinds} the edge does not read{served}"


def _listeners(
    res: Resources, controller: str, route: m.OtherRoute
) -> list[tuple[m.Gateway, m.GatewayListener]]:
    """Listeners of our Gateways the route attaches to (kind, namespace and parentRef)."""
    out = []
    for gw in spec.our_gateways(res, controller):
        for lst in gw.listeners:
            kinds = {k.kind for k in lst.allowed_kinds if k.group == m.GATEWAY_GROUP}
            if lst.allowed_kinds and route.meta.kind not in kinds:
                continue
            if lst.protocol not in PROTOCOLS.get(route.meta.kind, frozenset()):
                continue
            if not spec.namespace_allowed(res, gw, lst, route.meta.namespace):
                continue
            if any(spec.attaches(p, gw, lst) for p in route.parent_refs):
                out.append((gw, lst))
    return out


def _service_ports(route: m.OtherRoute) -> set[tuple[str, str, int | None]]:
    ns = route.meta.namespace
    return {
        (b.namespace or ns, b.name, b.port)
        for b in route.backends
        if (b.group, b.kind) == ("", "Service")
    }


def _path(ref: walk.RouteRef) -> str:
    """The route's path as the Envoy model names it, inline route configurations too."""
    return f"routes[{ref.config.name}].virtual_hosts[{ref.vhost.name}].routes[{ref.index}]"


def attribute(res: Resources, snap: Snapshot, controller: str) -> Unjudged:
    """The xDS of ``snap`` that serves ``res``'s routes of kinds the edge does not read."""
    others = tuple(res.other_routes[k] for k in sorted(res.other_routes))
    if not others:
        return Unjudged()
    theirs_hosts: dict[int, set[str]] = {}
    theirs_ports: set[tuple[str, str, int | None]] = set()
    for route in others:
        attached = _listeners(res, controller, route)
        for _gw, lst in attached:
            if lst.protocol in ("HTTP", "HTTPS"):
                hosts = spec.intersect(lst.hostname, route.hostnames)
                theirs_hosts.setdefault(lst.port, set()).update(hosts)
        if attached:
            theirs_ports |= _service_ports(route)
    theirs_ports -= spec.named_by_httproutes(res)
    http_hosts = {port: s.allowed for port, s in spec.served_hostnames(res, controller).items()}

    vhosts: set[str] = set()
    for port, (_names, configs) in walk.configs_by_port(snap).items():
        mine, http = theirs_hosts.get(port, set()), http_hosts.get(port, set())
        for rc in configs:
            for vh in rc.virtual_hosts:
                domains = [walk.domain_name(d) for d in vh.domains]
                if domains and all(
                    any(spec.host_covers(h, d) for h in mine)
                    and not any(spec.host_covers(h, d) for h in http)
                    for d in domains
                ):
                    vhosts.add(f"routes[{rc.name}].virtual_hosts[{vh.name}]")

    directory = bk.Directory(res)
    by_ports: set[str] = set()
    for cluster in snap.clusters:
        found = bk.dialled(cluster, snap, directory)
        readings = (found.readings or ((found.service, found.port),)) if found else ()
        if readings and all(
            p is not None and (s.meta.namespace, s.meta.name, p.port) in theirs_ports
            for s, p in readings
        ):
            by_ports.add(cluster.name)

    xds_routes: set[str] = set()
    for ref in walk.routes(snap):
        where = f"routes[{ref.config.name}].virtual_hosts[{ref.vhost.name}]"
        act = walk.action(ref.route)
        sends = [name for name, _ in walk.forward_clusters(act)] if act is not None else []
        if where in vhosts or (sends and all(name in by_ports for name in sends)):
            xds_routes.add(f"{where}.routes[{ref.index}]")

    clusters = set(by_ports)
    for name, refs in bk.routed_clusters(snap).items():
        if all(_path(r) in xds_routes for r in refs):
            clusters.add(name)
    clusters &= {c.name for c in snap.clusters}
    return Unjudged(others, frozenset(clusters), frozenset(vhosts), frozenset(xds_routes))
