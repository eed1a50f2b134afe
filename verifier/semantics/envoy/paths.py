"""What Envoy's HTTP connection manager does to ``:path`` before routing.

Order, from ``ConnectionManagerUtility::maybeNormalizePath``: escaped slashes
(``path_with_escaped_slashes_action``) first, then ``normalize_path`` (RFC 3986
normalization through Chromium's URL library), then ``merge_slashes``. The
query string is never touched. The facts below were checked against Envoy 1.40
(``tests/test_envoy_model.py`` repeats the load-bearing ones).
"""

from __future__ import annotations

import re2

# HttpConnectionManager.normalize_path: "Should paths be normalized according to RFC
# 3986 before any processing of requests by HTTP filters or routing?" Envoy delegates
# to Chromium's CanonicalizePath, which (checked on 1.40): turns `\` into `/`, decodes
# escapes of unreserved characters (`%41` -> `A`, `%2e` -> `.`), resolves `.`/`..`
# segments (also when escaped), leaves `%2F` and other escapes as they are, and
# escapes these characters (upper-case hex):
ESCAPED_IN_PATH = frozenset('"<>`{}|^ ')
UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_HEX = frozenset("0123456789abcdefABCDEF")
_DOT_SEGMENTS = {".": ".", "%2e": ".", "..": "..", ".%2e": "..", "%2e.": "..", "%2e%2e": ".."}


def split_target(target: str) -> tuple[str, str]:
    """(path, "?query" or ""); Envoy's removeQueryAndFragment also cuts at `#`."""
    cut = len(target)
    for sep in "?#":
        pos = target.find(sep)
        if pos != -1:
            cut = min(cut, pos)
    return target[:cut], target[cut:]


_DECODED_ALREADY = ESCAPED_IN_PATH | {"%", "\\"}


def _decode_unreserved(path: str) -> str:
    if _DECODED_ALREADY.isdisjoint(path):
        return path  # the common case: nothing to decode or escape
    out: list[str] = []
    i = 0
    while i < len(path):
        ch = path[i]
        if ch == "%" and i + 2 < len(path) and path[i + 1] in _HEX and path[i + 2] in _HEX:
            decoded = chr(int(path[i + 1 : i + 3], 16))
            if decoded in UNRESERVED:
                out.append(decoded)
            else:
                out.append(path[i : i + 3])
            i += 3
            continue
        if ch == "\\":
            out.append("/")
        elif ch in ESCAPED_IN_PATH:
            out.append(f"%{ord(ch):02X}")
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def canonical_path(path: str) -> str:
    """``normalize_path``: the path part only (no query)."""
    segments = _decode_unreserved(path).split("/")[1:]
    out: list[str] = []
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        dots = _DOT_SEGMENTS.get(seg.lower())
        if dots == ".":
            if last:
                out.append("")
        elif dots == "..":
            if out:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(seg)
    return "/" + "/".join(out)


def merge_slashes(path: str) -> str:
    """``merge_slashes``: "Determines if adjacent slashes in the path are merged into one".

    As Envoy 1.40 does it (PathUtil::mergeSlashes): the non-empty segments joined by
    one ``/``, with the leading and trailing ``/`` kept. So a path of slashes only
    stays ``//`` (measured: ``/%2F`` unescaped to ``//`` is redirected to ``//``)."""
    if "//" not in path:
        return path
    prefix = "/" if path.startswith("/") else ""
    suffix = "/" if path.endswith("/") else ""
    return prefix + "/".join(seg for seg in path.split("/") if seg) + suffix


_ESCAPED_SLASH = re2.compile("%2[fF]|%5[cC]")


def unescape_slashes(path: str) -> tuple[str, bool]:
    """``path_with_escaped_slashes_action``: `%2F`/`%5C` (any case) become `/` and `\\`."""
    found = _ESCAPED_SLASH.search(path) is not None
    if not found:
        return path, False
    return path.replace("%2F", "/").replace("%2f", "/").replace("%5C", "\\").replace(
        "%5c", "\\"
    ), True


def strip_path_parameters(path: str) -> str:
    """RouteConfiguration.ignore_path_parameters_in_path_matching: "`/foo;x=1` matches
    `/foo`" - everything from the first `;` of the path is ignored for matching."""
    pos = path.find(";")
    return path if pos == -1 else path[:pos]


def first_query_values(query: str) -> dict[str, str]:
    """Envoy's query parsing for route matching, as Envoy 1.40 does it (checked).

    Split on `&` only, names and values are compared *undecoded* (`a=x%20y` does not
    match `x y`, `+` stays `+`), a name without `=` has the empty value, and only the
    first occurrence of a name counts ("only the first value for a given key").
    """
    out: dict[str, str] = {}
    for part in query.split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        out.setdefault(name, value)
    return out
