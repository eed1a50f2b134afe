"""Types shared by the Gateway API kinds, from ``apis/v1/shared_types.go`` and
``apis/v1/object_reference_types.go`` (Gateway API v1.5, experimental channel).

Each constant mirrors one Go type and its kubebuilder markers, so a limit is
changed in one place when the CRDs change.
"""

from __future__ import annotations

from typing import Any

from verifier.gatewayapi.schema_core import (
    Arr,
    Ctx,
    Int,
    Map,
    Obj,
    Str,
    d,
    has,
    identity,
    join,
    lst,
    opt,
    req,
)

GATEWAY_GROUP = "gateway.networking.k8s.io"

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN_RE = rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$"
DNS_LABEL_RE = rf"^{_DNS_LABEL}$"
HOSTNAME_RE = rf"^(\*\.)?{_DNS_LABEL}(\.{_DNS_LABEL})*$"
QUALIFIED_NAME_RE = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$"
)
LABEL_VALUE_RE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
# Path characters allowed in Exact/PathPrefix matches and external-auth paths.
PATH_CHARS_RE = r"^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|[%][0-9a-fA-F]{2})+$"

# Hostname: RFC 1123 with an optional leading "*." label, no IPs.
HOSTNAME = Str(
    min_len=1,
    max_len=253,
    pattern=HOSTNAME_RE,
    expect="must be a lowercase RFC 1123 hostname, optionally starting with '*.'",
)
PRECISE_HOSTNAME = Str(
    min_len=1,
    max_len=253,
    pattern=DNS_SUBDOMAIN_RE,
    expect="must be a lowercase RFC 1123 hostname without wildcard",
)
GROUP = Str(
    max_len=253,
    pattern=rf"^$|{DNS_SUBDOMAIN_RE}",
    expect="must be empty (core API group) or an RFC 1123 subdomain",
)
KIND = Str(
    min_len=1,
    max_len=63,
    pattern=r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$",
    expect="must be a Kind: a letter, then letters, digits or '-'",
)
OBJECT_NAME = Str(min_len=1, max_len=253)
NAMESPACE = Str(
    min_len=1,
    max_len=63,
    pattern=DNS_LABEL_RE,
    expect="must be an RFC 1123 label (lowercase letters, digits, '-')",
)
SECTION_NAME = Str(
    min_len=1,
    max_len=253,
    pattern=DNS_SUBDOMAIN_RE,
    expect="must be an RFC 1123 subdomain (lowercase letters, digits, '-', '.')",
)
PORT = Int(minimum=1, maximum=65535)
HEADER_NAME = Str(
    min_len=1,
    max_len=256,
    pattern=r"^[A-Za-z0-9!#$%&'*+\-.^_\x60|~]+$",
    expect="must be an HTTP header name (RFC 7230 token characters, no ':' or spaces)",
    code="invalid-header-name",
)
DURATION = Str(
    pattern=r"^([0-9]{1,5}(h|m|s|ms)){1,4}$",
    expect="must be a Gateway API duration (GEP-2257) such as '10s', '1h30m' or '500ms'",
)
CONTROLLER_NAME = Str(
    min_len=1,
    max_len=253,
    pattern=rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*\/[A-Za-z0-9\/\-._~%!$&'()*+,;=:]+$",
    expect="must be a domain-prefixed path such as 'example.net/gateway-controller'",
)
ANNOTATION_KEY = Str(
    min_len=1,
    max_len=253,
    pattern=QUALIFIED_NAME_RE,
    expect="must be a qualified name: an optional DNS subdomain prefix and '/', then a name",
)
ANNOTATION_VALUE = Str(min_len=0, max_len=4096)
LABEL_KEY = ANNOTATION_KEY
LABEL_VALUE = Str(
    min_len=0,
    max_len=63,
    pattern=LABEL_VALUE_RE,
    expect="must be a label value: alphanumerics, '-', '_' or '.', starting and ending "
    "with an alphanumeric",
)
CORS_ORIGIN = Str(
    min_len=1,
    max_len=253,
    pattern=r"(^\*$)|(^([a-zA-Z][a-zA-Z0-9+\-.]+):\/\/([^:/?#]+)(:([0-9]{1,5}))?$)",
    expect="must be '*' or an origin of the form scheme://host[:port]",
)


def _backend_port_rule(ctx: Ctx, ref: Any, path: str) -> None:
    # CRD: "Must have port for Service reference"
    # rule: (size(self.group) == 0 && self.kind == 'Service') ? has(self.port) : true
    # group defaults to "" and kind to "Service".
    obj = d(ref)
    group = obj.get("group", "")
    kind = obj.get("kind", "Service")
    if group in ("", None) and kind in ("Service", None) and not has(obj, "port"):
        ctx.error(
            join(path, "port"),
            "backend-port-required",
            "port is required when the backend is a Service (core group, kind Service)",
        )


def _ref_fields() -> dict[str, Any]:
    return {
        "group": opt(GROUP),
        "kind": opt(KIND),
        "name": req(OBJECT_NAME),
        "namespace": opt(NAMESPACE),
        "port": opt(PORT),
    }


# BackendObjectReference: group defaults to "" and kind to "Service".
BACKEND_OBJECT_REF = Obj(_ref_fields(), rules=(_backend_port_rule,))
# BackendRef adds the weight.
BACKEND_REF_FIELDS = {**_ref_fields(), "weight": opt(Int(minimum=0, maximum=1000000))}

LOCAL_OBJECT_REF = Obj({"group": req(GROUP), "kind": req(KIND), "name": req(OBJECT_NAME)})
SECRET_OBJECT_REF = Obj(
    {
        "group": opt(GROUP),
        "kind": opt(KIND),
        "name": req(OBJECT_NAME),
        "namespace": opt(NAMESPACE),
    }
)
OBJECT_REF = Obj(
    {
        "group": req(GROUP),
        "kind": req(KIND),
        "name": req(OBJECT_NAME),
        "namespace": opt(NAMESPACE),
    }
)

LABEL_SELECTOR = Obj(
    {
        "matchLabels": opt(Map(Str())),
        "matchExpressions": opt(
            Arr(
                Obj(
                    {
                        "key": req(Str()),
                        "operator": req(Str()),
                        "values": opt(Arr(Str())),
                    }
                )
            )
        ),
    }
)

FRACTION_DEFAULT_DENOMINATOR = 100


def _fraction_rule(ctx: Ctx, fraction: Any, path: str) -> None:
    # CRD: "numerator must be less than or equal to denominator"
    # rule: self.numerator <= self.denominator (denominator defaults to 100)
    obj = d(fraction)
    numerator = obj.get("numerator")
    denominator = obj.get("denominator", FRACTION_DEFAULT_DENOMINATOR)
    if isinstance(numerator, int) and isinstance(denominator, int) and numerator > denominator:
        ctx.error(
            join(path, "numerator"),
            "invalid-fraction",
            f"numerator must be <= denominator ({denominator}), got {numerator}",
        )


FRACTION = Obj(
    {"numerator": req(Int(minimum=0)), "denominator": opt(Int(minimum=1))},
    rules=(_fraction_rule,),
)


def _parent_key(ref: dict[str, Any]) -> tuple[str, str, str, str]:
    # CEL compares defaulted values: group "gateway.networking.k8s.io",
    # kind "Gateway"; an absent namespace equals an empty one. Each as its
    # identity(): the rule runs after the type errors are reported, on whatever
    # the fields hold (a list is no dict key).
    return (
        identity(ref.get("group", GATEWAY_GROUP)),
        identity(ref.get("kind", "Gateway")),
        identity(ref.get("name")),
        identity(ref.get("namespace") or ""),
    )


def _set(value: Any) -> bool:
    return value not in (None, "", 0)


def parent_refs_rule(ctx: Ctx, refs: Any, path: str) -> None:
    """The experimental-channel distinctness rules of CommonRouteSpec.parentRefs."""
    items = [(i, d(r)) for i, r in enumerate(lst(refs)) if isinstance(r, dict)]
    # Only references to the same parent are compared: bucketed by parent, the rule
    # costs the same on 10,000 parentRefs (past maxItems, reported anyway) as on 32.
    earlier: dict[tuple[str, str, str, str], list[tuple[int, dict[str, Any]]]] = {}
    for i, p1 in items:
        same = earlier.setdefault(_parent_key(p1), [])
        for j, p2 in same:
            # CRD: "sectionName or port must be specified when parentRefs includes
            # 2 or more references to the same parent"
            if _set(p1.get("sectionName")) != _set(p2.get("sectionName")) or _set(
                p1.get("port")
            ) != _set(p2.get("port")):
                ctx.error(
                    f"{path}[{i}]",
                    "parent-ref-section-required",
                    f"refers to the same parent as {path}[{j}]: both must set sectionName "
                    "(and port) the same way when a route references one parent twice",
                )
            # CRD: "sectionName or port must be unique when parentRefs includes
            # 2 or more references to the same parent"
            elif (p1.get("sectionName") or "") == (p2.get("sectionName") or "") and (
                p1.get("port") or 0
            ) == (p2.get("port") or 0):
                ctx.error(
                    f"{path}[{i}]",
                    "unique",
                    f"duplicates {path}[{j}]: references to the same parent must differ in "
                    "sectionName or port",
                )
        same.append((i, p1))


PARENT_REF = Obj(
    {
        "group": opt(GROUP),
        "kind": opt(KIND),
        "namespace": opt(NAMESPACE),
        "name": req(OBJECT_NAME),
        "sectionName": opt(SECTION_NAME),
        "port": opt(PORT),
    }
)
PARENT_REFS = Arr(PARENT_REF, max_items=32, rules=(parent_refs_rule,))
