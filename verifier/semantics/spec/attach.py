"""Does an HTTPRoute serve requests on a given Listener?

Request-centric attachment: a Route serves a Listener when one of its
parentRefs selects that Listener, the Listener's allowedRoutes admit the
Route's namespace and kind, the hostnames intersect, and the edge supports
every feature the Route uses. Written from ``apis/v1/shared_types.go``
(ParentReference), ``apis/v1/gateway_types.go`` (AllowedRoutes) and
``apis/v1/httproute_types.go``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verifier.gatewayapi.model import (
    GATEWAY_GROUP,
    Gateway,
    GatewayListener,
    HTTPRoute,
    LabelSelector,
    ParentRef,
)
from verifier.gatewayapi.resources import Resources
from verifier.semantics.spec.hostnames import effective_hostnames

ROUTE_KIND = (GATEWAY_GROUP, "HTTPRoute")

# AllowedRoutes.kinds: "When unspecified or empty, the kinds of Routes selected
# are determined using the Listener protocol." HTTP and HTTPS listeners select
# HTTPRoutes (and GRPCRoutes, which the edge does not serve).
DEFAULT_KINDS = {
    "HTTP": frozenset({ROUTE_KIND, (GATEWAY_GROUP, "GRPCRoute")}),
    "HTTPS": frozenset({ROUTE_KIND, (GATEWAY_GROUP, "GRPCRoute")}),
}

# RouteNamespaces.from: "All: Routes in all namespaces may be used by this
# Gateway. Selector: Routes in namespaces selected by the selector may be used
# by this Gateway. Same: Only Routes in the same namespace may be used by this
# Gateway."
NAMESPACE_POLICIES = ("All", "Selector", "Same")

# Features the aether edge does not implement. A Route using one is not
# Accepted (reason UnsupportedValue) on any parent, so none of its rules serve.
# HTTPRouteFilter.type: "Implementation-specific: Filters that are defined and
# supported by specific vendors ... specified using the ExtensionRef field";
# HTTPRouteRule.retry / sessionPersistence: "Support: Extended".
UNSUPPORTED_FILTER_TYPES = frozenset({"ExtensionRef", "ExternalAuth"})
UNSUPPORTED_RULE_FIELDS = ("retry", "sessionPersistence")


def unsupported_fields(route: HTTPRoute) -> list[tuple[str, str]]:
    """Where ``route`` uses a feature the edge rejects: (field path, what is there)."""
    found: list[tuple[str, str]] = []
    for rule in route.rules:
        filters = list(rule.filters)
        for b in rule.backend_refs:
            filters.extend(b.filters)
        found.extend(
            (f.path or rule.path, f"filter {f.type}")
            for f in filters
            if f.type in UNSUPPORTED_FILTER_TYPES
        )
    raw_rules = _raw_rules(route)
    for i, raw in enumerate(raw_rules):
        found.extend(
            (f"spec.rules[{i}].{key}", key)
            for key in UNSUPPORTED_RULE_FIELDS
            if isinstance(raw, dict) and raw.get(key) is not None
        )
    return found


def unsupported_features(route: HTTPRoute) -> list[str]:
    """Features of ``route`` the edge rejects, with where they are."""
    return [
        path if what in UNSUPPORTED_RULE_FIELDS else f"{path}: {what}"
        for path, what in unsupported_fields(route)
    ]


def _raw_rules(route: HTTPRoute) -> list[Any]:
    """Rule fields the typed model does not keep (retry, sessionPersistence)."""
    raw = route.meta.raw
    if raw is None:
        return []
    spec = raw.data.get("spec")
    rules = spec.get("rules") if isinstance(spec, dict) else None
    return rules if isinstance(rules, list) else []


def refers_to_gateway(ref: ParentRef, gw: Gateway) -> bool:
    """ParentReference: group "When unspecified, "gateway.networking.k8s.io" is
    inferred", kind defaults to Gateway, namespace "When unspecified, this refers
    to the local namespace of the Route" (defaults applied by the loader). With
    ``gw`` merged with its ListenerSets, a parentRef to one of those counts too."""
    if ref.group != GATEWAY_GROUP:
        return False
    if ref.kind == "Gateway":
        return (ref.namespace, ref.name) == gw.meta.key
    return ref.kind == "ListenerSet" and any(
        lst.listener_set == (ref.namespace, ref.name) for lst in gw.listeners
    )


def _direct_parent(ref: ParentRef, gw: Gateway, lst: GatewayListener) -> bool:
    """GEP-1713: "Routes attach to all relevant Listeners in their direct Parent
    object": a Gateway parentRef reaches only the Gateway's own listeners ("MUST
    NOT attach to any listeners in the child ListenerSets"), a ListenerSet
    parentRef only that ListenerSet's."""
    if ref.group != GATEWAY_GROUP:
        return False
    if lst.listener_set is None:
        return ref.kind == "Gateway" and (ref.namespace, ref.name) == gw.meta.key
    return ref.kind == "ListenerSet" and (ref.namespace, ref.name) == lst.listener_set


def parent_selects(ref: ParentRef, gw: Gateway, lst: GatewayListener) -> bool:
    """ParentReference.sectionName: "When unspecified (empty string), this will
    reference the entire resource"; port: "this targets all listeners listening
    on the specified port ... When both Port and SectionName are specified, the
    name and port of the selected listener must match both specified values."
    """
    if not _direct_parent(ref, gw, lst):
        return False
    if ref.section_name and ref.section_name != lst.name:
        return False
    return not (ref.port is not None and ref.port != lst.port)


