"""Literal prefixes of RE2 regexes: what a whole-path regex match can start with.

Used by the match algebra (``verifier.mutate.algebra``) to bound the paths a ``safe_regex``
route accepts, so that regex routes can be proven disjoint from, or shadowed by, others.
"""

from __future__ import annotations

from typing import Final

_META: Final = frozenset("\\.^$|?*+()[]{}")
_MAX_PREFIXES: Final = 16


def _top_level_alternation(regex: str) -> bool:
    depth, k, in_class = 0, 0, False
    while k < len(regex):
        c = regex[k]
        if c == "\\":
            k += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if regex[k + 1 : k + 2] == "]":  # "[]...]": the first ] is literal
                k += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            return True
        k += 1
    return False


def _literal(regex: str, k: int) -> tuple[str, int] | None:
    """The literal character at ``k`` (plain, or an escaped punctuation mark) and its end."""
    c = regex[k]
    if c == "\\":
        nxt = regex[k + 1 : k + 2]
        return (nxt, k + 2) if nxt and not nxt.isalnum() and nxt.isascii() else None
    return None if c in _META else (c, k + 1)


def _literal_group(regex: str, k: int) -> tuple[list[str], int] | None:
    """A group of purely literal alternatives at ``k``: ``(a|bc)`` or ``(?:a|bc)``."""
    if regex.startswith("(?:", k):
        k += 3
    elif regex.startswith("(?", k):
        return None  # flags or a named group
    else:
        k += 1
    options: list[str] = []
    current = ""
    while k < len(regex):
        if regex[k] == "|":
            options.append(current)
            current, k = "", k + 1
        elif regex[k] == ")":
            return [*options, current], k + 1
        else:
            lit = _literal(regex, k)
            if lit is None:
                return None
            current, k = current + lit[0], lit[1]
    return None


def regex_prefixes(regex: str) -> tuple[str, ...] | None:
    """Literal prefixes, one of which starts every string the regex fully matches.

    Envoy matches a route's ``safe_regex`` against the whole path (RE2 full match), so a
    regex made of literals, then anything, can only match strings starting with those
    literals. Reads plain and escaped literal characters and groups of literal
    alternatives; stops at the first other construct, or before a literal that a quantifier
    makes optional. None when the regex has a top-level ``|`` or flags.
    """
    if (regex.startswith("(?") and not regex.startswith("(?:")) or _top_level_alternation(regex):
        return None
    k = 1 if regex.startswith("^") else 0
    prefixes = [""]
    while k < len(regex):
        if regex[k] == "(":
            group = _literal_group(regex, k)
            if group is None or regex[group[1] : group[1] + 1] in ("?", "*", "{"):
                break
            options, k = group
            prefixes = [p + o for p in prefixes for o in options]
            if len(prefixes) > _MAX_PREFIXES:
                return None
            continue
        lit = _literal(regex, k)
        if lit is None or regex[lit[1] : lit[1] + 1] in ("?", "*", "{"):
            break
        prefixes = [p + lit[0] for p in prefixes]
        k = lit[1]
    return tuple(sorted(set(prefixes)))


def regex_literal(regex: str) -> str | None:
    """The one string a regex fully matches when it is nothing but literals, anchors
    aside (``^/\\.well-known$`` -> ``/.well-known``): how another implementation may
    write an exact match. None for any other regex."""
    k = 1 if regex.startswith("^") else 0
    out: list[str] = []
    while k < len(regex):
        if regex[k] == "$" and k == len(regex) - 1:
            break
        lit = _literal(regex, k)
        if lit is None:
            return None
        out.append(lit[0])
        k = lit[1]
    return "".join(out)


_SEGMENT_TAILS: Final = ("(/.*)?", "(?:/.*)?", "(/.*)?$", "(?:/.*)?$")


def _head_literal(head: str) -> str | None:
    """``regex_literal`` of the part before a tail: its own trailing ``$`` would be an
    end anchor in the middle of the regex (``$.*`` matches only the empty string), so
    a head that ends in an unescaped ``$`` is not read."""
    if head.endswith("$"):
        slashes = len(head) - 1 - len(head[:-1].rstrip("\\"))
        if slashes % 2 == 0:
            return None
    return regex_literal(head)


def regex_segment_prefix(regex: str) -> str | None:
    """``P`` for a regex that fully matches exactly ``P`` and ``P/...`` (``^/foo(/.*)?$``):
    PathPrefix as implementations wrote it before ``path_separated_prefix``."""
    for tail in _SEGMENT_TAILS:
        if regex.endswith(tail):
            head = _head_literal(regex[: -len(tail)])
            if head and head.startswith("/") and not head.endswith("/"):
                return head
    return None


def regex_any_after(regex: str) -> str | None:
    """``P`` for a regex that fully matches exactly the strings starting with ``P``
    (``/.*``, ``^/api.*$``): a prefix match written as a regex. ``.`` does not match
    a newline, which no path or header value holds (Envoy's codecs refuse them)."""
    for tail in (".*", ".*$"):
        if regex.endswith(tail):  # /a\.* (any dots) leaves /a\ , no literal: not read
            head = _head_literal(regex[: -len(tail)])
            if head is not None:
                return head
    return None
