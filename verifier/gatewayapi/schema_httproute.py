"""HTTPRoute (v1 and v1beta1 share one schema) from ``apis/v1/httproute_types.go``.

Gateway API v1.5, experimental channel: named rules, CORS, ExternalAuth,
retry, session persistence and mirror percent/fraction are accepted and
checked. Each CEL rule quotes its CRD message; the RE2 check on
RegularExpression values is ours (Envoy compiles them with RE2), not the
API server's.
"""

from __future__ import annotations

from typing import Any

from verifier.gatewayapi.schema_common import (
    BACKEND_OBJECT_REF,
    BACKEND_REF_FIELDS,
    DURATION,
    HEADER_NAME,
    HOSTNAME,
    PARENT_REFS,
    PATH_CHARS_RE,
    SECTION_NAME,
)
from verifier.gatewayapi.schema_core import (
    Arr,
    Ctx,
    Int,
    Obj,
    Str,
    d,
    has,
    join,
    lst,
    matches,
    opt,
    re2_error,
    req,
)
from verifier.gatewayapi.schema_filters import FILTERS, HEADER_VALUE, HTTP_METHODS

MAX_TOTAL_MATCHES = 128
DEFAULT_PATH = {"type": "PathPrefix", "value": "/"}


def _regex_rule(ctx: Ctx, match: Any, path: str, default_type: str) -> None:
    # Not a CRD rule: RegularExpression is implementation-specific, and this
    # edge is Envoy, which compiles the value as RE2.
    obj = d(match)
    value = obj.get("value")
    if obj.get("type", default_type) == "RegularExpression" and isinstance(value, str):
        problem = re2_error(value)
        if problem is not None:
            ctx.error(join(path, "value"), "invalid-regex", f"not a valid RE2 regex: {problem}")


# HTTPPathMatch CEL, for types Exact and PathPrefix. Each entry quotes the CRD
# message "<msg> when type one of ['Exact', 'PathPrefix']".
_PATH_CHECKS: tuple[tuple[str, Any], ...] = (
    (
        "must start with '/'",
        lambda v: v.startswith("/"),
    ),  # "value must be an absolute path and start with '/'"
    ("must not contain '//'", lambda v: "//" not in v),
    ("must not contain '/./'", lambda v: "/./" not in v),
    ("must not contain '/../'", lambda v: "/../" not in v),
    ("must not contain '%2f'", lambda v: "%2f" not in v),
    ("must not contain '%2F'", lambda v: "%2F" not in v),
    ("must not contain '#'", lambda v: "#" not in v),
    ("must not end with '/..'", lambda v: not v.endswith("/..")),
    ("must not end with '/.'", lambda v: not v.endswith("/.")),
    (
        # "must only contain valid characters (matching ^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]
        # |[%][0-9a-fA-F]{2})+$) for types ['Exact', 'PathPrefix']"
        "must only contain URL path characters (letters, digits, -/._~!$&'()*+,;=:@ "
        "or %XX escapes)",
        lambda v: matches(PATH_CHARS_RE, v),
    ),
)


def _path_match_rule(ctx: Ctx, match: Any, path: str) -> None:
    obj = d(match)
    ptype = obj.get("type", "PathPrefix")
    value = obj.get("value", "/")
    if not isinstance(value, str):
        return
    if ptype in ("Exact", "PathPrefix"):
        for message, ok in _PATH_CHECKS:
            if not ok(value):
                ctx.error(
                    join(path, "value"),
                    "invalid-path",
                    f"{message} when type is {ptype}, got {value!r}",
                )
    _regex_rule(ctx, obj, path, "PathPrefix")


PATH_MATCH = Obj(
    {
        "type": opt(Str(enum=("Exact", "PathPrefix", "RegularExpression"))),
        "value": opt(Str(max_len=1024)),
    },
    rules=(_path_match_rule,),
)