def selector_matches(selector: LabelSelector | None, labels: dict[str, str]) -> bool:
    """Kubernetes LabelSelector semantics: matchLabels and matchExpressions ANDed;
    an empty selector selects everything. RouteNamespaces.selector "must be
    specified when From is set to "Selector"", so a missing one selects nothing.
    """
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in selector.match_labels):
        return False
    for key, op, values in selector.match_expressions:
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def allowed_routes_problem(
    res: Resources, gw: Gateway, lst: GatewayListener, route: HTTPRoute
) -> str | None:
    """Why the Listener's allowedRoutes do not admit the Route (NotAllowedByListeners)."""
    route_ns = route.meta.namespace
    policy = lst.allowed_from
    if policy not in NAMESPACE_POLICIES:
        return f"allowedRoutes.namespaces.from {policy!r} admits no Route"
    # "Same": the namespace of the resource that defines the listener.
    same = lst.listener_set[0] if lst.listener_set is not None else gw.meta.namespace
    if policy == "Same" and route_ns != same:
        return f"allowedRoutes from Same: namespace {route_ns} is not {same}"
    if policy == "Selector" and not selector_matches(
        lst.allowed_selector, res.namespace_labels(route_ns)
    ):
        return f"allowedRoutes selector does not select namespace {route_ns}"
    kinds = (
        frozenset((k.group, k.kind) for k in lst.allowed_kinds)
        if lst.allowed_kinds
        else DEFAULT_KINDS.get(lst.protocol.upper(), frozenset())
    )
    if ROUTE_KIND not in kinds:
        return "allowedRoutes.kinds does not include HTTPRoute"
    return None


@dataclass(frozen=True)
class Refusal:
    """One thing a controller refuses, as its status would say it: the spec's condition
    reason (Accepted=False on a Route, Conflicted or ResolvedRefs=False on a listener,
    ...), the field at fault (a path in its resource's YAML), what is wrong, and, when a
    reference names an object that does not exist, that object as (kind, namespace, name).
    The request-centric answers (does this Route serve this Listener) and the status
    (``spec.status``: which field would a controller refuse) say it alike."""

    reason: str
    path: str
    detail: str
    missing: tuple[str, str, str] | None = None


def attachment_problem(
    res: Resources, gw: Gateway, lst: GatewayListener, route: HTTPRoute
) -> str | None:
    """Why ``route`` does not serve requests on ``lst`` (None when it does)."""
    refusal = attachment_refusal(res, gw, lst, route)
    return None if refusal is None else refusal.detail


def attachment_refusal(
    res: Resources, gw: Gateway, lst: GatewayListener, route: HTTPRoute
) -> Refusal | None:
    """Why ``route`` does not serve requests on ``lst``, as a controller's reason: it
    is not attached to it through any of its parentRefs (``listener_refusal``), or it
    uses a feature the edge does not implement (UnsupportedValue, on every parent)."""
    refusal = listener_refusal(res, gw, lst, route, route.parent_refs)
    if refusal is not None:
        return refusal
    unsupported = unsupported_fields(route)
    if unsupported:
        why = "not Accepted (UnsupportedValue): " + ", ".join(unsupported_features(route))
        return Refusal("UnsupportedValue", unsupported[0][0], why)
    return None


def listener_refusal(
    res: Resources,
    gw: Gateway,
    lst: GatewayListener,
    route: HTTPRoute,
    refs: tuple[ParentRef, ...],
) -> Refusal | None:
    """Why none of ``refs`` (parentRefs of ``route``) attaches ``route`` to ``lst``, in
    the order a controller decides it, or None when one does. The one reading of
    attachment: a Route's answers on a listener (``attachment_refusal``, all its
    parentRefs) and a parentRef's status over its Gateway's listeners
    (``spec.status.parent_refusal``, one parentRef) are both built on it.

    "A Route is successfully attached to a Listener when it is selected by the
    Listener's AllowedRoutes field AND the Route has a valid ParentRef
    selecting the whole Gateway resource or a specific Listener";
    HTTPRouteSpec.hostnames: "If a hostname is specified by both the Listener
    and HTTPRoute, there must be at least one intersecting hostname for the
    HTTPRoute to be attached to the Listener."
    """
    if not any(parent_selects(ref, gw, lst) for ref in refs):
        why = "no parentRef selects this listener (name/sectionName/port)"
        return Refusal("NoMatchingParent", _parent_field(refs, gw), why)
    problem = allowed_routes_problem(res, gw, lst, route)
    if problem:
        return Refusal("NotAllowedByListeners", _parent_field(refs, gw), problem)
    if not effective_hostnames(lst.hostname, route.hostnames):
        why = f"no hostname intersects listener hostname {lst.hostname!r}"
        return Refusal("NoMatchingListenerHostname", "spec.hostnames[0]", why)
    return None


def _parent_field(refs: tuple[ParentRef, ...], gw: Gateway) -> str:
    """The first of ``refs`` that names ``gw`` (or a ListenerSet of it)."""
    return next(
        (ref.path for ref in refs if refers_to_gateway(ref, gw) and ref.path),
        "spec.parentRefs",
    )
