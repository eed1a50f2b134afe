"""Route attachment and status, as a Gateway API controller computes them.

This is the controller half of the reference implementation: which Gateways
are ours, which listeners each HTTPRoute attaches to, which backendRefs
resolve, and the status conditions with the spec's reasons. The translator
reads the result; ``edge-verify status`` prints it. The spec model must not
import the decisions made here (it would then agree with their bugs).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field

from verifier.gatewayapi import DEFAULT_CONTROLLER as DEFAULT_CONTROLLER
from verifier.gatewayapi import mesh_status
from verifier.gatewayapi import model as m
from verifier.gatewayapi.resources import Resources

SERVICE_APP_PROTOCOLS = {
    None: "http1",
    "http": "http1",
    "kubernetes.io/h2c": "h2c",
    "kubernetes.io/ws": "ws",
    "kubernetes.io/wss": None,  # TLS to the backend: not supported by the edge
}
SUPPORTED_FILTERS = frozenset(
    {
        "RequestHeaderModifier",
        "ResponseHeaderModifier",
        "RequestRedirect",
        "URLRewrite",
        "RequestMirror",
        "CORS",
    }
)
HTTP_KINDS = (m.RouteGroupKind(m.GATEWAY_GROUP, "HTTPRoute"),)


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True" | "False"
    reason: str
    message: str = ""


@dataclass(frozen=True)
class AttachedRoute:
    """An HTTPRoute attached to one Gateway listener.

    ``hostnames`` is the intersection of listener and route hostnames; ``("*",)``
    means any host.
    """

    route: m.HTTPRoute
    gateway: m.Gateway
    listener: m.GatewayListener
    hostnames: tuple[str, ...]


@dataclass(frozen=True)
class ResolvedBackend:
    """A backendRef after resolution; ``problem`` is the spec reason when invalid."""

    ref: m.ObjectRef
    weight: int
    filters: tuple[m.Filter, ...]
    namespace: str
    service: m.Service | None = None
    port: m.ServicePort | None = None
    protocol: str = "http1"  # http1 | h2c | ws
    problem: str | None = None
    message: str = ""


@dataclass
class ListenerStatus:
    name: str
    attached_routes: int = 0
    conditions: list[Condition] = field(default_factory=list)


@dataclass
class GatewayStatus:
    conditions: list[Condition] = field(default_factory=list)
    listeners: list[ListenerStatus] = field(default_factory=list)
    attached_listener_sets: int = 0


@dataclass
class ListenerSetStatus:
    """ListenerSet status: conditions, and its listeners' (ListenerEntryStatus)."""

    parent: tuple[str, str]
    conditions: list[Condition] = field(default_factory=list)
    listeners: list[ListenerStatus] = field(default_factory=list)


@dataclass
class RouteParentStatus:
    parent: m.ParentRef
    conditions: list[Condition] = field(default_factory=list)
    # The controller that writes it, when not the Graph's (a mesh route's Service parent).
    controller_name: str | None = None


@dataclass
class Graph:
    """Everything the translator needs, already decided."""

    controller_name: str
    gateways: list[m.Gateway] = field(default_factory=list)
    attached: list[AttachedRoute] = field(default_factory=list)
    # (route ns, route name, rule index) -> resolved backends, in order
    backends: dict[tuple[str, str, int], tuple[ResolvedBackend, ...]] = field(default_factory=dict)
    # filter path within the route -> resolved mirror backend
    mirrors: dict[tuple[str, str, str], ResolvedBackend] = field(default_factory=dict)
    gateway_status: dict[tuple[str, str], GatewayStatus] = field(default_factory=dict)
    route_status: dict[tuple[str, str], list[RouteParentStatus]] = field(default_factory=dict)
    # listeners that are usable (Accepted, not Conflicted), by (gw ns, gw name, listener uid)
    ready_listeners: set[tuple[str, str, str]] = field(default_factory=set)
    listener_set_status: dict[tuple[str, str], ListenerSetStatus] = field(default_factory=dict)
    # (gw ns, gw name, port) -> client certificate validation of its HTTPS listeners
    client_ca: dict[tuple[str, str, int], ClientCa] = field(default_factory=dict)


