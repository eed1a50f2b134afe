"""Which clients a mesh route reaches: the mesh routes a missing namespace label leaves
unapplied, worked out once per check.

A mesh route applies only where a client's sidecar captures the request (aether's
capture scope: workloads of mesh-registered namespaces have a sidecar; it captures
mesh-registered Services, or everything under redirect-all). That reading is the spec
model's (``spec.mesh.captures``, ``applicable_routes``), the one ``explain --from``
prints, asked here for every client workload of the input, never restated. Read by
``mesh-route-clients`` (a finding at the parentRef) and ``case-expectations`` (a mesh
case both sides miss for this reason points at that parentRef).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from verifier.check import Context
from verifier.findings import Related
from verifier.gatewayapi import model as m
from verifier.gatewayapi import workloads as wl
from verifier.semantics.request import Request, Source
from verifier.semantics.spec.mesh import (
    applicable_routes,
    captures,
    mesh_index_for,
    selects_port,
    service_parent,
)
from verifier.semantics.spec.status import service_parent_refusal

CACHE_KEY = "mesh-route-clients"
# The parent Service is not mesh-registered: only redirect-all sidecars see its traffic.
UNREGISTERED_SERVICE = "EV926"
# A consumer route of a namespace whose workloads have no sidecar: it applies to no one.
CONSUMERS_WITHOUT_SIDECAR = "EV927"


@dataclass(frozen=True)
class Unapplied:
    """A Service parentRef of a mesh route that a namespace without the mesh label keeps
    from the clients it is written for: the code that says so, the clients whose
    sidecars do apply it, and why another client's does not (the spec model's words)."""

    route: m.HTTPRoute
    ref: m.ParentRef
    service: m.Service
    code: str
    clients: tuple[Source, ...]
    why: str  # why a client the route is written for does not apply it ("": none in the input)

    @property
    def name(self) -> str:
        return f"HTTPRoute {self.route.meta.namespace}/{self.route.meta.name}"

    def related(self, ctx: Context, source: Source) -> Related:
        """This parentRef, as the cause of a case from ``source`` that fails."""
        where = self.route.meta.where(self.ref.path)
        _captured, why = captures(ctx.res, ctx.mesh_registry, source, self.service)
        return Related(where.file, where.line, f"{self.name} is not applied: {why} ({self.code})")


def unapplied(ctx: Context) -> list[Unapplied]:
    """Every mesh route parentRef a missing mesh label leaves unapplied, once per check."""
    found = ctx.rule_cache.get(CACHE_KEY)
    if found is None:
        clients = _clients(ctx)
        routes = ctx.res.httproutes
        found = [u for key in sorted(routes) for u in _of(ctx, routes[key], clients)]
        ctx.rule_cache[CACHE_KEY] = found
    assert isinstance(found, list)
    return found


def causes(ctx: Context, request: Request) -> tuple[Related, ...]:
    """Where the answer to mesh request ``request`` went wrong if a missing mesh label
    is why: its client's sidecar does not capture it, and a mesh route written for that
    client on that frontend is one ``unapplied`` reports."""
    source = request.source
    svc = mesh_index_for(ctx.res).by_ip.get(request.address)
    port = next((p for p in svc.ports if p.port == request.port), None) if svc else None
    if source is None or svc is None or port is None:
        return ()
    if captures(ctx.res, ctx.mesh_registry, source, svc)[0]:
        return ()
    written = {r.meta.key for r in applicable_routes(ctx.res, svc, port, source.namespace)}
    return tuple(
        u.related(ctx, source)
        for u in unapplied(ctx)
        if u.route.meta.key in written
        and u.service.meta.key == svc.meta.key
        and selects_port(u.ref, port)
    )


def _clients(ctx: Context) -> list[Source]:
    """Every workload of the input, as the client of a mesh request."""
    return sorted({Source(ns, name) for _kind, ns, name in ctx.res.workloads}, key=Source.line)


def _of(ctx: Context, route: m.HTTPRoute, clients: list[Source]) -> Iterator[Unapplied]:
    res, registry = ctx.res, ctx.mesh_registry
    for ref in route.parent_refs:
        if not service_parent(ref) or service_parent_refusal(res, ref) is not None:
            continue  # mesh-route-accepted reports a parent that matches nothing
        svc = res.services[(ref.namespace, ref.name)]
        if route.meta.namespace != svc.meta.namespace and not wl.mesh_namespace(
            res, route.meta.namespace
        ):
            code = CONSUMERS_WITHOUT_SIDECAR
        elif not wl.mesh_service(res, registry, *svc.meta.key):
            code = UNREGISTERED_SERVICE
        else:
            continue
        if not (res.knows(route.meta.namespace) and res.knows(svc.meta.namespace)):
            continue  # a namespace the input was not read from may carry the label
        written = [s for s in clients if _written_for(ctx, route, ref, svc, s)]
        seen = [(s, *captures(res, registry, s, svc)) for s in written]
        applied = tuple(s for s, captured, _why in seen if captured)
        why = next((why for _s, captured, why in seen if not captured), "")
        yield Unapplied(route, ref, svc, code, applied, why)


def _written_for(
    ctx: Context, route: m.HTTPRoute, ref: m.ParentRef, svc: m.Service, source: Source
) -> bool:
    """The spec applies ``route`` (through ``ref``) to ``source``'s requests to ``svc``
    on some port, were they captured: a producer route its namespace has no consumer
    route in place of, or its own namespace's consumer route."""
    return any(
        route.meta.key in {r.meta.key for r in applicable_routes(ctx.res, svc, p, source.namespace)}
        for p in svc.ports
        if selects_port(ref, p)
    )
