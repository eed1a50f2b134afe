"""HTTPRoute filters, from ``apis/v1/httproute_types.go`` (Gateway API v1.5).

Experimental channel: CORS, ExternalAuth and mirror percent/fraction are
accepted and checked. Filters appear both on rules and on backendRefs, with
the same list-level CEL rules; each CEL rule quotes its CRD message.
"""

from __future__ import annotations

from typing import Any

from verifier.gatewayapi.schema_common import (
    BACKEND_OBJECT_REF,
    CORS_ORIGIN,
    FRACTION,
    HEADER_NAME,
    LOCAL_OBJECT_REF,
    PATH_CHARS_RE,
    PORT,
    PRECISE_HOSTNAME,
)
from verifier.gatewayapi.schema_core import (
    Arr,
    Bool,
    Ctx,
    Int,
    Obj,
    Str,
    d,
    has,
    join,
    lst,
    opt,
    req,
)

HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")
FILTER_TYPES = (
    "RequestHeaderModifier",
    "ResponseHeaderModifier",
    "RequestMirror",
    "RequestRedirect",
    "URLRewrite",
    "ExtensionRef",
    "CORS",
    "ExternalAuth",  # experimental channel
)
# Filter type -> the field that carries its configuration.
FILTER_FIELDS = {
    "RequestHeaderModifier": "requestHeaderModifier",
    "ResponseHeaderModifier": "responseHeaderModifier",
    "RequestMirror": "requestMirror",
    "RequestRedirect": "requestRedirect",
    "URLRewrite": "urlRewrite",
    "CORS": "cors",
    "ExternalAuth": "externalAuth",
    "ExtensionRef": "extensionRef",
}
# "... filter cannot be repeated" (CORS joins this list only in v1.6).
UNREPEATABLE = ("RequestHeaderModifier", "ResponseHeaderModifier", "RequestRedirect", "URLRewrite")
# Experimental channel only (standard has just the lengths). Present in the
# current experimental CRDs; whether it already shipped in v1.5.0 is unverified.
HEADER_VALUE = Str(
    min_len=1,
    max_len=4096,
    pattern=r"^[!-~]+([\t ]?[!-~]+)*$",
    expect="must consist of printable US-ASCII characters, optionally separated by single "
    "tabs or spaces",
)
HEADER = Obj({"name": req(HEADER_NAME), "value": req(HEADER_VALUE)})
HEADER_FILTER = Obj(
    {
        "set": opt(Arr(HEADER, max_items=16, list_type="map", map_key="name")),
        "add": opt(Arr(HEADER, max_items=16, list_type="map", map_key="name")),
        "remove": opt(Arr(Str(), max_items=16, list_type="set")),
    }
)


def _path_modifier_rule(ctx: Ctx, modifier: Any, path: str) -> None:
    obj = d(modifier)
    mtype = obj.get("type")
    for kind, key in (
        ("ReplaceFullPath", "replaceFullPath"),
        ("ReplacePrefixMatch", "replacePrefixMatch"),
    ):
        if mtype == kind and not has(obj, key):
            # CRD: "replaceFullPath must be specified when type is set to 'ReplaceFullPath'"
            # CRD: "replacePrefixMatch must be specified when type is set to 'ReplacePrefixMatch'"
            ctx.error(
                join(path, key), "path-modifier-mismatch", f"{key} is required when type is {kind}"
            )
        elif has(obj, key) and mtype != kind and isinstance(mtype, str):
            # CRD: "type must be 'ReplaceFullPath' when replaceFullPath is set"
            # CRD: "type must be 'ReplacePrefixMatch' when replacePrefixMatch is set"
            ctx.error(
                join(path, key),
                "path-modifier-mismatch",
                f"{key} is only allowed when type is {kind}, got type {mtype!r}",
            )


PATH_MODIFIER = Obj(
    {
        "type": req(Str(enum=("ReplaceFullPath", "ReplacePrefixMatch"))),
        "replaceFullPath": opt(Str(max_len=1024)),
        "replacePrefixMatch": opt(Str(max_len=1024)),
    },
    rules=(_path_modifier_rule,),
)
REDIRECT = Obj(
    {
        "scheme": opt(Str(enum=("http", "https"))),
        "hostname": opt(PRECISE_HOSTNAME),
        "path": opt(PATH_MODIFIER),
        "port": opt(PORT),
        "statusCode": opt(Int(enum=(301, 302, 303, 307, 308))),
    }
)
REWRITE = Obj({"hostname": opt(PRECISE_HOSTNAME), "path": opt(PATH_MODIFIER)})


def _mirror_rule(ctx: Ctx, mirror: Any, path: str) -> None:
    # CRD: "Only one of percent or fraction may be specified in HTTPRequestMirrorFilter"
    obj = d(mirror)
    if has(obj, "percent") and has(obj, "fraction"):
        ctx.error(
            join(path, "fraction"),
            "mirror-percent-and-fraction",
            "set either percent or fraction, not both",
        )


MIRROR = Obj(
    {
        "backendRef": req(BACKEND_OBJECT_REF),
        "percent": opt(Int(minimum=0, maximum=100)),
        "fraction": opt(FRACTION),
    },
    rules=(_mirror_rule,),
)