@dataclass(frozen=True)
class ClientCa:
    """The CA bundle HTTPS listeners on a port verify client certificates with."""

    pem: str  # the ca.crt of every usable caCertificateRef, concatenated
    insecure_fallback: bool  # AllowInsecureFallback: a missing or failing certificate passes


# ---------------------------------------------------------------- hostnames


def _wild_covers(wild: str, host: str) -> bool:
    """`*.example.com` matches one or more labels before `.example.com`, never the apex."""
    suffix = wild[1:]  # ".example.com"
    return host.endswith(suffix) and len(host) > len(suffix)


def intersect_hostnames(listener: str | None, route: tuple[str, ...]) -> tuple[str, ...]:
    """The hostnames a route serves on a listener (GEP-713 hostname intersection)."""
    if listener is None:
        return route if route else ("*",)
    if not route:
        return (listener,)
    out: list[str] = []
    for r in route:
        if r == listener:
            out.append(r)
        elif listener.startswith("*.") and r.startswith("*."):
            if _wild_covers(listener, r[1:].lstrip(".")) or r == listener:
                out.append(r)
            elif _wild_covers(r, listener[1:].lstrip(".")):
                out.append(listener)
        elif listener.startswith("*."):
            if _wild_covers(listener, r):
                out.append(r)
        elif r.startswith("*.") and _wild_covers(r, listener):
            out.append(listener)
    return tuple(dict.fromkeys(out))


# ---------------------------------------------------------------- helpers


