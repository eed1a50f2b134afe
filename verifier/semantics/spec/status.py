"""What a controller's status would refuse in the configuration, field by field.

The rest of the spec model is request-centric: does this Route serve this request on
this Listener. Someone who mistyped a Service name asks the other question: which
parentRef, hostname, backendRef, listener or ListenerSet would a conformant controller
refuse, with which of the spec's reasons, and at which field. The answers are built
on the same readings the requests use (``attach.listener_refusal``, ``Refusal``,
``unsupported_fields``, ``backends.resolve_ref``,
``listeners.listener_conflict``/``certificate_problem``, ``listenersets.admits``),
so the status and the answers cannot drift apart. Written from the spec's condition
reasons (``apis/v1/shared_types.go`` RouteConditionReason, ``gateway_types.go``
ListenerConditionReason, ``listenerset_types.go``); pure, like the rest of the model.
"""

from __future__ import annotations

import dataclasses

from verifier.gatewayapi.model import (
    GATEWAY_GROUP,
    Gateway,
    GatewayListener,
    HTTPRoute,
    ObjectRef,
    ParentRef,
)
from verifier.gatewayapi.resources import Resources
from verifier.semantics.spec.attach import (
    Refusal,
    listener_refusal,
    parent_selects,
    unsupported_fields,
)
from verifier.semantics.spec.listeners import (
    TLS_PROTOCOLS,
    certificate_problem,
    gateway_problem,
    listener_conflict,
)
from verifier.semantics.spec.listenersets import admits, merged_gateway
from verifier.semantics.spec.mesh import selects_port

# ---------------------------------------------------------------- HTTPRoute parents


def parent_gateway(
    res: Resources, ref: ParentRef, controller_name: str
) -> Gateway | Refusal | None:
    """The Gateway (merged with its ListenerSets) a parentRef reaches, a Refusal when it
    names a Gateway or ListenerSet that does not exist, or None when the parent is not
    this controller's to judge (another class's Gateway, a Service of the mesh, a
    ListenerSet its Gateway does not admit: that one is refused on the ListenerSet).

    RouteConditionReason "NoMatchingParent": "there are no matching Parents"."""
    if ref.group != GATEWAY_GROUP or ref.kind not in ("Gateway", "ListenerSet"):
        return None
    key = (ref.namespace, ref.name)
    if ref.kind == "ListenerSet":
        ls = res.listener_sets.get(key)
        if ls is None:
            detail = f"ListenerSet {ref.namespace}/{ref.name} does not exist"
            return Refusal("NoMatchingParent", f"{ref.path}.name", detail, ("ListenerSet", *key))
        gw = res.gateways.get((ls.parent_namespace, ls.parent_name))
        if gw is None or not admits(res, gw, ls):
            return None
    else:
        found = res.gateways.get(key)
        if found is None:
            detail = f"Gateway {ref.namespace}/{ref.name} does not exist"
            return Refusal("NoMatchingParent", f"{ref.path}.name", detail, ("Gateway", *key))
        gw = found
    if gateway_problem(res, gw, controller_name) is not None:
        return None
    return merged_gateway(res, gw)


def _describe_parent(ref: ParentRef) -> str:
    parts = [f"sectionName {ref.section_name}"] if ref.section_name else []
    parts += [f"port {ref.port}"] if ref.port is not None else []
    return " and ".join(parts)


def parent_refusal(res: Resources, route: HTTPRoute, ref: ParentRef, gw: Gateway) -> Refusal | None:
    """Why ``gw`` (merged, as ``parent_gateway`` gives it) does not accept ``route``
    through ``ref``, in the order a controller decides it, or None when it does.

    "NoMatchingParent ... when a Route ParentRef specifies a Port and/or SectionName
    that does not match any Listeners in the Gateway"; "NotAllowedByListeners ... the
    Gateway has no Listener whose allowedRoutes criteria permit the route";
    "NoMatchingListenerHostname ... the Gateway has no compatible Listeners whose
    Hostname matches the route". Whether a selected listener is programmed is the
    listener's own status (Conflicted, ResolvedRefs), not the Route's."""
    refused: list[tuple[GatewayListener, Refusal]] = []
    for lst in gw.listeners:
        refusal = listener_refusal(res, gw, lst, route, (ref,))
        if refusal is None:
            return None  # attached to one listener of the parent: accepted
        if refusal.reason != "NoMatchingParent":
            refused.append((lst, refusal))
    if not refused:  # no listener selected
        what = _describe_parent(ref) or "any listener"
        detail = f"no listener of {ref.kind} {ref.namespace}/{ref.name} matches {what}"
        # At the sectionName when no listener has that name, else at the port.
        whole = dataclasses.replace(ref, section_name=None, port=None)
        named = any(
            parent_selects(whole, gw, lst) and lst.name == ref.section_name for lst in gw.listeners
        )
        field = "sectionName" if ref.section_name and not named else "port"
        return Refusal("NoMatchingParent", f"{ref.path}.{field}", detail)
    allowed = [lst for lst, r in refused if r.reason != "NotAllowedByListeners"]
    if not allowed:  # every selected listener's allowedRoutes refuse it: the first says why
        return refused[0][1]
    hosts = ", ".join(sorted({lst.hostname or "*" for lst in allowed}))
    detail = f"no hostname of the route intersects the listener hostnames ({hosts})"
    return Refusal("NoMatchingListenerHostname", "spec.hostnames[0]", detail)


