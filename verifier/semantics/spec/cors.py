"""The CORS filter: preflights answered by the gateway, CORS headers on the rest.

Written from ``apis/v1/httproute_types.go`` (HTTPCORSFilter, Gateway API v1.5,
HTTPRouteCORS) and the Fetch standard's notion of a preflight (an OPTIONS
request carrying ``Origin`` and ``Access-Control-Request-Method``).
Where the spec allows either ``*`` or an echo of the request, the model always
echoes: that is always permitted, with or without credentials.
"""

from __future__ import annotations

from dataclasses import dataclass

from verifier.gatewayapi.model import Cors
from verifier.semantics.request import Request
from verifier.semantics.spec.filters import WELL_KNOWN_PORTS, HeaderOp

ACAO = "access-control-allow-origin"
ACAC = "access-control-allow-credentials"
ACAM = "access-control-allow-methods"
ACAH = "access-control-allow-headers"
ACEH = "access-control-expose-headers"
ACMA = "access-control-max-age"

# HTTPCORSFilter.allowOrigins: "The status code of a successful response to a
# "preflight" request is always an OK status (i.e., 204 or 200). If the request
# `Origin` does not match the configured allowed origins, the gateway returns
# 204/200 response but doesn't set the relevant cross-origin response headers."
PREFLIGHT_STATUS = 200


@dataclass(frozen=True)
class CorsDecision:
    preflight: bool  # answered by the gateway, never forwarded
    ops: tuple[HeaderOp, ...]  # response headers set
    why: str


def is_preflight(request: Request) -> bool:
    return (
        request.method == "OPTIONS"
        and bool(request.header("origin"))
        and bool(request.header("access-control-request-method"))
    )


def _origin(value: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port) of ``<scheme>://<host>(:<port>)``: "if not included,
    port `80` is assumed for `http` scheme origins, and port `443` is assumed for
    `https` origins."""
    scheme, sep, rest = value.strip().partition("://")
    if not sep or not rest or "/" in rest:
        return None
    scheme = scheme.lower()
    bracket = rest.rfind("]")  # IPv6 literal: only a ':' after ']' starts the port
    split = rest.rfind(":")
    if split > bracket:
        host, colon, port_text = rest[:split], ":", rest[split + 1 :]
    else:
        host, colon, port_text = rest, "", ""
    if colon and not port_text.isdigit():
        return None
    port = int(port_text) if colon else WELL_KNOWN_PORTS.get(scheme)
    return scheme, host.lower(), port


def origin_allowed(allowed: tuple[str, ...], origin: str) -> bool:
    """allowOrigins: "The host part of the origin may contain the wildcard
    character `*`. ... `*` is a greedy match to the _left_, including any number
    of DNS labels to the left of its position ... A wildcard by itself matches
    all hosts. An origin value that includes _only_ the `*` character indicates
    requests from all `Origin`s are allowed." Scheme and port must agree."""
    if "*" in allowed:
        return True
    got = _origin(origin)
    if got is None:
        return False
    for entry in allowed:
        want = _origin(entry)
        if want is None or want[0] != got[0] or want[2] != got[2]:
            continue
        pattern, host = want[1], got[1]
        if "*" not in pattern:
            if pattern == host:
                return True
            continue
        left, _, right = pattern.partition("*")
        if host.startswith(left) and host.endswith(right) and len(host) > len(left) + len(right):
            return True
    return False


def cors_decision(cors: Cors, request: Request) -> CorsDecision:
    """What the CORS filter does with ``request``.

    allowOrigins: "if the request `Origin` matches one of the configured allowed
    origins, the gateway sets the response header `Access-Control-Allow-Origin`
    to the same value as the `Origin` header provided by the client."
    allowCredentials: "When set to true, the gateway will include the
    `Access-Control-Allow-Credentials` response header with value true". maxAge:
    "When the `MaxAge` field is unspecified, the gateway sets the response header
    "Access-Control-Max-Age: 5" by default." For `*` in allowMethods /
    allowHeaders with credentials the gateway "must return a single HTTP method
    matching the value of the `Access-Control-Request-Method` request header"
    (resp. the header names of `Access-Control-Request-Headers`); "If the
    `Access-Control-Request-Headers` header is not present in the request, the
    gateway must omit the `Access-Control-Allow-Headers` response header."
    """
    preflight = is_preflight(request)
    origins = request.header("origin")
    if not origins:
        return CorsDecision(False, (), "no Origin: not a CORS request")
    origin = origins[0]
    if not origin_allowed(cors.allow_origins, origin):
        return CorsDecision(preflight, (), f"Origin {origin!r} not allowed: no CORS headers")
    ops: list[HeaderOp] = [("set", ACAO, origin)]
    if cors.allow_credentials:
        ops.append(("set", ACAC, "true"))
    expose = _expose(cors)
    if expose:
        ops.append(("set", ACEH, expose))
    if preflight:
        requested_method = request.header("access-control-request-method")[0]
        if cors.allow_methods:
            methods = (
                requested_method if "*" in cors.allow_methods else ",".join(cors.allow_methods)
            )
            ops.append(("set", ACAM, methods))
        requested_headers = ",".join(request.header("access-control-request-headers"))
        if cors.allow_headers and ("*" not in cors.allow_headers or requested_headers):
            hdrs = requested_headers if "*" in cors.allow_headers else ",".join(cors.allow_headers)
            ops.append(("set", ACAH, hdrs))
        ops.append(("set", ACMA, str(cors.max_age)))
    kind = "preflight answered by the gateway" if preflight else "CORS headers added"
    return CorsDecision(preflight, tuple(ops), f"Origin {origin!r} allowed: {kind}")


def _expose(cors: Cors) -> str:
    """exposeHeaders: "If the configuration contains the wildcard `*` in
    `exposeHeaders` and `allowCredentials` is set to `true`, the gateway cannot
    use the `*`" - then nothing can be listed and the header is omitted."""
    if "*" in cors.expose_headers and cors.allow_credentials:
        return ""
    return ",".join(cors.expose_headers)
