"""Gateway, GatewayClass and ReferenceGrant schemas (Gateway API v1.5).

From ``apis/v1/gateway_types.go``, ``gatewayclass_types.go`` and
``referencegrant_types.go``; v1beta1 serves the same schema as v1. Each CEL
rule quotes its CRD message.
"""

from __future__ import annotations

import re
from typing import Any

from verifier.gatewayapi.schema_common import (
    ANNOTATION_KEY,
    ANNOTATION_VALUE,
    CONTROLLER_NAME,
    GROUP,
    HOSTNAME,
    HOSTNAME_RE,
    KIND,
    LABEL_SELECTOR,
    LABEL_VALUE,
    NAMESPACE,
    OBJECT_NAME,
    OBJECT_REF,
    PORT,
    SECRET_OBJECT_REF,
    SECTION_NAME,
)
from verifier.gatewayapi.schema_core import (
    Arr,
    Ctx,
    Map,
    Obj,
    Str,
    d,
    has,
    identity,
    join,
    lst,
    matches,
    opt,
    req,
)

# ProtocolType: a core protocol name or a domain-prefixed custom one.
PROTOCOL = Str(
    min_len=1,
    max_len=255,
    pattern=r"^[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?$|[a-z0-9]([-a-z0-9]*[a-z0-9])?"
    r"(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[A-Za-z0-9]+$",
    expect="must be a protocol such as HTTP, HTTPS, TLS, TCP, UDP or a domain-prefixed "
    "one like example.com/proto",
)
ADDRESS_TYPE = Str(
    min_len=1,
    max_len=253,
    pattern=r"^Hostname|IPAddress|NamedAddress|[a-z0-9]([-a-z0-9]*[a-z0-9])?"
    r"(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[A-Za-z0-9\/\-._~%!$&'()*+,;=:]+$",
    expect="must be IPAddress, Hostname, NamedAddress or a domain-prefixed type",
)


def _tls_config_rule(ctx: Ctx, tls: Any, path: str) -> None:
    # CRD: "certificateRefs or options must be specified when mode is Terminate"
    # rule: self.mode == 'Terminate' ? size(self.certificateRefs) > 0 ||
    #   size(self.options) > 0 : true      (mode defaults to Terminate)
    obj = d(tls)
    if obj.get("mode", "Terminate") == "Terminate" and not (
        lst(obj.get("certificateRefs")) or d(obj.get("options"))
    ):
        ctx.error(
            join(path, "certificateRefs"),
            "tls-certificate-required",
            "certificateRefs (or options) must be set when tls mode is Terminate",
        )


LISTENER_TLS = Obj(
    {
        "mode": opt(Str(enum=("Terminate", "Passthrough"))),
        "certificateRefs": opt(Arr(SECRET_OBJECT_REF, max_items=64)),
        "options": opt(Map(ANNOTATION_VALUE, keys=ANNOTATION_KEY, max_props=16)),
    },
    rules=(_tls_config_rule,),
)
ALLOWED_ROUTES = Obj(
    {
        "namespaces": opt(
            Obj(
                {
                    "from": opt(Str(enum=("All", "Selector", "Same"))),
                    "selector": opt(LABEL_SELECTOR),
                }
            )
        ),
        "kinds": opt(Arr(Obj({"group": opt(GROUP), "kind": req(KIND)}), max_items=8)),
    }
)
LISTENER = Obj(
    {
        "name": req(SECTION_NAME),
        "hostname": opt(HOSTNAME),
        "port": req(PORT),
        "protocol": req(PROTOCOL),
        "tls": opt(LISTENER_TLS),
        "allowedRoutes": opt(ALLOWED_ROUTES),
    }
)


def _is(protocol: Any, pattern: str) -> bool:
    # The CRD matches protocols case-insensitively: l.protocol.matches('(?i)^...$')
    return isinstance(protocol, str) and re.fullmatch(pattern, protocol, re.IGNORECASE) is not None


