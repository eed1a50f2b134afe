"""What the configuration-mistake rules share: which routes they judge, where a refused
field is, and the fix a finding suggests for a name that names nothing.

The refusals themselves come from the spec model (``verifier.semantics.spec.status``),
never from the reference controller: these rules must not agree with its bugs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from verifier.findings import Finding, hint, new
from verifier.gatewayapi import model as m
from verifier.gatewayapi.resources import Resources
from verifier.semantics.spec.attach import Refusal
from verifier.semantics.spec.mesh import service_parent
from verifier.semantics.spec.status import parent_gateway
from verifier.suggest import closest

# How many existing names a fix lists when none is close to the one given.
SHOWN_NAMES = 5


def _table(res: Resources, kind: str) -> Mapping[tuple[str, str], Any]:
    tables: dict[str, Mapping[tuple[str, str], Any]] = {
        "Service": res.services,
        "Gateway": res.gateways,
        "Secret": res.secrets,
        "ListenerSet": res.listener_sets,
    }
    return tables[kind]


def name_fix(res: Resources, kind: str, namespace: str, name: str) -> tuple[str, str | None]:
    """The fix for a reference to ``kind namespace/name``, which does not exist, and the
    name it suggests: the closest name in the namespace, else the same name in another
    namespace (a namespace left out), else the names there are."""
    table = _table(res, kind)
    names = sorted(n for ns, n in table if ns == namespace)
    near = closest(name, names)
    if near is None:
        near = next((f"{ns}/{n}" for ns, n in sorted(table) if n == name), None)
    if near is not None:
        return hint("did-you-mean", name=near), near
    if names:
        shown = ", ".join(names[:SHOWN_NAMES]) + (", ..." if len(names) > SHOWN_NAMES else "")
        return hint("one-of", kind=kind, namespace=namespace, names=shown), None
    return hint("none-in-namespace", kind=kind, namespace=namespace), None


def at(code: str, rule: str, meta: m.Meta, path: str, **params: Any) -> Finding:
    """A finding at the line of ``path`` in ``meta``'s resource (the nearest enclosing
    field the YAML writes, when that one is left to its default)."""
    where = meta.where(path)
    resource = f"{meta.kind} {meta.namespace}/{meta.name}" if meta.namespace else meta.name
    return new(code, rule, file=where.file, line=where.line, resource=resource, **params)


def refused_at(
    code: str,
    rule: str,
    meta: m.Meta,
    refusal: Refusal,
    fix: str,
    near: str | None,
    **params: Any,
) -> Finding:
    """A finding for what a controller refuses, at the refused field: its reason and
    detail as the actual state, the suggested name (did you mean) as the expected one."""
    return at(
        code,
        rule,
        meta,
        refusal.path,
        actual={"reason": refusal.reason, "detail": refusal.detail},
        expected={"did_you_mean": near} if near else None,
        detail=refusal.detail,
        fix=fix,
        **params,
    )


def unknowable(res: Resources, refusal: Refusal) -> bool:
    """A refusal for an object the input cannot show to be missing: it lies in a
    namespace the input was not read from (``--kubeconfig`` with ``--namespace``)."""
    return refusal.missing is not None and not res.knows(refusal.missing[1])


def judged_routes(res: Resources, controller_name: str) -> Iterator[m.HTTPRoute]:
    """The HTTPRoutes ``controller_name`` would write status for: a parentRef reaches one
    of its Gateways, or names a Gateway or ListenerSet the input shows does not exist
    (a typo, reported as such). Routes of other classes' Gateways are someone else's;
    a mesh route's parents are judged by ``mesh-route-accepted``, its backends with
    the edge's (``with_mesh_routes``)."""
    for key in sorted(res.httproutes):
        route = res.httproutes[key]
        for ref in route.parent_refs:
            parent = parent_gateway(res, ref, controller_name)
            if isinstance(parent, m.Gateway) or (
                isinstance(parent, Refusal) and not unknowable(res, parent)
            ):
                yield route
                break


def with_mesh_routes(res: Resources, controller_name: str) -> Iterator[m.HTTPRoute]:
    """The HTTPRoutes whose rules are judged (backendRefs, weights, fields the proxy does
    not implement): ``judged_routes``, and every mesh route (a parentRef to a Service,
    GAMMA). A rule reads the same whatever its parent: a mesh route's backendRef
    resolves as an edge route's does, and the sidecars that apply it answer 500 or 503
    for its share, or refuse a field they do not implement, just as the edge would."""
    edge = {r.meta.key for r in judged_routes(res, controller_name)}
    for key in sorted(res.httproutes):
        route = res.httproutes[key]
        if key in edge or any(service_parent(ref) for ref in route.parent_refs):
            yield route
