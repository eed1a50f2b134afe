"""What the Gateway API spec says the edge must serve, computed here from the resources.

Written from the spec text, independently of the reference controller, so the
structural rules do not inherit its decisions. Deliberately light and conservative: a
listener the spec lets an implementation leave unprogrammed (bad certificateRefs,
conflicts, unsupported kinds) is "maybe", and what attaches to it is allowed but never
required.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verifier.findings import Finding, new
from verifier.gatewayapi import model as m
from verifier.gatewayapi import workloads
from verifier.gatewayapi.resources import Resources
from verifier.semantics.spec.frontend import port_trust
from verifier.semantics.spec.listenersets import merged_gateway

# HTTPRouteFilterType: the Core and Extended filters every conformant implementation
# knows; a route using anything else may legitimately be refused (UnsupportedValue).
STANDARD_FILTERS = frozenset(
    {
        "RequestHeaderModifier",
        "ResponseHeaderModifier",
        "RequestRedirect",
        "URLRewrite",
        "RequestMirror",
        "CORS",
    }
)
HTTP_PROTOCOLS = ("HTTP", "HTTPS")


def gateway_finding(
    code: str,
    rule: str,
    gw: m.Gateway,
    path: str,
    *,
    listener_set: m.ListenerSet | None = None,
    **params: Any,
) -> Finding:
    """A finding located at ``path`` of Gateway ``gw``'s YAML, or of the ListenerSet
    that defines the listener it is about."""
    meta = listener_set.meta if listener_set is not None else gw.meta
    where = meta.where(path)
    kind = "ListenerSet" if listener_set is not None else "Gateway"
    return new(
        code,
        rule,
        file=where.file,
        line=where.line,
        resource=f"{kind} {meta.namespace}/{meta.name}",
        **params,
    )


def listener_set_of(res: Resources, lst: m.GatewayListener) -> m.ListenerSet | None:
    return None if lst.listener_set is None else res.listener_sets.get(lst.listener_set)


def our_gateways(res: Resources, controller: str) -> list[m.Gateway]:
    """Gateways of ``controller``, each with the listeners of the ListenerSets it admits."""
    classes = {n for n, gc in res.gateway_classes.items() if gc.controller_name == controller}
    return [
        merged_gateway(res, res.gateways[k])
        for k in sorted(res.gateways)
        if res.gateways[k].class_name in classes
    ]


def _owner(gw: m.Gateway, lst: m.GatewayListener) -> tuple[str, str]:
    """(kind, namespace) of the resource that defines the listener."""
    if lst.listener_set is None:
        return "Gateway", gw.meta.namespace
    return "ListenerSet", lst.listener_set[0]


def _granted(res: Resources, owner: tuple[str, str], ns: str, name: str) -> bool:
    """ReferenceGrant in the Secret's namespace naming the listener's owner kind and namespace."""
    for grant in res.reference_grants.values():
        if grant.meta.namespace != ns:
            continue
        if any(k == owner[0] and f == owner[1] for _g, k, f in grant.from_) and any(
            k == "Secret" and g == "" and n in (None, name) for g, k, n in grant.to
        ):
            return True
    return False


def _certs_ok(res: Resources, gw: m.Gateway, lst: m.GatewayListener) -> bool:
    if not lst.certificate_refs or lst.tls_mode not in (None, "Terminate"):
        return False
    owner = _owner(gw, lst)
    for ref in lst.certificate_refs:
        ns = ref.namespace or owner[1]
        secret = res.secrets.get((ns, ref.name))
        if ref.group or ref.kind != "Secret" or secret is None or not secret.cert_pem:
            return False
        if secret.type != "kubernetes.io/tls":
            return False
        if ns != owner[1] and not _granted(res, owner, ns, ref.name):
            return False
    return True


def shared_with(res: Resources, controller: str, gw: m.Gateway) -> list[m.GatewayListener]:
    """Shared addressing: the HTTP(S) listeners of the controller's other Gateways,
    which share this Gateway's address and so its ports."""
    return [
        lst
        for other in our_gateways(res, controller)
        if other.meta.key != gw.meta.key
        for lst in other.listeners
        if listener_state(res, other, lst) == "ready"
    ]


def listener_state(
    res: Resources,
    gw: m.Gateway,
    lst: m.GatewayListener,
    others: list[m.GatewayListener] | None = None,
) -> str:
    """``ready`` (must be programmed), ``maybe``, or ``ignored`` (not HTTP at all);
    ``others``: listeners of other Gateways on the same address (shared addressing),
    which conflict with this one as its own Gateway's would."""
    if lst.protocol not in HTTP_PROTOCOLS:
        return "ignored"
    peers = [p for p in [*gw.listeners, *(others or ())] if p.port == lst.port]
    # Listener conflicts: same port with another protocol, or same protocol and hostname.
    if any(p.protocol != lst.protocol for p in peers) or any(
        p is not lst and p.protocol == lst.protocol and p.hostname == lst.hostname for p in peers
    ):
        return "maybe"
    if any((k.group, k.kind) != (m.GATEWAY_GROUP, "HTTPRoute") for k in lst.allowed_kinds):
        return "maybe"
    if lst.protocol == "HTTPS" and not _certs_ok(res, gw, lst):
        return "maybe"
    trust = port_trust(res, gw, lst.port) if lst.protocol == "HTTPS" else None
    if trust is not None and not trust.usable:
        return "maybe"  # Accepted False (NoValidCACertificate): it must not serve
    return "ready"