def _listeners_rule(ctx: Ctx, listeners: Any, path: str) -> None:
    items = [(i, d(x)) for i, x in enumerate(lst(listeners)) if isinstance(x, dict)]
    for i, lis in items:
        here = f"{path}[{i}]"
        protocol = lis.get("protocol")
        tls = d(lis.get("tls"))
        if _is(protocol, "HTTP|TCP|UDP") and has(lis, "tls"):
            # CRD: "tls must not be specified for protocols ['HTTP', 'TCP', 'UDP']"
            ctx.error(
                f"{here}.tls", "tls-not-allowed", f"tls must not be set for protocol {protocol}"
            )
        if (
            _is(protocol, "HTTPS")
            and has(lis, "tls")
            and tls.get("mode", "Terminate") not in ("", "Terminate")
        ):
            # CRD: "tls mode must be Terminate for protocol HTTPS"
            ctx.error(
                f"{here}.tls.mode",
                "tls-mode",
                f"tls mode must be Terminate for protocol HTTPS, got {tls.get('mode')!r}",
            )
        if _is(protocol, "TLS") and not (has(lis, "tls") and tls.get("mode", "Terminate") != ""):
            # CRD: "tls mode must be set for protocol TLS"
            ctx.error(
                f"{here}.tls", "tls-required", "tls (with a mode) must be set for protocol TLS"
            )
        if _is(protocol, "TCP|UDP") and lis.get("hostname") not in (None, ""):
            # CRD: "hostname must not be specified for protocols ['TCP', 'UDP']"
            ctx.error(
                f"{here}.hostname",
                "hostname-not-allowed",
                f"hostname must not be set for protocol {protocol}",
            )
    # CRD: "Listener name must be unique within the Gateway" is also enforced by
    # the list type (map keyed by name), reported by the walker.
    # CRD: "Combination of port, protocol and hostname must be unique for each listener"
    seen: dict[str, int] = {}
    for i, lis in items:
        key = identity([lis.get("port"), lis.get("protocol"), lis.get("hostname")])
        if key in seen:
            ctx.error(
                f"{path}[{i}]",
                "unique",
                f"port, protocol and hostname are the same as {path}[{seen[key]}]",
            )
        else:
            seen[key] = i


def _address_rule(ctx: Ctx, address: Any, path: str) -> None:
    # CRD: "Hostname value must be empty or contain only valid characters (matching
    # ^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$)"
    obj = d(address)
    value = obj.get("value")
    if obj.get("type") == "Hostname" and isinstance(value, str) and not matches(HOSTNAME_RE, value):
        ctx.error(
            join(path, "value"),
            "pattern",
            f"a Hostname address must be a lowercase RFC 1123 hostname, got {value!r}",
        )


def _addresses_rule(ctx: Ctx, addresses: Any, path: str) -> None:
    # CRD: "IPAddress values must be unique" / "Hostname values must be unique"
    # (type defaults to IPAddress)
    seen: dict[str, int] = {}
    for i, address in enumerate(lst(addresses)):
        obj = d(address)
        kind = obj.get("type", "IPAddress")
        if kind not in ("IPAddress", "Hostname") or not has(obj, "value"):
            continue
        key = identity([kind, obj["value"]])
        if key in seen:
            ctx.error(
                f"{path}[{i}].value",
                "unique",
                f"{kind} values must be unique: {obj['value']!r} is already at {path}[{seen[key]}]",
            )
        else:
            seen[key] = i


def _key_rules(what: str) -> Any:
    def rule(ctx: Ctx, mapping: Any, path: str) -> None:
        for key in d(mapping):
            # CRD: "<What> keys must be in the form of an optional DNS subdomain
            # prefix followed by a required name segment of up to 63 characters."
            # CRD: "If specified, the <what> key's prefix must be a DNS subdomain not
            # longer than 253 characters in total."
            if not matches(QUALIFIED_NAME, key) or len(key.split("/")[0]) >= 253:
                ctx.error(
                    join(path, key),
                    f"invalid-{what}-key",
                    f"{what} keys must be an optional DNS subdomain prefix and '/', then a "
                    "name of up to 63 characters",
                )

    return rule


QUALIFIED_NAME = ANNOTATION_KEY.pattern or ""