def _selector_matches(sel: m.LabelSelector, labels: dict[str, str]) -> bool:
    for k, v in sel.match_labels:
        if labels.get(k) != v:
            return False
    for key, op, values in sel.match_expressions:
        present = key in labels
        if op == "In" and (not present or labels[key] not in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def _granted(
    res: Resources,
    from_kind: str,
    from_ns: str,
    to_group: str,
    to_kind: str,
    to_ns: str,
    to_name: str,
) -> bool:
    """ReferenceGrant: lives in the target namespace and names the source namespace."""
    for grant in res.reference_grants.values():
        if grant.meta.namespace != to_ns:
            continue
        if not any(
            g == m.GATEWAY_GROUP and k == from_kind and ns == from_ns for g, k, ns in grant.from_
        ):
            continue
        if any(g == to_group and k == to_kind and n in (None, to_name) for g, k, n in grant.to):
            return True
    return False


def _listener_kinds(lst: m.GatewayListener) -> tuple[m.RouteGroupKind, ...]:
    return lst.allowed_kinds or HTTP_KINDS


def _owner_namespace(gw: m.Gateway, lst: m.GatewayListener) -> str:
    """The namespace "Same" means, and certificates default to: the ListenerSet's
    for its listeners."""
    return lst.listener_set[0] if lst.listener_set is not None else gw.meta.namespace


def _allows_namespace(res: Resources, gw: m.Gateway, lst: m.GatewayListener, ns: str) -> bool:
    if lst.allowed_from == "All":
        return True
    if lst.allowed_from == "Selector":
        return lst.allowed_selector is not None and _selector_matches(
            lst.allowed_selector, res.namespace_labels(ns)
        )
    if lst.allowed_from == "None":
        return False
    return ns == _owner_namespace(gw, lst)


# ---------------------------------------------------------------- gateways


def _gateway_status(res: Resources, gw: m.Gateway, graph: Graph) -> GatewayStatus:
    status = GatewayStatus(
        [
            Condition("Accepted", "True", "Accepted"),
            Condition("Programmed", "True", "Programmed"),
        ]
    )
    if _insecure_fallback(gw):
        # GatewayConditionInsecureFrontendValidationMode (GEP-91).
        status.conditions.append(
            Condition(
                "InsecureFrontendValidationMode",
                "True",
                "ConfigurationChanged",
                "client certificates are validated with AllowInsecureFallback",
            )
        )
    for index, lst in enumerate(gw.listeners):
        ls = ListenerStatus(lst.name)
        conds: list[Condition] = []
        accepted = lst.protocol in ("HTTP", "HTTPS")
        if not accepted:
            conds.append(
                Condition(
                    "Accepted",
                    "False",
                    "UnsupportedProtocol",
                    f"the edge serves HTTP and HTTPS, not {lst.protocol}",
                )
            )
        elif lst.protocol == "HTTPS" and lst.tls_mode not in (None, "Terminate"):
            accepted = False
            conds.append(
                Condition(
                    "Accepted",
                    "False",
                    "UnsupportedValue",
                    "TLS mode Passthrough is not supported by the edge",
                )
            )
        else:
            conds.append(Condition("Accepted", "True", "Accepted"))
        conflict = _conflict(gw.listeners, index)
        conflicted = conflict is not None
        if conflict is not None:
            conds.append(Condition("Conflicted", "True", conflict))
            if lst.listener_set is not None and accepted:
                # ListenerEntry: a listener that loses on precedence is not accepted.
                conds[0] = Condition("Accepted", "False", conflict)
        else:
            conds.append(Condition("Conflicted", "False", "NoConflicts"))
        resolved = _listener_refs(res, gw, lst)
        ca_ok = True
        if accepted and lst.protocol == "HTTPS" and resolved.status == "True":
            ca, ca_problem = _client_ca(res, gw, lst.port)
            if ca_problem is not None:
                resolved = ca_problem
            if ca is not None:
                graph.client_ca[(gw.meta.namespace, gw.meta.name, lst.port)] = ca
            elif ca_problem is not None:
                ca_ok = False
                conds[0] = Condition(
                    "Accepted", "False", "NoValidCACertificate", ca_problem.message
                )
        conds.append(resolved)
        # InvalidRouteKinds leaves the listener serving (404 for everything,
        # since no route can attach); broken certificates do not. A CA bundle
        # with some unusable references still serves with the usable ones.
        refs_ok = resolved.status == "True" or resolved.reason in (
            "InvalidRouteKinds",
            "InvalidCACertificateRef",
            "InvalidCACertificateKind",
            "RefNotPermitted",
        )
        ok = accepted and ca_ok and not conflicted and refs_ok
        # ListenerEntry conformance: a listener that loses on precedence says why.
        not_ok = conflict if conflict is not None and lst.listener_set is not None else "Invalid"
        conds.append(
            Condition("Programmed", "True" if ok else "False", "Programmed" if ok else not_ok)
        )
        if ok:
            graph.ready_listeners.add((gw.meta.namespace, gw.meta.name, lst.uid))
        ls.conditions = conds
        if lst.listener_set is None:
            status.listeners.append(ls)
        else:
            graph.listener_set_status[lst.listener_set].listeners.append(ls)
    return status


def _conflict(listeners: tuple[m.GatewayListener, ...], index: int) -> str | None:
    """ProtocolConflict / HostnameConflict for the listener at ``index`` of a merged list.

    Within one Gateway (or one ListenerSet) both sides of a conflict are
    conflicted; across them "the first Listener on the precedence list MUST be
    accepted" and the later ones are conflicted (GEP-1713)."""
    lst = listeners[index]
    for i, other in enumerate(listeners):
        if i == index or other.port != lst.port:
            continue
        if other.listener_set != lst.listener_set and i > index:
            continue  # a later resource never conflicts an earlier one
        if other.protocol != lst.protocol:
            return "ProtocolConflict"
        if other.hostname == lst.hostname:
            return "HostnameConflict"
    return None


def _client_ca(
    res: Resources, gw: m.Gateway, port: int
) -> tuple[ClientCa | None, Condition | None]:
    """The port's client CA bundle (None without validation or without a usable
    reference), and the ResolvedRefs condition of its first unusable reference."""
    validation = gw.frontend_validation(port)
    if validation is None:
        return None, None
    bundles: list[str] = []
    problem: Condition | None = None
    for ref in validation.ca_refs:
        ns = ref.namespace or gw.meta.namespace
        bad: tuple[str, str] | None = None
        cm = res.config_maps.get((ns, ref.name))
        if (ref.group, ref.kind) != ("", "ConfigMap"):
            bad = ("InvalidCACertificateKind", f"unsupported caCertificateRef kind {ref.kind}")
        elif ns != gw.meta.namespace and not _granted(
            res, "Gateway", gw.meta.namespace, "", "ConfigMap", ns, ref.name
        ):
            bad = (
                "RefNotPermitted",
                f"no ReferenceGrant in {ns} allows this Gateway to use ConfigMap {ref.name}",
            )
        elif cm is None or not cm.ca_crt or "-----BEGIN CERTIFICATE-----" not in cm.ca_crt:
            bad = (
                "InvalidCACertificateRef",
                f"ConfigMap {ns}/{ref.name} is missing or has no PEM certificate in ca.crt",
            )
        if bad is not None:
            problem = problem or Condition("ResolvedRefs", "False", *bad)
        elif cm is not None and cm.ca_crt:
            bundles.append(cm.ca_crt if cm.ca_crt.endswith("\n") else cm.ca_crt + "\n")
    if not bundles:
        return None, problem or Condition(
            "ResolvedRefs", "False", "InvalidCACertificateRef", "no caCertificateRefs"
        )
    fallback = validation.mode == m.ALLOW_INSECURE_FALLBACK
    return ClientCa("".join(bundles), fallback), problem


def _insecure_fallback(gw: m.Gateway) -> bool:
    """Some HTTPS listener's port validates client certificates with AllowInsecureFallback."""
    for lst in gw.listeners:
        v = gw.frontend_validation(lst.port) if lst.protocol == "HTTPS" else None
        if v is not None and v.mode == m.ALLOW_INSECURE_FALLBACK:
            return True
    return False


def _listener_refs(res: Resources, gw: m.Gateway, lst: m.GatewayListener) -> Condition:
    for kind in lst.allowed_kinds:
        if kind not in HTTP_KINDS:
            return Condition(
                "ResolvedRefs",
                "False",
                "InvalidRouteKinds",
                f"route kind {kind.group}/{kind.kind} is not supported",
            )
    if lst.protocol == "HTTPS":
        if not lst.certificate_refs:
            return Condition(
                "ResolvedRefs",
                "False",
                "InvalidCertificateRef",
                "an HTTPS listener needs a certificateRef",
            )
        owner_ns = _owner_namespace(gw, lst)
        owner_kind = "Gateway" if lst.listener_set is None else "ListenerSet"
        for ref in lst.certificate_refs:
            ns = ref.namespace or owner_ns
            if ref.group != "" or ref.kind != "Secret":
                return Condition(
                    "ResolvedRefs",
                    "False",
                    "InvalidCertificateRef",
                    f"unsupported certificateRef kind {ref.kind}",
                )
            if ns != owner_ns and not _granted(
                res, owner_kind, owner_ns, "", "Secret", ns, ref.name
            ):
                return Condition(
                    "ResolvedRefs",
                    "False",
                    "RefNotPermitted",
                    f"no ReferenceGrant in {ns} allows this Gateway to use Secret {ref.name}",
                )
            secret = res.secrets.get((ns, ref.name))
            if secret is None or secret.type != "kubernetes.io/tls" or not secret.cert_pem:
                return Condition(
                    "ResolvedRefs",
                    "False",
                    "InvalidCertificateRef",
                    f"Secret {ns}/{ref.name} is missing or not a kubernetes.io/tls Secret",
                )
    return Condition("ResolvedRefs", "True", "ResolvedRefs")


# ---------------------------------------------------------------- routes


def _resolve_ref(
    res: Resources, route: m.HTTPRoute, ref: m.ObjectRef, weight: int, filters: tuple[m.Filter, ...]
) -> ResolvedBackend:
    ns = ref.namespace or route.meta.namespace
    ResolvedBackend(ref, weight, filters, ns)

    def bad(reason: str, message: str) -> ResolvedBackend:
        return ResolvedBackend(ref, weight, filters, ns, problem=reason, message=message)

    if ref.group != "" or ref.kind != "Service":
        return bad(
            "InvalidKind", f"backendRef kind {ref.group or 'core'}/{ref.kind} is not supported"
        )
    if ns != route.meta.namespace and not _granted(
        res, "HTTPRoute", route.meta.namespace, "", "Service", ns, ref.name
    ):
        return bad(
            "RefNotPermitted",
            f"no ReferenceGrant in {ns} allows HTTPRoutes from "
            f"{route.meta.namespace} to reference Service {ref.name}",
        )
    svc = res.services.get((ns, ref.name))
    if svc is None:
        return bad("BackendNotFound", f"Service {ns}/{ref.name} not found")
    port = next((p for p in svc.ports if p.port == ref.port), None)
    if port is None:
        return bad("BackendNotFound", f"Service {ns}/{ref.name} has no port {ref.port}")
    proto = SERVICE_APP_PROTOCOLS.get(port.app_protocol)
    if proto is None:
        return bad("UnsupportedProtocol", f"appProtocol {port.app_protocol} is not supported")
    for f in filters:
        if f.type not in SUPPORTED_FILTERS - {"RequestRedirect", "URLRewrite", "CORS"}:
            return bad("UnsupportedValue", f"backendRef filter {f.type} is not supported")
    return ResolvedBackend(ref, weight, filters, ns, svc, port, proto)


def unsupported_feature(route: m.HTTPRoute) -> str | None:
    """Why the controller refuses the route (a filter or field it cannot program), if it
    does: a Gateway's and a Service's parents alike."""
    for rule in route.rules:
        for f in rule.filters:
            if f.type not in SUPPORTED_FILTERS:
                return f"filter type {f.type} ({f.path}) is not supported by the edge"
    raw = route.meta.raw
    if raw is not None:
        for i, rule in enumerate(raw.data.get("spec", {}).get("rules") or []):
            for key in ("sessionPersistence", "retry"):
                if isinstance(rule, dict) and key in rule:
                    return f"spec.rules[{i}].{key} is not supported by the edge"
    return None


BackendTable = dict[tuple[str, str, int], tuple[ResolvedBackend, ...]]
MirrorTable = dict[tuple[str, str, str], ResolvedBackend]


def resolve_rules(
    res: Resources, route: m.HTTPRoute, backends: BackendTable, mirrors: MirrorTable
) -> Condition:
    """Resolve every backendRef and mirror of ``route`` into ``backends`` and ``mirrors``
    (a Gateway's ``Graph`` or the mesh's), and say the ResolvedRefs condition: whatever
    its parents, a route's references resolve alike."""
    first: ResolvedBackend | None = None
    for rule in route.rules:
        resolved = tuple(
            _resolve_ref(res, route, b.ref, b.weight, b.filters) for b in rule.backend_refs
        )
        backends[(route.meta.namespace, route.meta.name, rule.index)] = resolved
        for f in rule.filters:
            if f.request_mirror is not None:
                mr = _resolve_ref(res, route, f.request_mirror.backend, 1, ())
                mirrors[(route.meta.namespace, route.meta.name, f.path)] = mr
                resolved = (*resolved, mr)
        first = first or next((b for b in resolved if b.problem), None)
    if first is not None:
        return Condition("ResolvedRefs", "False", first.problem or "", first.message)
    return Condition("ResolvedRefs", "True", "ResolvedRefs")


def _attach_parent(
    res: Resources, route: m.HTTPRoute, ref: m.ParentRef, gw: m.Gateway, graph: Graph
) -> Condition:
    owner = (ref.namespace, ref.name) if ref.kind == "ListenerSet" else None
    candidates = [
        lst
        for lst in gw.listeners
        if lst.listener_set == owner
        and (ref.section_name is None or lst.name == ref.section_name)
        and (ref.port is None or lst.port == ref.port)
    ]
    if not candidates:
        return Condition(
            "Accepted",
            "False",
            "NoMatchingParent",
            "no listener matches the parentRef's sectionName/port",
        )
    ready = [
        c for c in candidates if (gw.meta.namespace, gw.meta.name, c.uid) in graph.ready_listeners
    ]
    allowed = [
        c
        for c in ready
        if any(k.kind == "HTTPRoute" and k.group == m.GATEWAY_GROUP for k in _listener_kinds(c))
        and _allows_namespace(res, gw, c, route.meta.namespace)
    ]
    if not allowed:
        return Condition(
            "Accepted",
            "False",
            "NotAllowedByListeners",
            "no listener allows this route's kind and namespace",
        )
    matched = [(c, intersect_hostnames(c.hostname, route.hostnames)) for c in allowed]
    matched = [(c, hosts) for c, hosts in matched if hosts]
    if not matched:
        return Condition(
            "Accepted",
            "False",
            "NoMatchingListenerHostname",
            "no listener hostname intersects the route's hostnames",
        )
    for lst, hosts in matched:
        graph.attached.append(AttachedRoute(route, gw, lst, hosts))
    return Condition("Accepted", "True", "Accepted")


def _listener_status(graph: Graph, gw: m.Gateway, lst: m.GatewayListener) -> ListenerStatus:
    owner = (
        graph.listener_set_status[lst.listener_set].listeners
        if lst.listener_set is not None
        else graph.gateway_status[gw.meta.key].listeners
    )
    return next(ls for ls in owner if ls.name == lst.name)


def _shared_address_conflicts(graph: Graph) -> None:
    """Shared addressing: every Gateway is on one address, so listeners of different
    Gateways on one port conflict as one Gateway's would (ProtocolConflict, or the
    same hostname: HostnameConflict), and "The implementation MUST NOT pick one
    conflicting Listener as the winner": every side is Conflicted, not Programmed.
    Routes attached to them are then refused like any route on such a listener."""
    ready = [
        (gw, lst)
        for gw in graph.gateways
        for lst in gw.listeners
        if (gw.meta.namespace, gw.meta.name, lst.uid) in graph.ready_listeners
    ]
    conflicted: list[tuple[m.Gateway, m.GatewayListener, str]] = []
    for gw, lst in ready:
        others = [o for g, o in ready if g is not gw and o.port == lst.port]
        if any(o.protocol != lst.protocol for o in others):
            conflicted.append((gw, lst, "ProtocolConflict"))
        elif any((o.hostname or "") == (lst.hostname or "") for o in others):
            conflicted.append((gw, lst, "HostnameConflict"))
    for gw, lst, reason in conflicted:
        graph.ready_listeners.discard((gw.meta.namespace, gw.meta.name, lst.uid))
        message = f"another Gateway on the shared address listens on port {lst.port} alike"
        ls = _listener_status(graph, gw, lst)
        for i, cond in enumerate(ls.conditions):
            if cond.type == "Conflicted":
                ls.conditions[i] = Condition("Conflicted", "True", reason, message)
            elif cond.type == "Programmed":
                ls.conditions[i] = Condition("Programmed", "False", "Invalid", message)


def build_graph(
    res: Resources, controller_name: str = DEFAULT_CONTROLLER, *, shared_address: bool = False
) -> Graph:
    """Decide attachment and status for every Gateway of ``controller_name``;
    ``shared_address``: all of them on one address (see ``_shared_address_conflicts``)."""
    graph = Graph(controller_name)
    ours = {
        name for name, gc in res.gateway_classes.items() if gc.controller_name == controller_name
    }
    for key in sorted(res.gateways):
        gw = res.gateways[key]
        if gw.class_name in ours:
            merged = _with_listener_sets(res, gw, graph)
            graph.gateways.append(merged)
            graph.gateway_status[key] = _gateway_status(res, merged, graph)
    if shared_address:
        _shared_address_conflicts(graph)
    for lss in graph.listener_set_status.values():
        _listener_set_conditions(lss, graph.gateway_status[lss.parent])
    by_key = {gw.meta.key: gw for gw in graph.gateways}
    set_parent = {k: s.parent for k, s in graph.listener_set_status.items() if s.listeners}
    for rkey in sorted(res.httproutes):
        route = res.httproutes[rkey]
        parents: list[RouteParentStatus] = []
        unsupported = unsupported_feature(route)
        resolved: Condition | None = None
        for ref in route.parent_refs:
            if mesh_status.is_service_parent(ref):
                # GAMMA: a Service parent's status, as the mesh's controller writes it.
                if resolved is None:
                    resolved = resolve_rules(res, route, graph.backends, graph.mirrors)
                ok, reason, message = mesh_status.accepted(res, ref, unsupported)
                parents.append(
                    RouteParentStatus(
                        ref,
                        [Condition("Accepted", ok, reason, message), resolved],
                        mesh_status.MESH_CONTROLLER,
                    )
                )
                continue
            if ref.kind == "ListenerSet":
                ls_parent = set_parent.get((ref.namespace, ref.name))
                parent = by_key.get(ls_parent) if ls_parent is not None else None
            else:
                parent = by_key.get((ref.namespace, ref.name)) if ref.kind == "Gateway" else None
            if ref.group != m.GATEWAY_GROUP or parent is None:
                continue  # not a parent this controller owns: no status from us
            if resolved is None:
                resolved = resolve_rules(res, route, graph.backends, graph.mirrors)
            if unsupported:
                accepted = Condition("Accepted", "False", "UnsupportedValue", unsupported)
            else:
                accepted = _attach_parent(res, route, ref, parent, graph)
            parents.append(RouteParentStatus(ref, [accepted, resolved]))
        if parents:
            graph.route_status[rkey] = parents
    counts = Counter((a.gateway.meta.key, a.listener.uid) for a in graph.attached)
    for gkey, status in graph.gateway_status.items():
        for ls in status.listeners:
            ls.attached_routes = counts[(gkey, ls.name)]
    for lskey, lss in graph.listener_set_status.items():
        for ls in lss.listeners:
            ls.attached_routes = counts[(lss.parent, f"{lskey[0]}/{lskey[1]}/{ls.name}")]
    return graph


def _listener_set_allowed(res: Resources, gw: m.Gateway, ns: str) -> bool:
    """Gateway.spec.allowedListeners.namespaces.from: None (the default), Same,
    All or Selector."""
    policy = gw.allowed_listeners
    if policy == "All":
        return True
    if policy == "Same":
        return ns == gw.meta.namespace
    if policy == "Selector":
        return gw.allowed_listeners_selector is not None and _selector_matches(
            gw.allowed_listeners_selector, res.namespace_labels(ns)
        )
    return False


def _with_listener_sets(res: Resources, gw: m.Gateway, graph: Graph) -> m.Gateway:
    """The Gateway with the listeners of the ListenerSets it admits appended, oldest
    ListenerSet first, then by namespace/name (ListenerSetSpec.listeners). A
    ListenerSet it does not admit gets status Accepted False (NotAllowed)."""
    sets = [
        ls
        for ls in res.listener_sets.values()
        if ls.parent_group == m.GATEWAY_GROUP
        and ls.parent_kind == "Gateway"
        and (ls.parent_namespace, ls.parent_name) == gw.meta.key
    ]
    sets.sort(key=lambda ls: (ls.meta.creation_timestamp, ls.meta.namespace, ls.meta.name))
    listeners = list(gw.listeners)
    for ls in sets:
        status = ListenerSetStatus(gw.meta.key)
        graph.listener_set_status[ls.meta.key] = status
        if not _listener_set_allowed(res, gw, ls.meta.namespace):
            message = f"Gateway {gw.meta.namespace}/{gw.meta.name} does not allow it"
            status.conditions = [
                Condition("Accepted", "False", "NotAllowed", message),
                Condition("Programmed", "False", "NotAllowed", message),
            ]
            continue
        listeners.extend(ls.listeners)
    return dataclasses.replace(gw, listeners=tuple(listeners))


def _listener_set_conditions(lss: ListenerSetStatus, parent: GatewayStatus) -> None:
    """Accepted/Programmed of an admitted ListenerSet: True while any of its
    listeners is; ListenersNotValid when none is."""
    if lss.conditions:
        return  # not admitted
    parent.attached_listener_sets += 1
    programmed = any(
        c.type == "Programmed" and c.status == "True" for ls in lss.listeners for c in ls.conditions
    )
    if programmed:
        lss.conditions = [
            Condition("Accepted", "True", "Accepted"),
            Condition("Programmed", "True", "Programmed"),
        ]
    else:
        why = "no listener of the ListenerSet is valid"
        lss.conditions = [
            Condition("Accepted", "False", "ListenersNotValid", why),
            Condition("Programmed", "False", "ListenersNotValid", why),
        ]
