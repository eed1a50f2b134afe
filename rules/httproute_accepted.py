"""Every parentRef of an HTTPRoute is accepted: no route that attaches nowhere.

Why it matters: a route a controller does not accept serves no request, and nothing
in the xDS shows a route that is missing, so the models agree that those requests get
404 and only a case that happens to send one would notice. A controller says why in
the route's status (Accepted=False), which nobody reads before the change is live.
This rule gives that status at the field at fault, whether or not a case exercises it:
``NoMatchingParent`` (EV901: a Gateway or ListenerSet that does not exist, or a
sectionName/port no listener has), ``NotAllowedByListeners`` (EV902: the listeners'
allowedRoutes refuse the route's namespace or kind), ``NoMatchingListenerHostname``
(EV903: no route hostname intersects a listener hostname) and ``UnsupportedValue``
(EV904: a filter or rule field the edge does not implement; a mesh route's too, whose
Service parents are ``mesh-route-accepted``'s). It reads the spec
model's own reading of attachment (``verifier.semantics.spec.status``), never the
reference controller's. A parentRef into a namespace a ``--kubeconfig --namespace``
read did not cover is not judged: the input cannot show that its Gateway is missing.

Example: ``hostnames: [cart.shop.example.org]`` on a route whose Gateway listens on
``*.shop.example.com``: EV903 at the hostname's line; ``parentRefs: [{name: wbe}]``
beside Gateway ``web``: EV901, "did you mean web?".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from verifier.rules.support.mistakes import at, name_fix, refused_at, unknowable, with_mesh_routes

from verifier.check import Context
from verifier.findings import Finding, hint
from verifier.gatewayapi import model as m
from verifier.registry import Rule
from verifier.semantics.spec.attach import Refusal
from verifier.semantics.spec.status import parent_gateway, parent_refusal, unsupported_refusals
from verifier.suggest import closest

NAME = "httproute-accepted"
CODES = {
    "NoMatchingParent": "EV901",
    "NotAllowedByListeners": "EV902",
    "NoMatchingListenerHostname": "EV903",
    "UnsupportedValue": "EV904",
}


def _parent(ref: m.ParentRef) -> str:
    return f"{ref.kind} {ref.namespace}/{ref.name}"


def _listener_fix(ref: m.ParentRef, gw: m.Gateway) -> tuple[str, str | None]:
    """For a sectionName or port no listener of the parent has: the closest listener
    name, or the parent's listeners."""
    owner = (ref.namespace, ref.name) if ref.kind == "ListenerSet" else None
    own = [lst for lst in gw.listeners if lst.listener_set == owner]
    names = [lst.name for lst in own]
    unnamed = ref.section_name and ref.section_name not in names
    near = closest(ref.section_name, names) if ref.section_name and unnamed else None
    if near is not None:
        return hint("did-you-mean", name=f"sectionName {near}"), near
    listed = ", ".join(f"{lst.name} (:{lst.port})" for lst in own)
    return hint("listeners-of", listeners=listed), None


def _refused(
    ctx: Context, route: m.HTTPRoute, ref: m.ParentRef, refusal: Refusal, gw: m.Gateway | None
) -> Finding:
    fix, near = "", None
    if refusal.reason == "NoMatchingParent":
        if refusal.missing is not None:
            fix, near = name_fix(ctx.res, *refusal.missing)
        else:
            assert gw is not None
            fix, near = _listener_fix(ref, gw)
    return refused_at(
        CODES[refusal.reason], NAME, route.meta, refusal, fix, near, parent=_parent(ref)
    )


def _route(ctx: Context, route: m.HTTPRoute) -> Iterator[Finding]:
    for ref in route.parent_refs:
        parent = parent_gateway(ctx.res, ref, ctx.controller_name)
        if isinstance(parent, Refusal):
            if not unknowable(ctx.res, parent):
                yield _refused(ctx, route, ref, parent, None)
        elif parent is not None:
            refusal = parent_refusal(ctx.res, route, ref, parent)
            if refusal is not None:
                yield _refused(ctx, route, ref, refusal, parent)
    for refusal in unsupported_refusals(route):
        actual = {"reason": refusal.reason, "detail": refusal.detail}
        yield at("EV904", NAME, route.meta, refusal.path, actual=actual, detail=refusal.detail)


def check(ctx: Context) -> Iterable[Finding]:
    for route in with_mesh_routes(ctx.res, ctx.controller_name):
        yield from _route(ctx, route)


RULE = Rule(
    name=NAME,
    codes=tuple(CODES.values()),
    features=("HTTPRoute",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#routeconditionreason",
    doc=(__doc__ or "").strip(),
    check=check,
)
