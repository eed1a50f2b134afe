"""The reference translator: Gateway API resources to the aether edge's xDS.

Pure: reads the attachment ``Graph`` and ``Resources``, touches no disk or
network (the mesh registry is read by the caller and passed in). Per-Gateway
addressing (the default): one Envoy listener per Gateway and port, named
``edge-<namespace>-<gateway>-<port>``, bound to that Gateway's own address
(``verifier.gatewayapi.addresses``) and carrying ``aether.io/gateway`` metadata; so
each Gateway is alone on its address. Shared addressing: one listener per port,
``edge-<port>`` on 0.0.0.0, the Gateways on it separated by host. Never imports
the models or the rules: it is what they judge, and may share their types
(resources, Request), never their decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from envoy_data_plane.envoy.config.route.v3 import (
    DirectResponseAction,
    Route,
    RouteConfiguration,
    RouteMatch,
    VirtualHost,
)
from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import Secret

from verifier.gatewayapi import addresses as addr
from verifier.gatewayapi import model as m
from verifier.gatewayapi.attach import AttachedRoute, Graph
from verifier.gatewayapi.resources import Resources
from verifier.translate import clusters as cl
from verifier.translate.listeners import ListenerPlace, build_listener, listener_secrets
from verifier.translate.names import https_route_config_name, listener_name
from verifier.translate.order import (
    host_covers,
    listener_serves,
    listener_specificity,
    route_key,
)
from verifier.translate.routes import RouteSource, build_routes
from verifier.xds.codec import new
from verifier.xds.snapshot import Snapshot

DEFAULT_CONTROLLER = "gateway.aether.io/edge"


@dataclass(frozen=True)
class TranslateOptions:
    controller_name: str = DEFAULT_CONTROLLER
    trust_domain: str = "cluster.local"
    # (namespace, service) pairs registered in the mesh besides labelled namespaces
    mesh_registry: frozenset[tuple[str, str]] = field(default_factory=frozenset)
    addressing: addr.Addressing = field(default_factory=addr.Addressing)


def _owned_domains(
    listeners: list[tuple[m.Gateway, m.GatewayListener]], attached: list[AttachedRoute]
) -> dict[str, tuple[m.Gateway, m.GatewayListener]]:
    """Each host on a port belongs to its most specific listener (listener isolation).

    Listener hostnames are domains too: a listener no Route attaches to still owns
    its hostname, which must answer 404 rather than fall to a less specific
    listener's virtual host."""
    owners: dict[str, tuple[m.Gateway, m.GatewayListener]] = {}
    domains = sorted(
        {h for a in attached for h in a.hostnames}
        | {lst.hostname.lower() for _, lst in listeners if lst.hostname}
    )
    for domain in domains:
        serving = sorted(
            (
                listeners[i]
                for i in range(len(listeners))
                if listener_serves(listeners[i][1].hostname, domain)
            ),
            key=lambda gl: (
                tuple(-x for x in listener_specificity(gl[1].hostname)),
                gl[0].meta.key,
                gl[1].name,
            ),
        )
        if serving:
            owners[domain] = serving[0]
    return owners


GwListener = tuple[m.Gateway, m.GatewayListener]


def _vhost_routes(
    domain: str,
    owner: GwListener,
    attached: list[AttachedRoute],
    graph: Graph,
    collector: cl.ClusterCollector,
) -> list[Route]:
    gw, lst = owner
    entries = []
    for a in attached:
        if a.gateway is not gw or a.listener is not lst:
            continue
        if not any(host_covers(h, domain) for h in a.hostnames):
            continue
        for rule in a.route.rules:
            for i, match in enumerate(rule.matches):
                key = route_key(a.hostnames, domain, a.route, rule, match, i)
                entries.append((key, a, rule, match, i))
    entries.sort(key=lambda e: e[0])
    sources = [
        RouteSource(a.route, rule, match, i, lst.port, lst.protocol.lower())
        for _key, a, rule, match, i in entries
    ]
    return build_routes(sources, graph.backends, graph.mirrors, collector.name_for)


def _misdirected(domain: str) -> VirtualHost:
    """Listener.hostname: if another Listener matches the Host better than the
    one the SNI chose, "the Gateway SHOULD return a 421"."""
    return new(
        VirtualHost,
        name=f"misdirected/{domain}",
        domains=[domain],
        routes=[
            new(
                Route,
                name=f"misdirected/{domain}",
                match=new(RouteMatch, prefix="/"),
                direct_response=new(DirectResponseAction, status=421),
            )
        ],
    )


