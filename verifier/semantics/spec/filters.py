"""HTTPRoute filters as transformations of the request (and the response).

Header modifiers, URL rewrite, request redirect and mirror shares, written
from ``apis/v1/httproute_types.go`` (HTTPHeaderFilter, HTTPPathModifier,
HTTPRequestRedirectFilter, HTTPURLRewriteFilter, HTTPRequestMirrorFilter).
"""

from __future__ import annotations

from dataclasses import dataclass

from verifier.gatewayapi.model import HeaderModifier, Mirror, PathModifier, Redirect, Rewrite
from verifier.semantics.request import Headers, RedirectTarget, Request

# A header operation: ("set" | "add" | "remove", lower-cased name, value).
HeaderOp = tuple[str, str, str]

# HTTPRequestRedirectFilter.port: "If redirect scheme is not-empty, the
# redirect port MUST be the well-known port associated with the redirect
# scheme. Specifically "http" to port 80 and "https" to port 443."
WELL_KNOWN_PORTS = {"http": 80, "https": 443}

PPM = 1_000_000  # mirror shares are in parts per million


def header_ops(hm: HeaderModifier) -> tuple[HeaderOp, ...]:
    """HTTPHeaderFilter: "Set overwrites the request with the given header
    (name, value) before the action." "Add adds the given header(s) (name,
    value) to the request before the action. It appends to any existing values
    associated with the header name." "Remove the given header(s) from the HTTP
    request before the action ... the header names are case-insensitive".
    HTTPHeader.name: "If multiple entries specify equivalent header names, the
    first entry with an equivalent name MUST be considered"."""
    ops: list[HeaderOp] = []
    for action, pairs in (("set", hm.set), ("add", hm.add)):
        seen: set[str] = set()
        for name, value in pairs:
            if name.lower() not in seen:
                seen.add(name.lower())
                ops.append((action, name.lower(), value))
    ops.extend(("remove", name.lower(), "") for name in hm.remove)
    return tuple(ops)


def apply_header_ops(headers: dict[str, list[str]], ops: tuple[HeaderOp, ...]) -> None:
    """Apply ``ops`` in place to lower-cased name -> values."""
    for action, name, value in ops:
        if action == "set":
            headers[name] = [value]
        elif action == "add":
            headers.setdefault(name, []).append(value)
        else:
            headers.pop(name, None)


def to_headers(headers: dict[str, list[str]]) -> Headers:
    return tuple(sorted((k, tuple(v)) for k, v in headers.items() if v))


def modify_path(modifier: PathModifier, path: str, matched_prefix: str | None) -> str | None:
    """The new path (without query), or None when the modifier cannot apply.

    HTTPPathModifier.replacePrefixMatch: "a request to "/foo/bar" with a prefix
    match of "/foo" and a ReplacePrefixMatch of "/xyz" would be modified to
    "/xyz/bar". Note that this matches the behavior of the PathPrefix match
    type. This matches full path elements." The table:

        Request Path | Prefix Match | Replace Prefix | Modified Path
        /foo/bar     | /foo         | /xyz           | /xyz/bar
        /foo/bar     | /foo         | /xyz/          | /xyz/bar
        /foo/bar     | /foo/        | /xyz           | /xyz/bar
        /foo/bar     | /foo/        | /xyz/          | /xyz/bar
        /foo         | /foo         | /xyz           | /xyz
        /foo/        | /foo         | /xyz           | /xyz/
        /foo/bar     | /foo         | <empty string> | /bar
        /foo/        | /foo         | <empty string> | /
        /foo         | /foo         | <empty string> | /
        /foo/        | /foo         | /              | /
        /foo         | /foo         | /              | /

    i.e. both the prefix and the replacement lose a trailing "/", the rest of
    the path (empty or starting with "/") is appended, and an empty result is "/".
    """
    if modifier.type == "ReplaceFullPath":
        return modifier.replace_full_path or "/"
    if modifier.type != "ReplacePrefixMatch" or matched_prefix is None:
        return None
    prefix = matched_prefix.rstrip("/")
    rest = path[len(prefix) :]
    new = (modifier.replace_prefix_match or "").rstrip("/") + rest
    if not new.startswith("/"):
        new = "/" + new
    return new


def redirect_target(
    redirect: Redirect, request: Request, listener_port: int, matched_prefix: str | None
) -> tuple[RedirectTarget, str]:
    """Where the Location points, and how each part was decided.

    scheme: "When empty, the scheme of the request is used." hostname: "When
    empty, the hostname in the `Host` header of the request is used." path:
    "When empty, the request path is used as-is." port: "If no port is
    specified, the redirect port MUST be derived using the following rules: *
    If redirect scheme is not-empty, the redirect port MUST be the well-known
    port associated with the redirect scheme ... If the redirect scheme does
    not have a well-known port, the listener port of the Gateway SHOULD be
    used. * If redirect scheme is empty, the redirect port MUST be the Gateway
    Listener port." The port is the effective one (RedirectTarget.port), whether
    or not Location writes it ("SHOULD NOT add the port number ... HTTP ... _and_
    port 80 ... HTTPS ... _and_ port 443").
    """
    scheme = redirect.scheme or request.scheme
    host = redirect.hostname or request.hostname
    if redirect.port is not None:
        port, port_why = redirect.port, "configured"
    elif redirect.scheme:
        port = WELL_KNOWN_PORTS.get(redirect.scheme, listener_port)
        port_why = f"well-known port of {redirect.scheme}"
    else:
        port, port_why = listener_port, "listener port"
    path = request.path_only
    if redirect.path is not None:
        path = modify_path(redirect.path, path, matched_prefix) or path
    why = f"{scheme}://{host}:{port}{path} (port: {port_why})"
    return RedirectTarget(scheme, host, port, path), why


def rewritten(
    rewrite: Rewrite, request: Request, host: str, matched_prefix: str | None
) -> tuple[str, str]:
    """(Host, path with query) after URLRewrite. HTTPURLRewriteFilter.hostname:
    "the value to be used to replace the Host header value during forwarding";
    path: "Path defines a path rewrite." The query string is kept."""
    new_host = rewrite.hostname or host
    path = request.path_only
    if rewrite.path is not None:
        path = modify_path(rewrite.path, path, matched_prefix) or path
    query = request.query
    return new_host, (f"{path}?{query}" if "?" in request.path else path)


def mirror_share_ppm(mirror: Mirror) -> int:
    """HTTPRequestMirrorFilter.percent: "Its minimum value is 0 (indicating 0% of
    requests) and its maximum value is 100 (indicating 100% of requests) ... If
    neither field is specified, 100% of requests will be mirrored." fraction:
    numerator/denominator (denominator default 100)."""
    if mirror.percent is not None:
        return mirror.percent * PPM // 100
    if mirror.fraction is not None:
        num, den = mirror.fraction
        return num * PPM // den if den > 0 else 0
    return PPM


@dataclass(frozen=True)
class HeaderPlan:
    """Response header operations for ``spec_response_headers``."""

    ops: tuple[HeaderOp, ...] = ()

    def apply(self, upstream: Headers) -> Headers:
        headers = {k: list(v) for k, v in upstream}
        apply_header_ops(headers, self.ops)
        return to_headers(headers)
