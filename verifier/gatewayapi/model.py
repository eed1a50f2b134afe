"""Typed, frozen views of the Gateway API and core objects the edge cares about.

Built only from objects that passed validation, so parsing here can trust the
shapes and apply the spec's defaults in one place. Every object keeps its
``RawObject`` (excluded from equality) and sub-objects their field path, so any
later finding can be turned back into a file:line.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from verifier.gatewayapi.load import Location, RawObject

GATEWAY_GROUP = "gateway.networking.k8s.io"


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _pairs(items: Any) -> tuple[tuple[str, str], ...]:
    return tuple((str(h.get("name", "")), str(h.get("value", ""))) for h in _l(items))


@dataclass(frozen=True, slots=True)
class Meta:
    kind: str
    namespace: str
    name: str
    labels: tuple[tuple[str, str], ...] = ()
    creation_timestamp: str = ""
    raw: RawObject | None = field(default=None, compare=False, repr=False, hash=False)

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)

    def where(self, path: str = "") -> Location:
        if self.raw is None:
            return Location("<generated>", 0)
        return self.raw.where(path)


def _meta(raw: RawObject, default_ns: str = "default") -> Meta:
    meta = _d(raw.data.get("metadata"))
    labels = tuple(sorted((str(k), str(v)) for k, v in _d(meta.get("labels")).items()))
    ns = raw.namespace or (
        default_ns if raw.kind != "Namespace" and raw.kind != "GatewayClass" else ""
    )
    ts = meta.get("creationTimestamp")
    return Meta(raw.kind, ns, raw.name, labels, "" if ts is None else _ts(ts), raw)


def _ts(value: Any) -> str:
    """RFC 3339 in a form that sorts chronologically as text (YAML may parse it)."""
    if hasattr(value, "isoformat"):
        text = str(value.isoformat())
        return text.replace("+00:00", "Z")
    return str(value)


# ---------------------------------------------------------------- GatewayClass/Gateway


@dataclass(frozen=True, slots=True)
class GatewayClass:
    meta: Meta
    controller_name: str


@dataclass(frozen=True, slots=True)
class RouteGroupKind:
    group: str
    kind: str


@dataclass(frozen=True, slots=True)
class LabelSelector:
    match_labels: tuple[tuple[str, str], ...] = ()
    # (key, operator, values)
    match_expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class SecretObjectRef:
    group: str
    kind: str
    name: str
    namespace: str | None
    path: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class GatewayListener:
    name: str
    hostname: str | None
    port: int
    protocol: str
    tls_mode: str | None
    certificate_refs: tuple[SecretObjectRef, ...]
    allowed_from: str  # Same | All | Selector | None
    allowed_selector: LabelSelector | None
    allowed_kinds: tuple[RouteGroupKind, ...]
    path: str = field(default="", compare=False)
    # The ListenerSet that defines it ((namespace, name)); None: the Gateway itself.
    # A Gateway merged with its ListenerSets (GEP-1713) holds listeners of both.
    listener_set: tuple[str, str] | None = None

    @property
    def uid(self) -> str:
        """Unique among a Gateway's merged listeners: names need only be unique
        within their own Gateway or ListenerSet."""
        if self.listener_set is None:
            return self.name
        return f"{self.listener_set[0]}/{self.listener_set[1]}/{self.name}"


# FrontendValidationModeType: "Defaults to AllowValidOnly".
ALLOW_VALID_ONLY = "AllowValidOnly"
ALLOW_INSECURE_FALLBACK = "AllowInsecureFallback"


@dataclass(frozen=True, slots=True)
class FrontendValidation:
    """spec.tls.frontend's ``validation`` for one port (GEP-91): the CA bundles a
    client certificate must chain to, and whether one that does not is refused."""

    ca_refs: tuple[SecretObjectRef, ...]
    mode: str
    path: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class FrontendTLS:
    """spec.tls.frontend: a default, and per-port entries that replace it
    ("Once set this configuration overrides the default configuration for all
    Listeners handling HTTPS traffic that match this port")."""

    default: FrontendValidation | None
    per_port: tuple[tuple[int, FrontendValidation | None], ...] = ()

    def for_port(self, port: int) -> FrontendValidation | None:
        for p, validation in self.per_port:
            if p == port:
                return validation
        return self.default


@dataclass(frozen=True, slots=True, weakref_slot=True)  # the spec model caches by it
class Gateway:
    meta: Meta
    class_name: str
    listeners: tuple[GatewayListener, ...]
    addresses: tuple[tuple[str, str], ...] = ()  # (type, value)
    tls: tuple[str, ...] = ()  # the keys set under spec.tls ("frontend", "backend")
    frontend: FrontendTLS | None = None
    # spec.allowedListeners.namespaces: "None" (the default) admits no ListenerSet.
    allowed_listeners: str = "None"
    allowed_listeners_selector: LabelSelector | None = None

    def frontend_validation(self, port: int) -> FrontendValidation | None:
        """The client certificate validation of HTTPS listeners on ``port``."""
        return None if self.frontend is None else self.frontend.for_port(port)


def _validation(value: Any, path: str) -> FrontendValidation | None:
    v = _d(value)
    if not v:
        return None
    refs = tuple(
        SecretObjectRef(
            str(r.get("group", "") or ""),
            str(r.get("kind", "")),
            str(r.get("name", "")),
            _opt_str(r.get("namespace")),
            f"{path}.caCertificateRefs[{j}]",
        )
        for j, r in enumerate(_l(v.get("caCertificateRefs")))
        if isinstance(r, dict)
    )
    return FrontendValidation(refs, str(v.get("mode") or ALLOW_VALID_ONLY), path)


def _frontend(spec: dict[str, Any]) -> FrontendTLS | None:
    fe = _d(_d(spec.get("tls")).get("frontend"))
    if not fe:
        return None
    base = "spec.tls.frontend"
    default = _validation(_d(fe.get("default")).get("validation"), f"{base}.default.validation")
    per_port = tuple(
        (
            int(e.get("port", 0)),
            _validation(_d(e.get("tls")).get("validation"), f"{base}.perPort[{i}].tls.validation"),
        )
        for i, e in enumerate(_l(fe.get("perPort")))
        if isinstance(e, dict)
    )
    return FrontendTLS(default, per_port)


def _selector(value: Any) -> LabelSelector:
    sel = _d(value)
    labels = tuple(sorted((str(k), str(v)) for k, v in _d(sel.get("matchLabels")).items()))
    exprs = tuple(
        (
            str(e.get("key", "")),
            str(e.get("operator", "")),
            tuple(str(v) for v in _l(e.get("values"))),
        )
        for e in _l(sel.get("matchExpressions"))
    )
    return LabelSelector(labels, exprs)


def parse_listeners(
    items: Any, listener_set: tuple[str, str] | None = None
) -> tuple[GatewayListener, ...]:
    """spec.listeners of a Gateway, or of a ListenerSet (whose ListenerEntry has
    the same fields)."""
    listeners = []
    for i, item in enumerate(_l(items)):
        lst = _d(item)
        tls = _d(lst.get("tls"))
        certs = tuple(
            SecretObjectRef(
                str(c.get("group", "") or ""),
                str(c.get("kind", "Secret") or "Secret"),
                str(c.get("name", "")),
                _opt_str(c.get("namespace")),
                f"spec.listeners[{i}].tls.certificateRefs[{j}]",
            )
            for j, c in enumerate(_l(tls.get("certificateRefs")))
        )
        allowed = _d(lst.get("allowedRoutes"))
        nss = _d(allowed.get("namespaces"))
        kinds = tuple(
            RouteGroupKind(str(k.get("group", GATEWAY_GROUP) or ""), str(k.get("kind", "")))
            for k in _l(allowed.get("kinds"))
        )
        protocol = str(lst.get("protocol", ""))
        listeners.append(
            GatewayListener(
                name=str(lst.get("name", "")),
                hostname=_opt_str(lst.get("hostname")),
                port=int(lst.get("port", 0)),
                protocol=protocol,
                tls_mode=(str(tls.get("mode", "Terminate")) if tls else None),
                certificate_refs=certs,
                allowed_from=str(nss.get("from", "Same")),
                allowed_selector=_selector(nss.get("selector")) if "selector" in nss else None,
                allowed_kinds=kinds,
                path=f"spec.listeners[{i}]",
                listener_set=listener_set,
            )
        )
    return tuple(listeners)


def parse_gateway(raw: RawObject) -> Gateway:
    spec = _d(raw.data.get("spec"))
    listeners = parse_listeners(spec.get("listeners"))
    addresses = tuple(
        (str(a.get("type", "IPAddress")), str(a.get("value", "")))
        for a in _l(spec.get("addresses"))
    )
    tls_keys = tuple(sorted(str(k) for k, v in _d(spec.get("tls")).items() if v))
    allowed = _d(_d(spec.get("allowedListeners")).get("namespaces"))
    return Gateway(
        _meta(raw),
        str(spec.get("gatewayClassName", "")),
        listeners,
        addresses,
        tls_keys,
        _frontend(spec),
        allowed_listeners=str(allowed.get("from", "None")),
        allowed_listeners_selector=(
            _selector(allowed.get("selector")) if "selector" in allowed else None
        ),
    )


@dataclass(frozen=True, slots=True)
class ListenerSet:
    """Listeners to merge into a parent Gateway (GEP-1713, standard since v1.5)."""

    meta: Meta
    parent_group: str
    parent_kind: str
    parent_namespace: str  # defaulted to the ListenerSet's namespace
    parent_name: str
    listeners: tuple[GatewayListener, ...]


def parse_listener_set(raw: RawObject) -> ListenerSet:
    meta = _meta(raw)
    spec = _d(raw.data.get("spec"))
    parent = _d(spec.get("parentRef"))
    return ListenerSet(
        meta,
        str(parent.get("group", GATEWAY_GROUP) or GATEWAY_GROUP),
        str(parent.get("kind", "Gateway") or "Gateway"),
        str(parent.get("namespace") or meta.namespace),
        str(parent.get("name", "")),
        parse_listeners(spec.get("listeners"), meta.key),
    )


# ---------------------------------------------------------------- HTTPRoute


@dataclass(frozen=True, slots=True)
class ParentRef:
    group: str
    kind: str
    namespace: str  # defaulted to the route's namespace
    name: str
    section_name: str | None
    port: int | None
    path: str = field(default="", compare=False)

    @property
    def service_parent(self) -> bool:
        """A parentRef to a core Service: group "" and kind Service (a mesh route's)."""
        return self.group == "" and self.kind == "Service"


@dataclass(frozen=True, slots=True)
class PathMatch:
    type: str  # Exact | PathPrefix | RegularExpression
    value: str


@dataclass(frozen=True, slots=True)
class ValueMatch:
    """A header or query parameter match."""

    type: str  # Exact | RegularExpression
    name: str
    value: str


@dataclass(frozen=True, slots=True)
class RouteMatch:
    path: PathMatch
    headers: tuple[ValueMatch, ...]
    query_params: tuple[ValueMatch, ...]
    method: str | None
    path_: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class HeaderModifier:
    set: tuple[tuple[str, str], ...] = ()
    add: tuple[tuple[str, str], ...] = ()
    remove: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PathModifier:
    type: str  # ReplaceFullPath | ReplacePrefixMatch
    replace_full_path: str | None = None
    replace_prefix_match: str | None = None


@dataclass(frozen=True, slots=True)
class Redirect:
    scheme: str | None
    hostname: str | None
    path: PathModifier | None
    port: int | None
    status_code: int


@dataclass(frozen=True, slots=True)
class Rewrite:
    hostname: str | None
    path: PathModifier | None


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """A BackendObjectReference: defaults applied (group core, kind Service)."""

    group: str
    kind: str
    name: str
    namespace: str | None
    port: int | None
    path: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class Mirror:
    backend: ObjectRef
    percent: int | None = None
    fraction: tuple[int, int] | None = None  # (numerator, denominator)


@dataclass(frozen=True, slots=True)
class Cors:
    allow_origins: tuple[str, ...] = ()
    allow_credentials: bool | None = None
    allow_methods: tuple[str, ...] = ()
    allow_headers: tuple[str, ...] = ()
    expose_headers: tuple[str, ...] = ()
    max_age: int = 5


@dataclass(frozen=True, slots=True)
class Filter:
    type: str
    request_header_modifier: HeaderModifier | None = None
    response_header_modifier: HeaderModifier | None = None
    request_redirect: Redirect | None = None
    url_rewrite: Rewrite | None = None
    request_mirror: Mirror | None = None
    cors: Cors | None = None
    extension_ref: tuple[str, str, str] | None = None  # (group, kind, name)
    path: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class BackendRef:
    ref: ObjectRef
    weight: int
    filters: tuple[Filter, ...]
    path: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class RouteRule:
    name: str | None
    matches: tuple[RouteMatch, ...]
    filters: tuple[Filter, ...]
    backend_refs: tuple[BackendRef, ...]
    request_timeout: str | None
    backend_request_timeout: str | None
    index: int = 0
    path: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class HTTPRoute:
    meta: Meta
    parent_refs: tuple[ParentRef, ...]
    hostnames: tuple[str, ...]
    rules: tuple[RouteRule, ...]


def _header_modifier(value: Any) -> HeaderModifier:
    hm = _d(value)
    return HeaderModifier(
        _pairs(hm.get("set")), _pairs(hm.get("add")), tuple(str(r) for r in _l(hm.get("remove")))
    )


def _path_modifier(value: Any) -> PathModifier | None:
    if not isinstance(value, dict):
        return None
    return PathModifier(
        str(value.get("type", "")),
        _opt_str(value.get("replaceFullPath")),
        _opt_str(value.get("replacePrefixMatch")),
    )


def _object_ref(value: Any, path: str, port: Callable[[Any], int | None] = _opt_int) -> ObjectRef:
    ref = _d(value)
    return ObjectRef(
        str(ref.get("group", "") or ""),
        str(ref.get("kind", "Service") or "Service"),
        str(ref.get("name", "")),
        _opt_str(ref.get("namespace")),
        port(ref.get("port")),
        path,
    )


def _filter(value: Any, path: str) -> Filter:
    f = _d(value)
    ftype = str(f.get("type", ""))
    redirect = rewrite = mirror = cors = None
    if isinstance(f.get("requestRedirect"), dict):
        r = f["requestRedirect"]
        redirect = Redirect(
            _opt_str(r.get("scheme")),
            _opt_str(r.get("hostname")),
            _path_modifier(r.get("path")),
            _opt_int(r.get("port")),
            int(r.get("statusCode", 302)),
        )
    if isinstance(f.get("urlRewrite"), dict):
        r = f["urlRewrite"]
        rewrite = Rewrite(_opt_str(r.get("hostname")), _path_modifier(r.get("path")))
    if isinstance(f.get("requestMirror"), dict):
        m = f["requestMirror"]
        frac = m.get("fraction")
        mirror = Mirror(
            _object_ref(m.get("backendRef"), f"{path}.requestMirror.backendRef"),
            _opt_int(m.get("percent")),
            (int(frac.get("numerator", 0)), int(frac.get("denominator", 100)))
            if isinstance(frac, dict)
            else None,
        )
    if isinstance(f.get("cors"), dict):
        c = f["cors"]
        cors = Cors(
            tuple(str(o) for o in _l(c.get("allowOrigins"))),
            None if c.get("allowCredentials") is None else bool(c.get("allowCredentials")),
            tuple(str(o) for o in _l(c.get("allowMethods"))),
            tuple(str(o) for o in _l(c.get("allowHeaders"))),
            tuple(str(o) for o in _l(c.get("exposeHeaders"))),
            int(c.get("maxAge", 5)),
        )
    ext = _d(f.get("extensionRef"))
    return Filter(
        type=ftype,
        request_header_modifier=_header_modifier(f["requestHeaderModifier"])
        if isinstance(f.get("requestHeaderModifier"), dict)
        else None,
        response_header_modifier=_header_modifier(f["responseHeaderModifier"])
        if isinstance(f.get("responseHeaderModifier"), dict)
        else None,
        request_redirect=redirect,
        url_rewrite=rewrite,
        request_mirror=mirror,
        cors=cors,
        extension_ref=(
            str(ext.get("group", "")),
            str(ext.get("kind", "")),
            str(ext.get("name", "")),
        )
        if ext
        else None,
        path=path,
    )


def _matches(items: Any, rule_path: str) -> tuple[RouteMatch, ...]:
    if not _l(items):
        # The CRD defaults a rule without matches to one PathPrefix "/" match.
        return (RouteMatch(PathMatch("PathPrefix", "/"), (), (), None, f"{rule_path}"),)
    out = []
    for i, item in enumerate(_l(items)):
        m = _d(item)
        p = _d(m.get("path")) if "path" in m else {}
        path = PathMatch(str(p.get("type", "PathPrefix")), str(p.get("value", "/")))
        out.append(
            RouteMatch(
                path,
                tuple(
                    ValueMatch(
                        str(h.get("type", "Exact")), str(h.get("name", "")), str(h.get("value", ""))
                    )
                    for h in _l(m.get("headers"))
                ),
                tuple(
                    ValueMatch(
                        str(q.get("type", "Exact")), str(q.get("name", "")), str(q.get("value", ""))
                    )
                    for q in _l(m.get("queryParams"))
                ),
                _opt_str(m.get("method")),
                f"{rule_path}.matches[{i}]",
            )
        )
    return tuple(out)


def _parent_refs(
    spec: dict[str, Any], namespace: str, port: Callable[[Any], int | None]
) -> tuple[ParentRef, ...]:
    return tuple(
        ParentRef(
            str(p.get("group", GATEWAY_GROUP) if p.get("group") is not None else GATEWAY_GROUP),
            str(p.get("kind", "Gateway") or "Gateway"),
            str(p.get("namespace") or namespace),
            str(p.get("name", "")),
            _opt_str(p.get("sectionName")),
            port(p.get("port")),
            f"spec.parentRefs[{i}]",
        )
        for i, p in enumerate(_d(x) for x in _l(spec.get("parentRefs")))
    )


def parse_httproute(raw: RawObject) -> HTTPRoute:
    meta = _meta(raw)
    spec = _d(raw.data.get("spec"))
    parents = _parent_refs(spec, meta.namespace, _opt_int)
    raw_rules = _l(spec.get("rules")) or [{}]
    rules = []
    for i, item in enumerate(raw_rules):
        r = _d(item)
        rp = f"spec.rules[{i}]"
        timeouts = _d(r.get("timeouts"))
        backends = tuple(
            BackendRef(
                _object_ref(b, f"{rp}.backendRefs[{j}]"),
                int(b.get("weight", 1)),
                tuple(
                    _filter(f, f"{rp}.backendRefs[{j}].filters[{k}]")
                    for k, f in enumerate(_l(b.get("filters")))
                ),
                f"{rp}.backendRefs[{j}]",
            )
            for j, b in enumerate(_d(x) for x in _l(r.get("backendRefs")))
        )
        rules.append(
            RouteRule(
                _opt_str(r.get("name")),
                _matches(r.get("matches"), rp),
                tuple(_filter(f, f"{rp}.filters[{k}]") for k, f in enumerate(_l(r.get("filters")))),
                backends,
                _opt_str(timeouts.get("request")),
                _opt_str(timeouts.get("backendRequest")),
                i,
                rp,
            )
        )
    return HTTPRoute(meta, parents, tuple(str(h) for h in _l(spec.get("hostnames"))), tuple(rules))


# ---------------------------------------------------------------- route kinds not read

# Route kinds of the Gateway API that the edge does not serve. Other implementations
# do, and their xDS for them must be told apart from mistakes in the HTTPRoutes'.
OTHER_ROUTE_KINDS = frozenset({"GRPCRoute", "TCPRoute", "TLSRoute", "UDPRoute"})


@dataclass(frozen=True, slots=True)
class OtherRoute:
    """What check needs of a route kind it does not judge: where it attaches, the
    hostnames it claims and the Services it sends to. It is never validated (the edge
    does not read it), so malformed parts are dropped rather than reported."""

    meta: Meta
    parent_refs: tuple[ParentRef, ...]
    hostnames: tuple[str, ...]
    backends: tuple[ObjectRef, ...]


def _lenient_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_other_route(raw: RawObject) -> OtherRoute:
    meta = _meta(raw)
    spec = _d(raw.data.get("spec"))
    parents = _parent_refs(spec, meta.namespace, _lenient_int)
    backends = tuple(
        _object_ref(b, f"spec.rules[{i}].backendRefs[{j}]", _lenient_int)
        for i, r in enumerate(_d(x) for x in _l(spec.get("rules")))
        for j, b in enumerate(_d(x) for x in _l(r.get("backendRefs")))
    )
    hostnames = tuple(str(h) for h in _l(spec.get("hostnames")) if isinstance(h, str))
    return OtherRoute(meta, parents, hostnames, backends)


# ---------------------------------------------------------------- ReferenceGrant and core


@dataclass(frozen=True, slots=True)
class ReferenceGrant:
    meta: Meta
    from_: tuple[tuple[str, str, str], ...]  # (group, kind, namespace)
    to: tuple[tuple[str, str, str | None], ...]  # (group, kind, name)


def parse_reference_grant(raw: RawObject) -> ReferenceGrant:
    spec = _d(raw.data.get("spec"))
    return ReferenceGrant(
        _meta(raw),
        tuple(
            (str(f.get("group", "")), str(f.get("kind", "")), str(f.get("namespace", "")))
            for f in (_d(x) for x in _l(spec.get("from")))
        ),
        tuple(
            (str(t.get("group", "")), str(t.get("kind", "")), _opt_str(t.get("name")))
            for t in (_d(x) for x in _l(spec.get("to")))
        ),
    )


@dataclass(frozen=True, slots=True)
class ServicePort:
    name: str
    port: int
    target_port: str
    protocol: str
    app_protocol: str | None


@dataclass(frozen=True, slots=True)
class Service:
    meta: Meta
    cluster_ip: str | None
    ports: tuple[ServicePort, ...]
    selector: tuple[tuple[str, str], ...]
    type: str = "ClusterIP"
    external_name: str | None = None


def parse_service(raw: RawObject) -> Service:
    spec = _d(raw.data.get("spec"))
    ports = tuple(
        ServicePort(
            str(p.get("name", "")),
            int(p.get("port", 0)),
            str(p.get("targetPort", p.get("port", 0))),
            str(p.get("protocol", "TCP")),
            _opt_str(p.get("appProtocol")),
        )
        for p in (_d(x) for x in _l(spec.get("ports")))
    )
    # "clusterIPs[0]" is clusterIP: a manifest may give only the list (the API server
    # then sets clusterIP from it).
    given = _l(spec.get("clusterIPs"))
    return Service(
        _meta(raw),
        _opt_str(spec.get("clusterIP")) or _opt_str(given[0] if given else None),
        ports,
        tuple(sorted((str(k), str(v)) for k, v in _d(spec.get("selector")).items())),
        str(spec.get("type", "ClusterIP")),
        _opt_str(spec.get("externalName")),
    )


@dataclass(frozen=True, slots=True)
class EndpointSlice:
    meta: Meta
    service_name: str
    addresses: tuple[str, ...]
    ports: tuple[tuple[str, int], ...]  # (name, port)


def parse_endpoint_slice(raw: RawObject) -> EndpointSlice:
    meta = _meta(raw)
    addresses = tuple(
        str(a)
        for e in (_d(x) for x in _l(raw.data.get("endpoints")))
        if _d(e.get("conditions")).get("ready", True) is not False
        for a in _l(e.get("addresses"))
    )
    ports = tuple(
        (str(p.get("name", "") or ""), int(p.get("port", 0)))
        for p in (_d(x) for x in _l(raw.data.get("ports")))
    )
    return EndpointSlice(
        meta, meta.label_map.get("kubernetes.io/service-name", ""), addresses, ports
    )


@dataclass(frozen=True, slots=True)
class Namespace:
    meta: Meta


@dataclass(frozen=True, slots=True)
class Secret:
    meta: Meta
    type: str
    cert_pem: str
    key_pem: str


def _b64(value: Any) -> str:
    try:
        return base64.b64decode(str(value or ""), validate=False).decode("utf-8", "replace")
    except (ValueError, TypeError):
        return ""


def parse_secret(raw: RawObject) -> Secret:
    data = _d(raw.data.get("data"))
    string_data = _d(raw.data.get("stringData"))
    cert = str(string_data.get("tls.crt", "")) or _b64(data.get("tls.crt"))
    key = str(string_data.get("tls.key", "")) or _b64(data.get("tls.key"))
    return Secret(_meta(raw), str(raw.data.get("type", "Opaque")), cert, key)


@dataclass(frozen=True, slots=True)
class ConfigMap:
    """Only ``ca.crt`` is read: the key GEP-91's caCertificateRefs name."""

    meta: Meta
    ca_crt: str | None  # None: no such key


def parse_config_map(raw: RawObject) -> ConfigMap:
    data = _d(raw.data.get("data"))
    value = data.get("ca.crt")
    if value is None and "ca.crt" in _d(raw.data.get("binaryData")):
        value = _b64(_d(raw.data.get("binaryData")).get("ca.crt"))
    return ConfigMap(_meta(raw), None if value is None else str(value))


@dataclass(frozen=True, slots=True)
class ContainerPort:
    """A port a pod's container declares: what a Service's named targetPort resolves to."""

    name: str
    port: int
    protocol: str


@dataclass(frozen=True, slots=True)
class Workload:
    """A Deployment/StatefulSet/DaemonSet: what identity resolution and, for Services
    given without EndpointSlices, the endpoints a cluster would publish need."""

    meta: Meta
    pod_labels: tuple[tuple[str, str], ...]
    service_account: str
    # Pods it runs: ``spec.replicas`` (default 1); a DaemonSet runs one (one node).
    replicas: int = 1
    container_ports: tuple[ContainerPort, ...] = ()
    # The pod template's annotations: aether reads its capture scope there
    # (``verifier.gatewayapi.workloads.captures_all``).
    pod_annotations: tuple[tuple[str, str], ...] = ()


def parse_workload(raw: RawObject) -> Workload:
    spec = _d(raw.data.get("spec"))
    template = _d(spec.get("template"))
    labels = _d(_d(template.get("metadata")).get("labels"))
    annotations = _d(_d(template.get("metadata")).get("annotations"))
    pod_spec = _d(template.get("spec"))
    sa = pod_spec.get("serviceAccountName") or pod_spec.get("serviceAccount") or "default"
    replicas = 1 if raw.kind == "DaemonSet" else _opt_int(spec.get("replicas"))
    ports = tuple(
        ContainerPort(
            str(p.get("name", "") or ""),
            int(p.get("containerPort", 0)),
            str(p.get("protocol", "TCP")),
        )
        for c in (_d(x) for x in _l(pod_spec.get("containers")))
        for p in (_d(x) for x in _l(c.get("ports")))
    )
    return Workload(
        _meta(raw),
        tuple(sorted((str(k), str(v)) for k, v in labels.items())),
        str(sa),
        1 if replicas is None else replicas,
        ports,
        tuple(sorted((str(k), str(v)) for k, v in annotations.items())),
    )
