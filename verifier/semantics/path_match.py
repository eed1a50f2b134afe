"""How a path predicate accepts a path, stated once for the spec model and the
decision lists (``verifier.semantics.decisions``): the spec model's reading of an
HTTPRouteMatch's path (``spec.match.path_matches``), its index's filing by first
segment (``spec.index``) and the lists' first-match (``decisions.Index``) are the
same code, so the normal form cannot drift from the model it states. Neutral: it
imports neither model.

The kinds: ``exact`` (equals ``value``), ``segment_prefix`` (equals ``value`` or
starts with ``value + "/"``), ``prefix`` (starts with ``value``, character by
character), ``regex`` (RE2 full match of ``value``; never an answer from a pattern
RE2 rejects).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2


@lru_cache(maxsize=4096)
def program(pattern: str) -> Any | None:
    """The RE2 program for ``pattern``, or None when RE2 rejects it."""
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error:
        return None


def full_match(pattern: str, text: str) -> bool:
    found = program(pattern)
    return found is not None and found.fullmatch(text) is not None


def path_accepts(kind: str, value: str, path: str) -> bool:
    """Whether a path predicate of ``kind`` and ``value`` accepts ``path`` (no query)."""
    if kind == "exact":
        return path == value
    if kind == "segment_prefix":
        return path == value or path.startswith(value + "/")
    if kind == "prefix":
        return path.startswith(value)
    return kind == "regex" and full_match(value, path)


def first_segment(path: str) -> str:
    """A path's first segment (``/a/b``: ``a``); a value without a leading ``/`` is its
    own key (any total function of the path does for exact values)."""
    return path.split("/", 2)[1] if path.startswith("/") else path


# A regex every full match of which starts with "/<segment>/": an optional "^", a "/",
# literal characters that are not regex syntax, a "/" that no quantifier makes
# optional, and no alternation anywhere in the pattern (which could start a second,
# unconstrained branch).
_REGEX_SEGMENT = re2.compile(r"(?s)\^?/([A-Za-z0-9_~%-]*)/(?:[^?*+{].*)?")


def regex_segment(pattern: str) -> str | None:
    """The first segment every full match of ``pattern`` has, when its syntax says so
    without interpretation; else None."""
    if "|" in pattern:
        return None
    found = _REGEX_SEGMENT.fullmatch(pattern)
    return None if found is None else str(found.group(1))