def unsupported_refusals(route: HTTPRoute) -> list[Refusal]:
    """HTTPRouteFilter.type: "Unknown values here must result in the implementation
    setting the Accepted Condition for the Route to `status: False`, with a Reason of
    `UnsupportedValue`"; the same for the Extended rule fields the edge lacks."""
    return [
        Refusal("UnsupportedValue", path, f"{what} is not supported by the edge")
        for path, what in unsupported_fields(route)
    ]


# ---------------------------------------------------------------- mesh routes' Service parents


def service_parent_refusal(res: Resources, ref: ParentRef) -> Refusal | None:
    """Why the Service parentRef ``ref`` of a mesh route matches no Service frontend, or
    None when it matches some port of its Service (``spec.mesh.selects_port``).

    RouteConditionReason "NoMatchingParent": "there are no matching Parents ... when a
    Route ParentRef specifies a Port and/or SectionName that does not match";
    ParentReference.port: "When the parent resource is a Service, this targets a
    specific port in the Service spec"; sectionName: "Service: Port name"."""
    key = (ref.namespace, ref.name)
    svc = res.services.get(key)
    if svc is None:
        detail = f"Service {ref.namespace}/{ref.name} does not exist"
        return Refusal("NoMatchingParent", f"{ref.path}.name", detail, ("Service", *key))
    if any(selects_port(ref, port) for port in svc.ports):
        return None
    named = ref.section_name is None or any(p.name == ref.section_name for p in svc.ports)
    field = "port" if named and ref.port is not None else "sectionName"
    detail = f"Service {ref.namespace}/{ref.name} has no port with {_describe_parent(ref)}"
    return Refusal("NoMatchingParent", f"{ref.path}.{field}", detail)


def service_kind_in_gateway_group(ref: ParentRef) -> bool:
    """``kind: Service`` left in the Gateway API group: ParentReference.group "When
    unspecified, "gateway.networking.k8s.io" is inferred. To set the core API group
    (such as for a "Service" kind referent), Group must be explicitly set to "" (empty
    string)." Such a parentRef names no Service: no mesh applies the route."""
    return ref.kind == "Service" and ref.group == GATEWAY_GROUP


# ---------------------------------------------------------------- HTTPRoute backends


def backend_refs(route: HTTPRoute) -> list[ObjectRef]:
    """Every backendRef of ``route`` and every RequestMirror's (rule and backendRef
    filters), in the order written: what ResolvedRefs judges ("ResolvedRefs ... all
    the Route's rules' references are resolved"). ``backends.resolve_ref`` gives each
    one's reason and the field at fault."""
    refs = []
    for rule in route.rules:
        refs += [b.ref for b in rule.backend_refs]
        filters = [*rule.filters, *(f for b in rule.backend_refs for f in b.filters)]
        refs += [f.request_mirror.backend for f in filters if f.request_mirror is not None]
    return refs


# ---------------------------------------------------------------- listeners


def listener_refusals(
    res: Resources, gw: Gateway, lst: GatewayListener, peers: tuple[GatewayListener, ...] = ()
) -> list[Refusal]:
    """A listener that is Conflicted, or an HTTPS listener whose certificates do not
    resolve (ResolvedRefs=False). ``gw`` is merged with its ListenerSets; paths are in
    the YAML of the resource that defines the listener.

    "If a Listener is conflicted, its network port should not be configured";
    ListenerTLSConfig.certificateRefs "is required to have at least one element when
    the mode is set to "Terminate" (default)"."""
    out = []
    conflict = listener_conflict(gw, lst, peers)
    if conflict:
        out.append(Refusal(conflict.split()[0], lst.path, conflict))
    if lst.protocol.upper() not in TLS_PROTOCOLS or lst.tls_mode not in (None, "Terminate"):
        return out
    if not lst.certificate_refs:
        detail = "an HTTPS listener needs a certificateRef to a kubernetes.io/tls Secret"
        return [*out, Refusal("InvalidCertificateRef", f"{lst.path}.tls", detail)]
    for ref in lst.certificate_refs:
        problem = certificate_problem(res, gw, lst, ref)
        if problem is not None:
            missing = ("Secret", *problem.missing) if problem.missing else None
            out.append(Refusal(problem.reason, ref.path, problem.detail, missing))
    return out


def listener_set_refusal(
    res: Resources, ls_key: tuple[str, str], controller_name: str
) -> Refusal | None:
    """Why the ListenerSet is not accepted, or None when it is (or its Gateway is not
    this controller's). "NotAllowed ... the ListenerSet is not allowed to be attached
    to the Gateway": a Gateway admits ListenerSets only through allowedListeners ("By
    default, Gateways do not allow ListenerSet attachment"). A parentRef to a Gateway
    that does not exist leaves it with no parent at all."""
    ls = res.listener_sets[ls_key]
    if (ls.parent_group, ls.parent_kind) != (GATEWAY_GROUP, "Gateway"):
        return None
    parent = (ls.parent_namespace, ls.parent_name)
    gw = res.gateways.get(parent)
    if gw is None:
        detail = f"its parent Gateway {parent[0]}/{parent[1]} does not exist"
        return Refusal("NoParent", "spec.parentRef.name", detail, ("Gateway", *parent))
    if gateway_problem(res, gw, controller_name) is not None or admits(res, gw, ls):
        return None
    detail = (
        f"Gateway {parent[0]}/{parent[1]} allowedListeners from {gw.allowed_listeners} "
        f"does not admit namespace {ls.meta.namespace}"
    )
    return Refusal("NotAllowed", "spec.parentRef", detail)
