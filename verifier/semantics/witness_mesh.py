"""Witness requests for mesh routes: every match of every route whose parent is a
Service, and its boundary neighbours, sent from every client workload of the input.

As for a Gateway (``verifier.semantics.witness``), generation explores and does not
decide: each Service with mesh routes gets, on each of its ports, from each
workload (in every namespace, with a sidecar or not), the requests of every match
of every route naming the Service (whichever namespace the route is in, whatever
port it names), plus one request no match was made for, and the Host of another
Service (the frontend is the ClusterIP: MeshClusterIPMatching). So a consumer route
is probed from its own namespace and from the others, a parentRef.port from its port
and from the others, and the models say what applies. A witness's ``gateway`` is the
Service it is sent to (its parent); its request carries the client as ``source``.

Check does not send these to the edge's Envoy model: each is answered on its
client's sidecar xDS, or as kube-proxy answers it (verifier.mesh_compare,
docs/mesh.md). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator

from verifier.gatewayapi import model as m
from verifier.gatewayapi.resources import Resources
from verifier.semantics import witness_pairs as wp
from verifier.semantics.request import Request, Source, evolve, service_host
from verifier.semantics.witness import PATH, Sent, Witness, _Kept, match_witnesses

MESH = "Mesh"
CLUSTER_IP = "MeshClusterIPMatching"
# A path no match is made for (fixtures never route it).
UNROUTED_PATH = "/mesh-witness-no-match"


def _service_parent(ref: m.ParentRef) -> bool:
    return ref.group == "" and ref.kind == "Service"


def mesh_routes(res: Resources) -> dict[tuple[str, str], list[m.HTTPRoute]]:
    """The routes naming each Service as a parent, in (namespace, name) order."""
    found: dict[tuple[str, str], list[m.HTTPRoute]] = {}
    for key in sorted(res.httproutes):
        route = res.httproutes[key]
        for target in sorted(
            {(p.namespace, p.name) for p in route.parent_refs if _service_parent(p)}
        ):
            found.setdefault(target, []).append(route)
    return found


def _free_method(routes: list[m.HTTPRoute]) -> str:
    """GET, unless some match of the Service's routes requires GET (see
    ``witness.free_method``): then one no match requires."""
    required = {
        mt.method.upper() for r in routes for rule in r.rules for mt in rule.matches if mt.method
    }
    return next((v for v in ("GET", "POST", "PUT", "PATCH", "DELETE") if v not in required), "GET")


def _clients(res: Resources) -> list[Source]:
    """Every workload of the input, once per (namespace, name)."""
    return sorted({Source(ns, name) for (_kind, ns, name) in res.workloads})


def mesh_witnesses(res: Resources, sent: Sent | None = None) -> list[Witness]:
    """The mesh witnesses of ``res``, deduplicated; ``sent`` aims each at its Service's
    frontend (``Destinations.sent``: the ClusterIP) as it is kept."""
    out = _Kept(sent)
    by_service = mesh_routes(res)
    clients = _clients(res)
    for skey, routes in sorted(by_service.items()):
        svc = res.services.get(skey)
        if svc is None or not svc.cluster_ip or svc.cluster_ip == "None":
            continue  # no frontend to send to: the status says so (mesh-route-accepted)
        others = [k for k in sorted(by_service) if k != skey and k in res.services]
        method = _free_method(routes)
        for port in sorted({p.port for p in svc.ports}):
            host = service_host(skey[0], skey[1], port)
            for client in clients:
                for wit in _for_client(skey, port, host, routes, client, method, others):
                    out.keep(wit)
    return list(out.kept.values())


def _for_client(
    skey: tuple[str, str],
    port: int,
    host: str,
    routes: list[m.HTTPRoute],
    client: Source,
    method: str,
    others: list[tuple[str, str]],
) -> Iterator[Witness]:
    first = True
    for route in routes:
        for rule in route.rules:
            for mi, match in enumerate(rule.matches):
                for wit in match_witnesses(
                    skey, port, "http", host, route, rule, mi, match, first, method
                ):
                    yield evolve(wit, request=evolve(wit.request, source=client))
                first = False
    yield from _pairs(skey, port, host, routes, client)
    base = Request(host=host, port=port, path=UNROUTED_PATH, source=client)
    yield Witness(skey, base, MESH, note="a path no match was made for")
    yield Witness(skey, evolve(base, path="/"), PATH, note="root")
    if others:
        other = service_host(others[0][0], others[0][1], port)
        note = f"Host of Service {others[0][0]}/{others[0][1]}"
        yield Witness(skey, evolve(base, path="/", host=other), CLUSTER_IP, note=note)


def _pairs(
    skey: tuple[str, str], port: int, host: str, routes: list[m.HTTPRoute], client: Source
) -> Iterator[Witness]:
    """A request two matches of the Service's routes both accept, for each overlapping
    pair (``witness_pairs``, as on a Gateway listener): which one wins it is precedence,
    which single-match witnesses rarely probe (a path match and a header match on /)."""
    served = [
        wp.Served(route, rule, mi, match)
        for route in routes
        for rule in route.rules
        for mi, match in enumerate(rule.matches)
    ]
    for a, b in wp.overlapping_pairs(served):
        req = wp.pair_request(a.match, b.match, host, port, "http")
        if req is not None:
            note = f"overlaps {b.route.meta.name} rule {b.rule.index}"
            request = evolve(req, source=client)
            yield Witness(
                skey, request, wp.PRECEDENCE, a.route.meta.key, a.rule.index, a.index, note=note
            )


def frontend_witnesses(
    res: Resources, clients: list[Source], sent: Sent | None = None
) -> list[Witness]:
    """``GET /`` and a path below it from each of ``clients`` to every TCP port of every
    Service with a ClusterIP that no mesh route names (those have ``mesh_witnesses``):
    what a client's sidecar does with a Service nobody routes (to the Service itself,
    as kube-proxy would, whatever the path) is as much the sidecar's xDS as its routes
    are. The second path tells a route to the Service that takes ``/`` alone (an exact
    match where a prefix was meant) from one that takes every path."""
    out = _Kept(sent)
    routed = mesh_routes(res)
    for skey in sorted(res.services):
        svc = res.services[skey]
        if skey in routed or not svc.cluster_ip or svc.cluster_ip == "None":
            continue
        for port in sorted({p.port for p in svc.ports if p.protocol == "TCP"}):
            host = service_host(skey[0], skey[1], port)
            for client in clients:
                request = Request(host=host, port=port, path="/", source=client)
                out.keep(Witness(skey, request, MESH, note="the Service's frontend, no route"))
                below = evolve(request, path=UNROUTED_PATH)
                out.keep(Witness(skey, below, MESH, note="the Service's frontend, no route"))
    return list(out.kept.values())
