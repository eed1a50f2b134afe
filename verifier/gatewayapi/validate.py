"""Reject, before translation, what the Kubernetes API server would reject on create.

The edge is verified offline, from YAML nobody has applied yet, so a route the
API server would refuse must not be translated as if it were live. For the
Gateway API kinds this is the v1.5 experimental-channel CRD (OpenAPI schema
plus CEL ``x-kubernetes-validations``; see ``schema_*.py``); for the core kinds
it is every field name the Kubernetes API defines where the edge reads, and the
built-in checks the edge's input depends on (``schema_kube.py``).

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

from collections.abc import Callable
from typing import Any

from verifier.errors import InputError
from verifier.gatewayapi import schema_kube
from verifier.gatewayapi.load import RawObject
from verifier.gatewayapi.schema_common import DNS_LABEL_RE, DNS_SUBDOMAIN_RE
from verifier.gatewayapi.schema_core import Ctx, Obj, Str, check, join, matches, opt, req
from verifier.gatewayapi.schema_gateway import (
    GATEWAY_SPEC,
    GATEWAYCLASS_SPEC,
    LISTENERSET_SPEC,
    REFERENCEGRANT_SPEC,
)
from verifier.gatewayapi.schema_httproute import HTTPROUTE_SPEC
from verifier.gatewayapi.schema_kube import (
    ANNOTATIONS,
    CONFIG_MAP,
    ENDPOINT_SLICE,
    LABELS,
    METADATA_FIELDS,
    NAMESPACE,
    SERVICE,
    check_secret,
)
from verifier.gatewayapi.schema_workloads import WORKLOADS
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


def _checker(schema: Obj) -> Callable[[Ctx, Any], None]:
    return lambda ctx, data: check(ctx, schema, data, "")


# kind -> its check. ``metadata`` is checked apart (``_check_metadata``).
CORE_CHECKS: dict[str, Callable[[Ctx, Any], None]] = {
    "Service": _checker(SERVICE),
    "Secret": check_secret,
    "ConfigMap": _checker(CONFIG_MAP),
    "Namespace": _checker(NAMESPACE),
    "EndpointSlice": _checker(ENDPOINT_SLICE),
    **{kind: _checker(schema) for kind, schema in WORKLOADS.items()},
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
        ctx.schema, ctx.served = schema_kube.SCHEMA, raw.served
        _check_metadata(ctx, NAME_RULES.get(kind, _SUBDOMAIN))
        CORE_CHECKS[kind](ctx, raw.data)
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
        if key not in METADATA_FIELDS and not ctx.served:
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
