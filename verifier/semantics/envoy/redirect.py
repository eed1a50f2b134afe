"""Path rewrites and redirect Locations, as Envoy 1.40 computes them.

Rewrites (``RouteEntryImplBase::currentUrlPathAfterRewriteWithMatchedPath``):
``prefix_rewrite`` replaces the part of ``:path`` the route matched - the configured
prefix or exact path, or for a regex route the whole path without its query - and
keeps the rest (query included); ``regex_rewrite`` "Replace[s] the entire path, but
preserve[s] the query parameters", with RE2 ``GlobalReplace`` semantics.

Locations (``Http::Utility::newUri`` / ``processRequestHost``, checked on the binary):
the scheme is ``scheme_redirect``, else https when ``https_redirect``, else the
request's; with ``host_redirect`` the Host header's port is dropped; without it the
Host header is kept, port included, except that the port is dropped when
``port_redirect`` is set, or on a scheme change when it is the default port of the
request's scheme (":80" for http, ":443" for https). ``port_redirect`` is always
written out, even 80 or 443. ``path_redirect`` keeps the request's query unless it
has its own; ``strip_query`` drops the query (not one given by ``path_redirect``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from verifier.semantics.envoy.paths import split_target
from verifier.semantics.envoy.strings import global_replace
from verifier.semantics.request import RedirectTarget
from verifier.xds.enums import RedirectActionRedirectResponseCode

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.route.v3 import RedirectAction
    from envoy_data_plane.envoy.type.matcher.v3 import RegexMatchAndSubstitute

Code = RedirectActionRedirectResponseCode

# RedirectAction.response_code: "The HTTP status code to use in the redirect response.
# The default response code is MOVED_PERMANENTLY (301)."
REDIRECT_STATUS: dict[int, int] = {
    Code.MOVED_PERMANENTLY: 301,
    Code.FOUND: 302,
    Code.SEE_OTHER: 303,
    Code.TEMPORARY_REDIRECT: 307,
    Code.PERMANENT_REDIRECT: 308,
}
DEFAULT_PORTS: dict[str, int] = {"http": 80, "https": 443}


def port_start(host: str) -> int:
    """HeaderUtility::getPortStart: the last `:` not inside an IPv6 `[...]`; -1 if none."""
    pos = host.rfind(":")
    if pos == -1:
        return -1
    bracket = host.rfind("]")
    if bracket != -1 and bracket > pos:
        return -1
    return pos


def split_host(host: str) -> tuple[str, int | None]:
    pos = port_start(host)
    if pos == -1:
        return host, None
    port = host[pos + 1 :]
    return host[:pos], int(port) if port.isdigit() else None


def rewrite_path(
    path: str,
    matched: str,
    prefix_rewrite: str | None,
    regex_rewrite: RegexMatchAndSubstitute | None,
) -> str:
    """The new ``:path`` (query kept) after a route's rewrite; ``path`` unchanged if none."""
    if prefix_rewrite:
        return prefix_rewrite + path[len(matched) :]
    if regex_rewrite is not None and regex_rewrite.pattern is not None:
        only, rest = split_target(path)
        return global_replace(regex_rewrite.pattern.regex, regex_rewrite.substitution, only) + rest
    return path


def _request_host(host: str, new_scheme: str, new_port: str, request_scheme: str) -> str:
    """processRequestHost: which part of the Host header survives into Location."""
    pos = port_start(host)
    if not host or pos == -1:
        return host
    port = host[pos:]
    remove = bool(new_port)
    if new_scheme != request_scheme:
        remove |= request_scheme == "https" and port == ":443"
        remove |= request_scheme == "http" and port == ":80"
    return host[:pos] if remove else host


def location(redirect: RedirectAction | None, scheme: str, host: str, path: str) -> str:
    """newUri for a request whose ``:path`` already went through the route's rewrite."""
    if redirect is not None and redirect.scheme_redirect:
        new_scheme = redirect.scheme_redirect
    elif redirect is not None and redirect.https_redirect:
        new_scheme = "https"
    else:
        new_scheme = scheme
    new_port = (
        f":{redirect.port_redirect}" if redirect is not None and redirect.port_redirect else ""
    )
    if redirect is not None and redirect.host_redirect:
        new_host = redirect.host_redirect
    else:
        new_host = _request_host(host, new_scheme, new_port, scheme)
    if redirect is not None and redirect.path_redirect:
        new_path = redirect.path_redirect
        has_query = "?" in new_path
        if not has_query and "?" in path:
            new_path += path[path.index("?") :]
    else:
        new_path = path
        has_query = False
    if not new_path.startswith("/"):
        new_path = "/" + new_path
    if redirect is not None and redirect.strip_query and not has_query:
        new_path = new_path.split("?", 1)[0]
    return f"{new_scheme}://{new_host}{new_port}{new_path}"


def parse_location(url: str) -> RedirectTarget:
    """A Location as a RedirectTarget: the port is the effective one (scheme default)."""
    scheme, _, rest = url.partition("://")
    slash = rest.find("/")
    authority, path = (rest, "/") if slash == -1 else (rest[:slash], rest[slash:])
    host, port = split_host(authority)
    if port is None:
        port = DEFAULT_PORTS.get(scheme.lower())
    return RedirectTarget(scheme.lower(), host.lower(), port, split_target(path)[0])