def _route_config(
    name: str,
    listeners: list[GwListener],
    serve: GwListener | None,
    graph: Graph,
    collector: cl.ClusterCollector,
) -> RouteConfiguration:
    """Virtual hosts of the listeners on one port; with ``serve`` (one HTTPS
    listener's filter chain), only its hosts, other listeners' hosts answer 421."""
    keys = {(gw.meta.key, lst.uid) for gw, lst in listeners}
    attached = [a for a in graph.attached if (a.gateway.meta.key, a.listener.uid) in keys]
    owners = _owned_domains(listeners, attached)
    vhosts: list[VirtualHost] = []
    for domain in sorted(owners):
        if serve is not None and owners[domain] != serve:
            continue
        routes = _vhost_routes(domain, owners[domain], attached, graph, collector)
        if routes or domain == (owners[domain][1].hostname or "").lower():
            # No routes: Envoy answers 404 for the listener's own hostname.
            vhosts.append(new(VirtualHost, name=domain, domains=[domain], routes=routes))
    if serve is not None:
        taken = {d for vh in vhosts for d in vh.domains}
        others = sorted({lst.hostname or "*" for gl in listeners if gl != serve for lst in [gl[1]]})
        own = serve[1].hostname or "*"
        vhosts += [_misdirected(d) for d in others if d not in taken and d != own]
    # Invalid-backend shares point at a cluster that is deliberately absent.
    # Spec (HTTPRoute hostnames): "Implementations MUST ignore any port value
    # specified in the HTTP Host header while performing a match and ... MUST
    # forward this header unmodified to the backend." strip_any_host_port would
    # rewrite the forwarded Host; ignore_port_in_host_matching does not.
    return new(
        RouteConfiguration,
        name=name,
        virtual_hosts=vhosts,
        validate_clusters=False,
        ignore_port_in_host_matching=True,
    )


def _groups(
    graph: Graph, opts: TranslateOptions
) -> list[tuple[str, str, int, list[GwListener], tuple[str, str] | None]]:
    """(Envoy listener name, bound address, port, Gateway listeners, owning Gateway):
    per Gateway and port, or (shared addressing) per port across Gateways."""
    ready: list[GwListener] = [
        (gw, lst)
        for gw in graph.gateways
        for lst in gw.listeners
        if (gw.meta.namespace, gw.meta.name, lst.uid) in graph.ready_listeners
    ]
    if opts.addressing.mode == addr.SHARED:
        by_port: dict[int, list[GwListener]] = {}
        for gw, lst in ready:
            by_port.setdefault(lst.port, []).append((gw, lst))
        return [(f"edge-{p}", "0.0.0.0", p, by_port[p], None) for p in sorted(by_port)]
    where = opts.addressing.assign((gw.meta.key, gw.addresses) for gw in graph.gateways)
    by_gateway: dict[tuple[tuple[str, str], int], list[GwListener]] = {}
    for gw, lst in ready:
        by_gateway.setdefault((gw.meta.key, lst.port), []).append((gw, lst))
    return [
        (listener_name(key, port), where[key], port, by_gateway[(key, port)], key)
        for key, port in sorted(by_gateway)
    ]


def translate(res: Resources, graph: Graph, opts: TranslateOptions | None = None) -> Snapshot:
    """The xDS the aether edge serves for ``res``; deterministic for the same input."""
    opts = opts or TranslateOptions()
    collector = cl.ClusterCollector(res, opts.mesh_registry, opts.trust_domain)
    listeners = []
    route_configs = []
    secrets: dict[str, Secret] = {}
    for name, address, port, on_port, owner in _groups(graph, opts):
        secrets.update(listener_secrets(on_port, res))
        if any(lst.protocol == "HTTP" for _, lst in on_port):
            route_configs.append(_route_config(name, on_port, None, graph, collector))
        for gw, lst in on_port:
            if lst.protocol == "HTTPS":
                rc_name = https_route_config_name(port, gw, lst)
                route_configs.append(_route_config(rc_name, on_port, (gw, lst), graph, collector))
        where = ListenerPlace(name, address, port, owner)
        listeners.append(build_listener(where, on_port, res, graph.client_ca))
    return Snapshot(
        clusters=tuple(collector.clusters[k] for k in sorted(collector.clusters)),
        endpoints=tuple(collector.endpoints[k] for k in sorted(collector.endpoints)),
        listeners=tuple(listeners),
        routes=tuple(route_configs),
        secrets=tuple(secrets.values()),
    )
