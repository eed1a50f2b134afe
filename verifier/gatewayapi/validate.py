"""Reject, before translation, what the Kubernetes API server would reject on create.

The edge is verified offline, from YAML nobody has applied yet, so a route the
API server would refuse must not be translated as if it were live. For the
Gateway API kinds this is the v1.5 experimental-channel CRD (OpenAPI schema
plus CEL ``x-kubernetes-validations``; see ``schema_*.py``); for the core kinds
it is the few built-in checks the edge's input depends on.

Unlike the API server, every problem is reported: schema errors and CEL rules
alike (the API server skips CEL rules once a type or enum error is found).

Error codes (``InputError.code``):

Schema (OpenAPI keywords): ``required``, ``type``, ``enum``, ``pattern``,
``min-length``, ``max-length``, ``minimum``, ``maximum``, ``min-items``,
``max-items``, ``max-properties``, ``unique`` (list-type set/map duplicates
and CEL uniqueness rules), ``unknown-field``, ``invalid-header-name`` (the
HeaderName pattern).

CEL rules: ``invalid-path`` (Exact/PathPrefix path values),
``filter-type-mismatch`` (filter type vs. its config field),
``filter-conflict`` (RequestRedirect with URLRewrite, or with backendRefs),
``filter-repeated``, ``rewrite-requires-prefix-match``,
``path-modifier-mismatch``, ``backend-port-required``,
``backend-timeout-exceeds-request``, ``mirror-percent-and-fraction``,
``invalid-fraction``, ``cors-wildcard``, ``protocol-config-mismatch``
(ExternalAuth), ``parent-ref-section-required``, ``tls-not-allowed``,
``tls-mode``, ``tls-required``, ``tls-certificate-required``,
``hostname-not-allowed``, ``invalid-label-key``, ``invalid-annotation-key``,
``cel`` (other CEL rules: session persistence).

Ours, not the API server's: ``invalid-regex`` (RegularExpression values must
compile as RE2, because Envoy compiles them with RE2).

Objects and core kinds: ``unsupported-version`` (apiVersion not served),
``invalid-name`` (metadata.name/namespace format), ``tls-secret-missing-key``,
``invalid-base64`` (Secret data); for apps/v1 workloads, ``selector-mismatch``
(spec.selector does not select the pod template's labels) and ``unique``
(container port names in one pod).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from verifier.errors import InputError
from verifier.gatewayapi.load import RawObject
from verifier.gatewayapi.schema_common import (
    ANNOTATION_VALUE,
    DNS_LABEL_RE,
    DNS_SUBDOMAIN_RE,
    LABEL_SELECTOR,
    LABEL_VALUE,
    QUALIFIED_NAME_RE,
)
from verifier.gatewayapi.schema_core import (
    Arr,
    Ctx,
    Int,
    Map,
    Obj,
    Str,
    as_int,
    check,
    d,
    identity,
    join,
    lst,
    matches,
    opt,
    req,
)
from verifier.gatewayapi.schema_gateway import (
    GATEWAY_SPEC,
    GATEWAYCLASS_SPEC,
    LISTENERSET_SPEC,
    REFERENCEGRANT_SPEC,
)
from verifier.gatewayapi.schema_httproute import HTTPROUTE_SPEC
from verifier.suggest import closest

_ANY = Obj({}, open=True)


def _root(spec: Obj, spec_required: bool) -> Obj:
    # metadata is checked by _check_metadata; status is ignored on create.
    return Obj(
        {
            "apiVersion": opt(Str()),
            "kind": opt(Str()),
            "metadata": opt(_ANY),
            "spec": req(spec) if spec_required else opt(spec),
            "status": opt(_ANY),
        }
    )


# (group, kind) -> (served versions, root schema or None for core kinds).
GATEWAY_API: dict[str, tuple[tuple[str, ...], Obj]] = {
    "GatewayClass": (("v1", "v1beta1"), _root(GATEWAYCLASS_SPEC, True)),
    "Gateway": (("v1", "v1beta1"), _root(GATEWAY_SPEC, True)),
    "HTTPRoute": (("v1", "v1beta1"), _root(HTTPROUTE_SPEC, True)),
    # v1 is new in v1.5; spec only becomes required in v1.6.
    "ReferenceGrant": (("v1beta1", "v1"), _root(REFERENCEGRANT_SPEC, False)),
    # Standard channel since v1.5 (GEP-1713).
    "ListenerSet": (("v1",), _root(LISTENERSET_SPEC, True)),
}
CORE_VERSIONS = {
    ("", "Service"): "v1",
    ("", "Namespace"): "v1",
    ("", "Secret"): "v1",
    ("", "ConfigMap"): "v1",
    ("discovery.k8s.io", "EndpointSlice"): "v1",
    ("apps", "Deployment"): "v1",
    ("apps", "StatefulSet"): "v1",
    ("apps", "DaemonSet"): "v1",
}

# What metadata.name must look like, per kind (Kubernetes name validation).
_SUBDOMAIN = (DNS_SUBDOMAIN_RE, 253, "a lowercase RFC 1123 subdomain (letters, digits, '-', '.')")
_LABEL = (DNS_LABEL_RE, 63, "a lowercase RFC 1123 label (letters, digits, '-')")
_DNS1035 = (
    r"^[a-z]([-a-z0-9]*[a-z0-9])?$",
    63,
    "a lowercase RFC 1035 label (starting with a letter)",
)
NAME_RULES = {"Namespace": _LABEL, "Service": _DNS1035}

METADATA_FIELDS = frozenset(
    {
        "name", "generateName", "namespace", "labels", "annotations", "uid",
        "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
        "deletionGracePeriodSeconds", "ownerReferences", "finalizers", "managedFields",
        "selfLink",
    }
)  # fmt: skip
LABELS = Map(
    LABEL_VALUE,
    keys=Str(
        max_len=316,  # 253 prefix + '/' + 63 name; the pattern bounds each part
        pattern=QUALIFIED_NAME_RE,
        expect="must be a label key: an optional DNS subdomain prefix and '/', then a name "
        "of up to 63 characters",
        code="invalid-label-key",
    ),
)
ANNOTATIONS = Map(
    ANNOTATION_VALUE,
    keys=Str(
        pattern=QUALIFIED_NAME_RE,
        expect="must be an annotation key: an optional DNS subdomain prefix and '/', then "
        "a name of up to 63 characters",
        code="invalid-annotation-key",
    ),
)


def validate_object(raw: RawObject) -> list[InputError]:
    """Every problem the API server would find creating ``raw`` (and RE2 checks)."""
    ctx = Ctx(raw)
    kind, group = raw.kind, raw.group
    version = raw.api_version.rsplit("/", 1)[-1]
    if kind in GATEWAY_API and group == "gateway.networking.k8s.io":
        versions, schema = GATEWAY_API[kind]
        if _check_version(ctx, version, versions):
            _check_metadata(ctx, _SUBDOMAIN)
            check(ctx, schema, raw.data, "")
    elif (group, kind) in CORE_VERSIONS and _check_version(
        ctx, version, (CORE_VERSIONS[(group, kind)],)
    ):
        _check_metadata(ctx, NAME_RULES.get(kind, _SUBDOMAIN))
        checker = CORE_CHECKS.get(kind)
        if checker is not None:
            checker(ctx, raw.data)
    return sorted(ctx.errors)


def _check_version(ctx: Ctx, version: str, served: tuple[str, ...]) -> bool:
    if version in served:
        return True
    ctx.error(
        "apiVersion",
        "unsupported-version",
        f"{ctx.raw.kind} is served as {', '.join(served)}, got {ctx.raw.api_version!r}",
    )
    return False


def _check_name(ctx: Ctx, path: str, value: Any, rule: tuple[str, int, str]) -> None:
    pattern, limit, words = rule
    if not isinstance(value, str):
        ctx.error(path, "type", f"expected string, got {value!r}")
    elif len(value) > limit or not matches(pattern, value):
        ctx.error(
            path, "invalid-name", f"must be {words}, at most {limit} characters, got {value!r}"
        )


def _check_metadata(ctx: Ctx, name_rule: tuple[str, int, str]) -> None:
    meta = ctx.raw.data.get("metadata")
    if not isinstance(meta, dict):
        if meta is not None:
            ctx.error("metadata", "type", f"expected object, got {meta!r}")
        ctx.error("metadata.name", "required", "required field 'name' is missing")
        return
    for key in meta:
        if key not in METADATA_FIELDS:
            near = closest(str(key), METADATA_FIELDS)
            hint = f"; did you mean {near!r}?" if near else ""
            ctx.error(
                join("metadata", key), "unknown-field", f"unknown field {key!r} in metadata{hint}"
            )
    if meta.get("name") in (None, ""):
        ctx.error("metadata.name", "required", "required field 'name' is missing")
    else:
        _check_name(ctx, "metadata.name", meta["name"], name_rule)
    if meta.get("namespace") not in (None, ""):
        _check_name(ctx, "metadata.namespace", meta["namespace"], _LABEL)
    if meta.get("labels") is not None:
        check(ctx, LABELS, meta["labels"], "metadata.labels")
    if meta.get("annotations") is not None:
        check(ctx, ANNOTATIONS, meta["annotations"], "metadata.annotations")


# Core kinds: only the built-in checks the edge depends on. Their schemas are
# open (unknown fields are not reported): the edge reads a small part of them.

_IANA_SVC_NAME = r"^[-a-z0-9]+$"
_PROTOCOL = Str(enum=("TCP", "UDP", "SCTP"))


def _target_port_rule(ctx: Ctx, port: Any, path: str) -> None:
    target = d(port).get("targetPort")
    where = join(path, "targetPort")
    number = as_int(target)
    if target is None:
        return
    if number is not None:
        if not 1 <= number <= 65535:
            ctx.error(
                where, "minimum" if number < 1 else "maximum", f"must be 1..65535, got {number}"
            )
    elif isinstance(target, str):
        ok = (
            len(target) <= 15
            and matches(_IANA_SVC_NAME, target)
            and any(c.isalpha() for c in target)
            and "--" not in target
            and not target.startswith("-")
            and not target.endswith("-")
        )
        if not ok:
            ctx.error(
                where,
                "invalid-name",
                "must be a port number or an IANA service name (at most 15 lowercase "
                f"letters, digits, '-'), got {target!r}",
            )
    else:
        ctx.error(where, "type", f"expected integer or string, got {target!r}")


SERVICE_PORT = Obj(
    {
        "name": opt(
            Str(
                max_len=63,
                pattern=DNS_LABEL_RE,
                expect="must be a lowercase RFC 1123 label",
                code="invalid-name",
            )
        ),
        "protocol": opt(_PROTOCOL),
        "port": req(Int(minimum=1, maximum=65535)),
        "nodePort": opt(Int(minimum=0, maximum=65535)),
        "appProtocol": opt(Str()),
    },
    open=True,
    rules=(_target_port_rule,),
)


def _service_rule(ctx: Ctx, spec: Any, path: str) -> None:
    obj = d(spec)
    ports = [d(p) for p in lst(obj.get("ports"))]
    headless = obj.get("clusterIP") == "None"
    if not ports and obj.get("type") != "ExternalName" and not headless:
        ctx.error(
            join(path, "ports"),
            "required",
            "a Service needs at least one port (unless headless or ExternalName)",
        )
    names: dict[str, int] = {}
    pairs: dict[str, int] = {}
    for i, port in enumerate(ports):
        here = f"{path}.ports[{i}]"
        name = port.get("name")
        if len(ports) > 1 and not name:
            ctx.error(
                join(here, "name"),
                "required",
                "each port needs a name when a Service has more than one",
            )
        elif isinstance(name, str) and name:
            if name in names:
                ctx.error(
                    join(here, "name"),
                    "unique",
                    f"port name {name!r} is already used by {path}.ports[{names[name]}]",
                )
            names.setdefault(name, i)
        number, protocol = port.get("port"), port.get("protocol", "TCP")
        pair = identity([number, protocol])
        if pair in pairs:
            ctx.error(
                here,
                "unique",
                f"port {number}/{protocol} is already defined at {path}.ports[{pairs[pair]}]",
            )
        pairs.setdefault(pair, i)


SERVICE = Obj(
    {
        "spec": req(
            Obj(
                {
                    "type": opt(
                        Str(enum=("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"))
                    ),
                    "ports": opt(Arr(SERVICE_PORT)),
                },
                open=True,
                rules=(_service_rule,),
            )
        )
    },
    open=True,
)

_CONFIG_KEY = Str(
    max_len=253,
    pattern=r"^[-._a-zA-Z0-9]+$",
    expect="must be a key of letters, digits, '-', '_' or '.'",
)


def _check_secret(ctx: Ctx, data: Any) -> None:
    ctx.secret = True  # key material: errors never quote it
    check(ctx, SECRET, data, "")


def _secret_rule(ctx: Ctx, secret: Any, path: str) -> None:
    obj = d(secret)
    data = d(obj.get("data"))
    for key, value in data.items():
        if isinstance(value, str):
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                ctx.error(
                    join("data", key),
                    "invalid-base64",
                    "data values must be base64-encoded (use stringData for plain text)",
                )
    if obj.get("type") == "kubernetes.io/tls":
        present = set(data) | set(d(obj.get("stringData")))
        for key in ("tls.crt", "tls.key"):
            if key not in present:
                ctx.error(
                    join("data", key),
                    "tls-secret-missing-key",
                    f"a kubernetes.io/tls Secret must have {key} in data or stringData",
                )


SECRET = Obj(
    {
        "type": opt(Str()),
        "data": opt(Map(Str(), keys=_CONFIG_KEY)),
        "stringData": opt(Map(Str(), keys=_CONFIG_KEY)),
    },
    open=True,
    rules=(_secret_rule,),
)
CONFIG_MAP = Obj(
    {
        "data": opt(Map(Str(), keys=_CONFIG_KEY)),
        "binaryData": opt(Map(Str(), keys=_CONFIG_KEY)),
    },
    open=True,
)
ENDPOINT_SLICE = Obj(
    {
        "addressType": req(Str(enum=("IPv4", "IPv6", "FQDN"))),
        "endpoints": opt(
            Arr(
                Obj({"addresses": req(Arr(Str(), min_items=1, max_items=100))}, open=True),
                max_items=1000,
            )
        ),
        "ports": opt(
            Arr(
                Obj({"name": opt(Str()), "protocol": opt(_PROTOCOL), "port": opt(Int())}, open=True)
            )
        ),
    },
    open=True,
)


def _port_names_rule(ctx: Ctx, containers: Any, path: str) -> None:
    """Container port names are unique in a pod: a Service's named targetPort must
    resolve to one port (the API server rejects the pod template otherwise)."""
    seen: dict[str, str] = {}
    for i, container in enumerate(lst(containers)):
        for j, port in enumerate(lst(d(container).get("ports"))):
            name = d(port).get("name")
            here = f"{path}[{i}].ports[{j}].name"
            if isinstance(name, str) and name:
                if name in seen:
                    ctx.error(here, "unique", f"port name {name!r} is already used by {seen[name]}")
                seen.setdefault(name, here)


def _selector_matches(selector: dict[str, Any], labels: dict[str, Any]) -> bool:
    if any(labels.get(k) != v for k, v in d(selector.get("matchLabels")).items()):
        return False
    for expr in (d(e) for e in lst(selector.get("matchExpressions"))):
        key, op, values = str(expr.get("key")), expr.get("operator"), lst(expr.get("values"))
        present = key in labels
        if (
            (op == "In" and labels.get(key) not in values)
            or (op == "NotIn" and present and labels.get(key) in values)
            or (op == "Exists" and not present)
            or (op == "DoesNotExist" and present)
        ):
            return False
    return True


def _workload_rule(ctx: Ctx, spec: Any, path: str) -> None:
    """apps/v1: "selector does not match template labels" is refused on create; the
    endpoints derived for a Service follow the pod template's labels, so a workload
    whose own selector would not own those pods is not read as if it did."""
    obj = d(spec)
    selector = obj.get("selector")
    labels = d(d(d(obj.get("template")).get("metadata")).get("labels"))
    if isinstance(selector, dict) and not _selector_matches(selector, labels):
        ctx.error(
            join(path, "selector"),
            "selector-mismatch",
            "selector does not match template labels (spec.template.metadata.labels)",
        )


CONTAINER_PORT = Obj(
    {
        "name": opt(
            Str(
                max_len=15,
                pattern=_IANA_SVC_NAME,
                expect="must be an IANA service name (lowercase letters, digits, '-')",
                code="invalid-name",
            )
        ),
        "containerPort": req(Int(minimum=1, maximum=65535)),
        "protocol": opt(_PROTOCOL),
    },
    open=True,
)
CONTAINER = Obj({"name": req(Str(min_len=1)), "ports": opt(Arr(CONTAINER_PORT))}, open=True)
POD_TEMPLATE = Obj(
    {
        "metadata": opt(Obj({"labels": opt(LABELS)}, open=True)),
        "spec": req(
            Obj(
                {
                    "containers": req(Arr(CONTAINER, min_items=1, rules=(_port_names_rule,))),
                    "serviceAccountName": opt(Str()),
                },
                open=True,
            )
        ),
    },
    open=True,
)


def _workload(replicas: bool) -> Obj:
    """Deployment, StatefulSet (with replicas) and DaemonSet: only the fields the
    endpoint derivation reads are checked; the rest stay open."""
    fields = {"selector": req(LABEL_SELECTOR), "template": req(POD_TEMPLATE)}
    if replicas:
        fields["replicas"] = opt(Int(minimum=0))
    return Obj({"spec": req(Obj(fields, open=True, rules=(_workload_rule,)))}, open=True)


SCALED_WORKLOAD = _workload(replicas=True)
DAEMON_SET = _workload(replicas=False)

CORE_CHECKS = {
    "Service": lambda ctx, data: check(ctx, SERVICE, data, ""),
    "Deployment": lambda ctx, data: check(ctx, SCALED_WORKLOAD, data, ""),
    "StatefulSet": lambda ctx, data: check(ctx, SCALED_WORKLOAD, data, ""),
    "DaemonSet": lambda ctx, data: check(ctx, DAEMON_SET, data, ""),
    "Secret": lambda ctx, data: _check_secret(ctx, data),
    "ConfigMap": lambda ctx, data: check(ctx, CONFIG_MAP, data, ""),
    "EndpointSlice": lambda ctx, data: check(ctx, ENDPOINT_SLICE, data, ""),
}
