"""Every backendRef of an HTTPRoute resolves to a Service port the edge, or the
sidecars applying a mesh route, can send to.

Why it matters: the spec turns a backendRef that does not resolve into 500s for its
share of the requests ("requests that would have otherwise been routed to an invalid
backend MUST receive a 500 status code"), and the xDS of a correct translator does
exactly that, so the models agree and only a case that happens to draw that share
would notice. A controller says why in the route's status (ResolvedRefs=False); this
rule gives it at the backendRef's own field, whether or not a case exercises it:
``BackendNotFound`` for a Service that does not exist (EV905, with the closest
Service name) or a port the Service lacks (EV906), ``InvalidKind`` (EV907),
``RefNotPermitted`` without a ReferenceGrant (EV908) and ``UnsupportedProtocol`` for
an appProtocol the edge cannot speak (EV909). RequestMirror backendRefs are judged
alike, and so are mesh routes' (a parentRef to a Service, GAMMA): a backendRef reads
the same whatever the parent, and a sidecar answers 500 for its share as the edge
does. It reads the spec model's resolution (``verifier.semantics.spec.backends``),
never the reference controller's. A Service in a namespace a ``--kubeconfig
--namespace`` read did not cover is not judged: the input cannot show it is missing.

Example: ``backendRefs: [{name: cart-canry, port: 8080}]`` beside Service
``cart-canary``: EV905 at the name's line, "did you mean cart-canary?"; ``port: 9090``
on a Service with port 8080: EV906 at the port's line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from verifier.rules.support.mistakes import at, name_fix, with_mesh_routes

from verifier.check import Context
from verifier.findings import Finding, hint
from verifier.gatewayapi import model as m
from verifier.registry import Rule
from verifier.semantics.spec.backends import SUPPORTED_APP_PROTOCOLS, resolve_ref
from verifier.semantics.spec.status import backend_refs

NAME = "httproute-backend-refs"
CODES = ("EV905", "EV906", "EV907", "EV908", "EV909")


def _port_fix(svc: m.Service) -> tuple[str, str | None]:
    ports = [str(p.port) for p in svc.ports]
    if len(ports) == 1:
        return hint("did-you-mean", name=f"port {ports[0]}"), ports[0]
    return hint("ports-of", ports=", ".join(ports) or "none"), None


def _finding(
    ctx: Context, route: m.HTTPRoute, ref: m.ObjectRef, reason: str, field: str
) -> Finding | None:
    ns = ref.namespace or route.meta.namespace
    service = f"{ns}/{ref.name}"
    path = f"{ref.path}.{field}" if field else ref.path
    actual = {"reason": reason, "service": service, "port": ref.port}
    if reason == "InvalidKind":
        kind = f"{ref.group or 'core'}/{ref.kind}"
        return at("EV907", NAME, route.meta, path, actual=actual, kind=kind)
    if not ctx.res.knows(ns):
        return None  # neither the Service nor a ReferenceGrant there was read
    if reason == "RefNotPermitted":
        return at(
            "EV908",
            NAME,
            route.meta,
            path,
            actual=actual,
            service=service,
            namespace=ns,
            route_namespace=route.meta.namespace,
        )
    if reason == "UnsupportedProtocol":
        svc = ctx.res.services[(ns, ref.name)]
        port = next(p for p in svc.ports if p.port == ref.port)
        protocols = ", ".join(sorted(p for p in SUPPORTED_APP_PROTOCOLS if p))
        detail = f"port {port.port} has appProtocol {port.app_protocol}"
        return at(
            "EV909",
            NAME,
            route.meta,
            path,
            actual=actual,
            service=service,
            detail=detail,
            protocols=protocols,
        )
    if field == "port":
        fix, near = _port_fix(ctx.res.services[(ns, ref.name)])
        code = "EV906"
    else:
        fix, near = name_fix(ctx.res, "Service", ns, ref.name)
        code = "EV905"
    expected = {"did_you_mean": near} if near else None
    return at(
        code,
        NAME,
        route.meta,
        path,
        actual=actual,
        expected=expected,
        service=service,
        port=ref.port,
        fix=fix,
    )


def _route(ctx: Context, route: m.HTTPRoute) -> Iterator[Finding]:
    for ref in backend_refs(route):
        resolved = resolve_ref(ctx.res, route, ref, 1)
        if resolved.problem is not None:
            found = _finding(ctx, route, ref, resolved.reason, resolved.field)
            if found is not None:
                yield found


def check(ctx: Context) -> Iterable[Finding]:
    for route in with_mesh_routes(ctx.res, ctx.controller_name):
        yield from _route(ctx, route)


RULE = Rule(
    name=NAME,
    codes=CODES,
    features=("HTTPRoute",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httpbackendref",
    doc=(__doc__ or "").strip(),
    check=check,
)