def _selector_matches(sel: m.LabelSelector, labels: dict[str, str]) -> bool:
    ops = {
        "In": lambda k, vs: k in labels and labels[k] in vs,
        "NotIn": lambda k, vs: k not in labels or labels[k] not in vs,
        "Exists": lambda k, vs: k in labels,
        "DoesNotExist": lambda k, vs: k not in labels,
    }
    return all(labels.get(k) == v for k, v in sel.match_labels) and all(
        ops.get(op, lambda k, vs: False)(key, values) for key, op, values in sel.match_expressions
    )


def namespace_allowed(res: Resources, gw: m.Gateway, lst: m.GatewayListener, ns: str) -> bool:
    """AllowedRoutes.namespaces.from: All, Same (the default), Selector, None."""
    if lst.allowed_from == "All":
        return True
    if lst.allowed_from == "Selector":
        sel = lst.allowed_selector
        return sel is not None and _selector_matches(sel, res.namespace_labels(ns))
    return lst.allowed_from == "Same" and ns == _owner(gw, lst)[1]


def _wild_covers(wild: str, host: str) -> bool:
    """ "`*.example.com` would match both `test.example.com`, and `foo.test.example.com`,
    but not `example.com`" (Hostname): a wildcard label stands for one or more labels."""
    return host.endswith(wild[1:]) and len(host) > len(wild) - 1


def intersect(listener: str | None, route: tuple[str, ...]) -> tuple[str, ...]:
    """The hostnames a route serves on a listener (HTTPRouteSpec.hostnames, GEP-713)."""
    if not route:
        return (listener.lower() if listener else "*",)
    if listener is None:
        return tuple(h.lower() for h in route)
    lis = listener.lower()
    out: list[str] = []
    for host in (h.lower() for h in route):
        if host == lis or (lis.startswith("*.") and _wild_covers(lis, host)):
            out.append(host)
        elif host.startswith("*.") and _wild_covers(host, lis):
            out.append(lis)
    return tuple(dict.fromkeys(out))


def attaches(ref: m.ParentRef, gw: m.Gateway, lst: m.GatewayListener) -> bool:
    """A parentRef reaches the listeners of the resource it names (GEP-1713: a
    Gateway's own, or one ListenerSet's)."""
    owner = (
        ("Gateway", gw.meta.key) if lst.listener_set is None else ("ListenerSet", lst.listener_set)
    )
    return (
        (ref.group, ref.kind) == (m.GATEWAY_GROUP, owner[0])
        and (ref.namespace, ref.name) == owner[1]
        and ref.section_name in (None, lst.name)
        and ref.port in (None, lst.port)
    )


def host_covers(host: str, domain: str) -> bool:
    """The Gateway hostname ``host`` covers every Host Envoy's ``domain`` matches."""
    if host in ("*", domain):
        return True
    if host.startswith("*.") and not domain.endswith("*") and domain != "*":
        stem = domain[1:] if domain.startswith("*.") else domain
        return stem.endswith(host[1:])
    return False


def _standard(route: m.HTTPRoute) -> bool:
    filters = [f for r in route.rules for f in r.filters] + [
        f for r in route.rules for b in r.backend_refs for f in b.filters
    ]
    return all(f.type in STANDARD_FILTERS for f in filters)


@dataclass
class Served:
    """Hostnames the spec makes a port serve: ``required`` surely, ``allowed`` at most."""

    required: set[str] = field(default_factory=set)
    allowed: set[str] = field(default_factory=set)
    listeners: list[tuple[m.Gateway, m.GatewayListener]] = field(default_factory=list)


def served_hostnames(res: Resources, controller: str, shared: bool = False) -> dict[int, Served]:
    out: dict[int, Served] = {}
    for gw in our_gateways(res, controller):
        others = shared_with(res, controller, gw) if shared else None
        for lst in gw.listeners:
            state = listener_state(res, gw, lst, others)
            if state == "ignored":
                continue
            served = out.setdefault(lst.port, Served())
            served.listeners.append((gw, lst))
            for route in res.httproutes.values():
                if not any(attaches(p, gw, lst) for p in route.parent_refs):
                    continue
                if not namespace_allowed(res, gw, lst, route.meta.namespace):
                    continue
                hosts = intersect(lst.hostname, route.hostnames)
                served.allowed.update(hosts)
                if state == "ready" and _standard(route):
                    served.required.update(hosts)
    return out


def named_by_httproutes(res: Resources) -> set[tuple[str, str, int | None]]:
    """(namespace, Service, port) of every backendRef and mirror of an HTTPRoute."""
    named: set[tuple[str, str, int | None]] = set()
    for route in res.httproutes.values():
        ns = route.meta.namespace
        for rule in route.rules:
            filters = [*rule.filters, *(f for b in rule.backend_refs for f in b.filters)]
            refs = [b.ref for b in rule.backend_refs]
            refs += [f.request_mirror.backend for f in filters if f.request_mirror is not None]
            named |= {(r.namespace or ns, r.name, r.port) for r in refs if r.kind == "Service"}
    return named


def is_mesh(res: Resources, ns: str, name: str, registry: frozenset[tuple[str, str]]) -> bool:
    """aether: a namespace labelled ``aether.io/managed: "true"``, or the mesh registry."""
    return res.namespace_labels(ns).get("aether.io/managed") == "true" or (ns, name) in registry


def service_accounts(res: Resources, svc: m.Service) -> set[str]:
    """The ServiceAccounts of the workloads whose pods the Service selects; else default."""
    return set(workloads.service_accounts(res, *svc.meta.key))