FRONTEND_VALIDATION = Obj(
    {
        "caCertificateRefs": req(Arr(OBJECT_REF, min_items=1, max_items=8)),
        "mode": opt(Str(enum=("AllowValidOnly", "AllowInsecureFallback"))),
    }
)
TLS_CONFIG = Obj({"validation": opt(FRONTEND_VALIDATION)})


GATEWAY_TLS = Obj(
    {
        "backend": opt(Obj({"clientCertificateRef": opt(SECRET_OBJECT_REF)})),
        "frontend": opt(
            Obj(
                {
                    "default": req(TLS_CONFIG),
                    # CRD: "Port for TLS configuration must be unique within the
                    # Gateway" is the list-map key check, done by the walker.
                    "perPort": opt(
                        Arr(
                            Obj({"port": req(PORT), "tls": req(TLS_CONFIG)}),
                            max_items=64,
                            list_type="map",
                            map_key="port",
                        )
                    ),
                }
            )
        ),
    }
)
INFRASTRUCTURE = Obj(
    {
        "labels": opt(Map(LABEL_VALUE, max_props=8, rules=(_key_rules("label"),))),
        # MaxProperties is 8 in v1.5 (v1.6 raised it to 16).
        "annotations": opt(Map(ANNOTATION_VALUE, max_props=8, rules=(_key_rules("annotation"),))),
        "parametersRef": opt(
            Obj({"group": req(GROUP), "kind": req(KIND), "name": req(Str(min_len=1, max_len=253))})
        ),
    }
)

# Gateway.spec.listeners and ListenerSet.spec.listeners: 1-64, unique names.
LISTENERS = Arr(
    LISTENER,
    min_items=1,
    max_items=64,
    list_type="map",
    map_key="name",
    rules=(_listeners_rule,),
)

GATEWAY_SPEC = Obj(
    {
        "gatewayClassName": req(OBJECT_NAME),
        "listeners": req(LISTENERS),
        "addresses": opt(
            Arr(
                Obj(
                    {"type": opt(ADDRESS_TYPE), "value": opt(Str(max_len=253))},
                    rules=(_address_rule,),
                ),
                max_items=16,
                rules=(_addresses_rule,),
            )
        ),
        "infrastructure": opt(INFRASTRUCTURE),
        "allowedListeners": opt(
            Obj(
                {
                    "namespaces": opt(
                        Obj(
                            {
                                "from": opt(Str(enum=("All", "Selector", "Same", "None"))),
                                "selector": opt(LABEL_SELECTOR),
                            }
                        )
                    )
                }
            )
        ),
        "tls": opt(GATEWAY_TLS),
        # Experimental (GEP-3793, default Gateways); its enum is not checked.
        "defaultScope": opt(Str()),
    }
)

# ListenerSetSpec (apis/v1/listenerset_types.go): a parent Gateway and 1-64
# ListenerEntries, which are Listeners under the same CEL rules.
LISTENERSET_SPEC = Obj(
    {
        "parentRef": req(
            Obj(
                {
                    "group": opt(GROUP),
                    "kind": opt(KIND),
                    "name": req(OBJECT_NAME),
                    "namespace": opt(NAMESPACE),
                }
            )
        ),
        "listeners": req(LISTENERS),
    }
)

GATEWAYCLASS_SPEC = Obj(
    {
        "controllerName": req(CONTROLLER_NAME),
        "parametersRef": opt(
            Obj(
                {
                    "group": req(GROUP),
                    "kind": req(KIND),
                    "name": req(Str(min_len=1, max_len=253)),
                    "namespace": opt(NAMESPACE),
                }
            )
        ),
        "description": opt(Str(max_len=64)),
    }
)

REFERENCEGRANT_SPEC = Obj(
    {
        "from": req(
            Arr(
                Obj({"group": req(GROUP), "kind": req(KIND), "namespace": req(NAMESPACE)}),
                min_items=1,
                max_items=16,
            )
        ),
        "to": req(
            Arr(
                Obj({"group": req(GROUP), "kind": req(KIND), "name": opt(OBJECT_NAME)}),
                min_items=1,
                max_items=16,
            )
        ),
    }
)