# The experimental channel also requires printable US-ASCII header values.
HEADER_MATCH = Obj(
    {
        "type": opt(Str(enum=("Exact", "RegularExpression"))),
        "name": req(HEADER_NAME),
        "value": req(HEADER_VALUE),
    },
    rules=(lambda ctx, m, p: _regex_rule(ctx, m, p, "Exact"),),
)
QUERY_MATCH = Obj(
    {
        "type": opt(Str(enum=("Exact", "RegularExpression"))),
        "name": req(HEADER_NAME),
        "value": req(Str(min_len=1, max_len=1024)),
    },
    rules=(lambda ctx, m, p: _regex_rule(ctx, m, p, "Exact"),),
)
ROUTE_MATCH = Obj(
    {
        "path": opt(PATH_MATCH),
        "headers": opt(Arr(HEADER_MATCH, max_items=16, list_type="map", map_key="name")),
        "queryParams": opt(Arr(QUERY_MATCH, max_items=16, list_type="map", map_key="name")),
        "method": opt(Str(enum=HTTP_METHODS)),
    }
)


BACKEND_REF = Obj({**BACKEND_REF_FIELDS, "filters": opt(FILTERS)}, rules=BACKEND_OBJECT_REF.rules)


def _duration_ms(text: Any) -> int | None:
    """A GEP-2257 duration in milliseconds (the CRD pattern already checked)."""
    if not isinstance(text, str) or not matches(DURATION.pattern or "", text):
        return None
    total, number = 0, ""
    units = {"h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}
    i = 0
    while i < len(text):
        if text[i].isdigit():
            number += text[i]
            i += 1
            continue
        unit = "ms" if text.startswith("ms", i) else text[i]
        total += int(number) * units[unit]
        number = ""
        i += len(unit)
    return total


def _timeouts_rule(ctx: Ctx, timeouts: Any, path: str) -> None:
    # CRD: "backendRequest timeout cannot be longer than request timeout"
    # rule: !(has(self.request) && has(self.backendRequest) &&
    #   duration(self.request) != duration('0s') &&
    #   duration(self.backendRequest) > duration(self.request))
    obj = d(timeouts)
    request = _duration_ms(obj.get("request"))
    backend = _duration_ms(obj.get("backendRequest"))
    if request and backend is not None and backend > request:
        ctx.error(
            join(path, "backendRequest"),
            "backend-timeout-exceeds-request",
            f"backendRequest ({obj['backendRequest']}) must not be longer than request "
            f"({obj['request']})",
        )


def _session_rule(ctx: Ctx, session: Any, path: str) -> None:
    obj = d(session)
    cookie = d(obj.get("cookieConfig"))
    # CRD: "AbsoluteTimeout must be specified when cookie lifetimeType is Permanent"
    if cookie.get("lifetimeType") == "Permanent" and not has(obj, "absoluteTimeout"):
        ctx.error(
            join(path, "absoluteTimeout"),
            "cel",
            "absoluteTimeout is required when cookieConfig.lifetimeType is Permanent",
        )
    # CRD: "cookieConfig can only be set with type Cookie" (type defaults to Cookie)
    if has(obj, "cookieConfig") and obj.get("type", "Cookie") != "Cookie":
        ctx.error(
            join(path, "cookieConfig"),
            "cel",
            f"cookieConfig can only be set with type Cookie, got type {obj.get('type')!r}",
        )


SESSION_PERSISTENCE = Obj(
    {
        "sessionName": opt(Str(max_len=128)),
        "absoluteTimeout": opt(DURATION),
        "idleTimeout": opt(DURATION),
        "type": opt(Str(enum=("Cookie", "Header"))),
        "cookieConfig": opt(Obj({"lifetimeType": opt(Str(enum=("Permanent", "Session")))})),
    },
    rules=(_session_rule,),
)


def _effective_matches(rule: dict[str, Any]) -> list[Any]:
    """rule.matches after API-server defaulting (absent: one PathPrefix "/")."""
    found = rule.get("matches")
    return [{"path": DEFAULT_PATH}] if found is None else lst(found)


def _is_single_prefix_match(rule: dict[str, Any]) -> bool:
    found = _effective_matches(rule)
    if len(found) != 1:
        return False
    path = d(found[0]).get("path", DEFAULT_PATH)
    return bool(d(path).get("type", "PathPrefix") == "PathPrefix")


def _prefix_rewrites(filters: Any, key: str) -> list[int]:
    """Indexes of filters whose ``key`` (requestRedirect/urlRewrite) replaces a prefix."""
    found = []
    for i, flt in enumerate(lst(filters)):
        modifier = d(d(d(flt).get(key)).get("path"))
        if modifier.get("type") == "ReplacePrefixMatch" and has(modifier, "replacePrefixMatch"):
            found.append(i)
    return found


def _rule_rules(ctx: Ctx, rule: Any, path: str) -> None:
    obj = d(rule)
    filters = lst(obj.get("filters"))
    # CRD: "RequestRedirect filter must not be used together with backendRefs"
    if lst(obj.get("backendRefs")):
        for i, flt in enumerate(filters):
            if has(d(flt), "requestRedirect"):
                ctx.error(
                    f"{path}.filters[{i}]",
                    "filter-conflict",
                    "RequestRedirect filter must not be used together with backendRefs",
                )
    if _is_single_prefix_match(obj):
        return
    # CRD: "When using RequestRedirect filter with path.replacePrefixMatch, exactly
    # one PathPrefix match must be specified" (and URLRewrite; and "Within
    # backendRefs, ..." for filters on backendRefs). The CEL uses exists_one.
    for key, kind in (("requestRedirect", "RequestRedirect"), ("urlRewrite", "URLRewrite")):
        hits = _prefix_rewrites(filters, key)
        if len(hits) == 1:
            _rewrite_error(ctx, f"{path}.filters[{hits[0]}].{key}.path.replacePrefixMatch", kind)
        backend_hits = [
            (b, _prefix_rewrites(d(ref).get("filters"), key))
            for b, ref in enumerate(lst(obj.get("backendRefs")))
        ]
        backend_hits = [(b, h) for b, h in backend_hits if len(h) == 1]
        if len(backend_hits) == 1:
            b, h = backend_hits[0]
            _rewrite_error(
                ctx, f"{path}.backendRefs[{b}].filters[{h[0]}].{key}.path.replacePrefixMatch", kind
            )


def _rewrite_error(ctx: Ctx, path: str, kind: str) -> None:
    ctx.error(
        path,
        "rewrite-requires-prefix-match",
        f"{kind} with path.replacePrefixMatch requires the rule to have exactly one match, "
        "with a PathPrefix path",
    )


RULE = Obj(
    {
        "name": opt(SECTION_NAME),
        "matches": opt(Arr(ROUTE_MATCH, max_items=64)),
        "filters": opt(FILTERS),
        "backendRefs": opt(Arr(BACKEND_REF, max_items=16)),
        "timeouts": opt(
            Obj(
                {"request": opt(DURATION), "backendRequest": opt(DURATION)}, rules=(_timeouts_rule,)
            )
        ),
        "retry": opt(
            Obj(
                {
                    "codes": opt(Arr(Int(minimum=400, maximum=599))),
                    "attempts": opt(Int()),
                    "backoff": opt(DURATION),
                }
            )
        ),
        "sessionPersistence": opt(SESSION_PERSISTENCE),
    },
    rules=(_rule_rules,),
)


def _rules_rules(ctx: Ctx, rules: Any, path: str) -> None:
    items = [d(r) for r in lst(rules)]
    # CRD: "Rule name must be unique within the route"
    first: dict[Any, int] = {}
    for i, rule in enumerate(items):
        name = rule.get("name")
        if not isinstance(name, str):
            continue
        if name in first:
            ctx.error(
                f"{path}[{i}].name",
                "unique",
                f"rule name {name!r} is already used by {path}[{first[name]}]",
            )
        else:
            first[name] = i
    # CRD: "While 16 rules and 64 matches per rule are allowed, the total number
    # of matches across all rules in a route must be less than 128"
    total = sum(len(_effective_matches(r)) for r in items)
    if total > MAX_TOTAL_MATCHES:
        ctx.error(
            path,
            "max-items",
            f"all rules together must have at most {MAX_TOTAL_MATCHES} matches, got {total}",
        )


HTTPROUTE_SPEC = Obj(
    {
        "parentRefs": opt(PARENT_REFS),
        "hostnames": opt(Arr(HOSTNAME, max_items=16)),
        "rules": opt(Arr(RULE, min_items=1, max_items=16, rules=(_rules_rules,))),
        # Experimental (GEP-3793, default Gateways); its enum is not checked.
        "useDefaultGateways": opt(Str()),
    }
)