def _no_wildcard_mix(what: str) -> Any:
    def rule(ctx: Ctx, values: Any, path: str) -> None:
        # CRD: "AllowOrigins cannot contain '*' alongside other origins" (and the
        # same for AllowMethods and AllowHeaders): !('*' in self && self.size() > 1)
        items = lst(values)
        if "*" in items and len(items) > 1:
            ctx.error(path, "cors-wildcard", f"'*' must be the only entry of {what}")

    return rule


CORS = Obj(
    {
        "allowOrigins": opt(
            Arr(
                CORS_ORIGIN,
                max_items=64,
                list_type="set",
                rules=(_no_wildcard_mix("allowOrigins"),),
            )
        ),
        "allowCredentials": opt(Bool()),
        "allowMethods": opt(
            Arr(
                Str(enum=(*HTTP_METHODS, "*")),
                max_items=9,
                list_type="set",
                rules=(_no_wildcard_mix("allowMethods"),),
            )
        ),
        "allowHeaders": opt(
            Arr(
                HEADER_NAME,
                max_items=64,
                list_type="set",
                rules=(_no_wildcard_mix("allowHeaders"),),
            )
        ),
        "exposeHeaders": opt(Arr(HEADER_NAME, max_items=64, list_type="set")),
        "maxAge": opt(Int(minimum=1)),
    }
)


def _external_auth_rule(ctx: Ctx, auth: Any, path: str) -> None:
    obj = d(auth)
    protocol = obj.get("protocol")
    for proto, key in (("GRPC", "grpc"), ("HTTP", "http")):
        if protocol == proto and not has(obj, key):
            # CRD: "grpc must be specified when protocol is set to 'GRPC'" (and 'HTTP')
            ctx.error(
                join(path, key),
                "protocol-config-mismatch",
                f"{key} is required when protocol is {proto}",
            )
        elif has(obj, key) and protocol != proto and isinstance(protocol, str):
            # CRD: "protocol must be 'GRPC' when grpc is set" (and 'HTTP')
            ctx.error(
                join(path, key),
                "protocol-config-mismatch",
                f"{key} is only allowed when protocol is {proto}, got {protocol!r}",
            )


_HEADER_LIST = Arr(Str(), max_items=64, list_type="set")
EXTERNAL_AUTH = Obj(
    {
        "protocol": req(Str(enum=("HTTP", "GRPC"))),
        "backendRef": req(BACKEND_OBJECT_REF),
        "grpc": opt(Obj({"allowedHeaders": opt(_HEADER_LIST)})),
        "http": opt(
            Obj(
                {
                    "path": opt(
                        Str(
                            max_len=1024,
                            pattern=PATH_CHARS_RE,
                            expect="must only contain URL path characters",
                        )
                    ),
                    "allowedHeaders": opt(_HEADER_LIST),
                    "allowedResponseHeaders": opt(_HEADER_LIST),
                }
            )
        ),
        "forwardBody": opt(Obj({"maxSize": opt(Int(minimum=0))})),
    },
    rules=(_external_auth_rule,),
)


def _filter_rule(ctx: Ctx, flt: Any, path: str) -> None:
    # CRD: "filter.<field> must be nil if the filter.type is not <Type>" and
    # "filter.<field> must be specified for <Type> filter.type", per type.
    obj = d(flt)
    ftype = obj.get("type")
    if not isinstance(ftype, str):
        return
    for kind, key in FILTER_FIELDS.items():
        if has(obj, key) and ftype != kind:
            ctx.error(
                join(path, key),
                "filter-type-mismatch",
                f"{key} is only allowed when type is {kind}, got type {ftype!r}",
            )
        elif ftype == kind and not has(obj, key):
            ctx.error(
                join(path, key), "filter-type-mismatch", f"{key} is required when type is {kind}"
            )


FILTER = Obj(
    {
        "type": req(Str(enum=FILTER_TYPES)),
        "requestHeaderModifier": opt(HEADER_FILTER),
        "responseHeaderModifier": opt(HEADER_FILTER),
        "requestMirror": opt(MIRROR),
        "requestRedirect": opt(REDIRECT),
        "urlRewrite": opt(REWRITE),
        "cors": opt(CORS),
        "externalAuth": opt(EXTERNAL_AUTH),
        "extensionRef": opt(LOCAL_OBJECT_REF),
    },
    rules=(_filter_rule,),
)


def _filters_rule(ctx: Ctx, filters: Any, path: str) -> None:
    types = [d(f).get("type") for f in lst(filters)]
    # CRD: "May specify either httpRouteFilterRequestRedirect or
    # httpRouteFilterRequestRewrite, but not both"
    if "RequestRedirect" in types and "URLRewrite" in types:
        later = max(types.index("RequestRedirect"), types.index("URLRewrite"))
        ctx.error(
            f"{path}[{later}]",
            "filter-conflict",
            "RequestRedirect and URLRewrite filters cannot be used together",
        )
    # CRD: "<Type> filter cannot be repeated"
    for kind in UNREPEATABLE:
        first = types.index(kind) if kind in types else -1
        for i, t in enumerate(types):
            if t == kind and i != first:
                ctx.error(
                    f"{path}[{i}]",
                    "filter-repeated",
                    f"{kind} filter cannot be repeated (first at {path}[{first}])",
                )


FILTERS = Arr(FILTER, max_items=16, rules=(_filters_rule,))
