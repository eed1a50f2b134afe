"""Envoy's string and regex matchers, compiled once.

Envoy matches with RE2, never with a backtracking engine, and a ``safe_regex``
must match the *whole* input ("The regex match will be applied to the full
string", RegexMatcher docs), so patterns are compiled with ``re2`` and applied
with ``fullmatch``. Replacement follows RE2's ``GlobalReplace``: ``\\N`` in the
substitution is a capture group, every non-overlapping match is replaced.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import betterproto2
import re2
from envoy_data_plane.envoy.type.matcher.v3 import RegexMatcher, StringMatcher

Match = Callable[[str], bool]


class ModelError(ValueError):
    """Configuration Envoy would reject (it NACKs the resource), so no outcome exists."""


@lru_cache(maxsize=4096)
def compile_regex(pattern: str) -> re2._Regexp:
    """One compiled RE2 per distinct pattern; Envoy rejects what RE2 cannot compile."""
    try:
        return re2.compile(pattern)
    except re2.error as exc:
        raise ModelError(f"invalid RE2 regex {pattern!r}: {exc}") from None


def regex_matcher(m: RegexMatcher) -> Match:
    compiled = compile_regex(m.regex)
    return lambda value: compiled.fullmatch(value) is not None


def _ignore_case(fn: Callable[[str, str], bool], expected: str) -> Match:
    low = expected.lower()
    return lambda value: fn(value.lower(), low)


# StringMatcher (type/matcher/v3/string.proto): "ignore_case: If true, indicates the
# exact/prefix/suffix/contains matching should be case insensitive. This has no effect
# for the safe_regex match."
_KINDS: dict[str, Callable[[str, str], bool]] = {
    "exact": lambda value, expected: value == expected,
    "prefix": lambda value, expected: value.startswith(expected),
    "suffix": lambda value, expected: value.endswith(expected),
    "contains": lambda value, expected: expected in value,
}


def string_matcher(m: StringMatcher) -> Match:
    """A StringMatcher as a predicate; ``custom`` extensions are not modelled."""
    kind, value = betterproto2.which_one_of(m, "match_pattern")
    if kind == "safe_regex" and isinstance(value, RegexMatcher):
        return regex_matcher(value)
    if kind in _KINDS and isinstance(value, str):
        fn = _KINDS[kind]
        if m.ignore_case:
            return _ignore_case(fn, value)
        return lambda v: fn(v, value)
    raise ModelError(f"StringMatcher {kind or '<unset>'} is not modelled")


def describe_string_matcher(m: StringMatcher) -> str:
    kind, value = betterproto2.which_one_of(m, "match_pattern")
    if isinstance(value, RegexMatcher):
        value = value.regex
    suffix = " (ignore case)" if m.ignore_case else ""
    return f"{kind} {value!r}{suffix}"


def _re2_template(substitution: str) -> str:
    r"""RE2 substitutions use ``\N`` (N a digit) and ``\\``; Python's re2 uses the same
    syntax through ``sub`` with a template, but ``\g<N>`` avoids ``\10`` ambiguity."""
    out: list[str] = []
    i = 0
    while i < len(substitution):
        ch = substitution[i]
        if ch == "\\" and i + 1 < len(substitution):
            nxt = substitution[i + 1]
            if nxt.isdigit():
                out.append(f"\\g<{nxt}>")
                i += 2
                continue
            if nxt == "\\":
                out.append("\\\\")
                i += 2
                continue
        out.append("\\\\" if ch == "\\" else ch)
        i += 1
    return "".join(out)


def global_replace(pattern: str, substitution: str, value: str) -> str:
    """RE2::GlobalReplace(value, pattern, substitution), as regex_rewrite does it."""
    return str(compile_regex(pattern).sub(_re2_template(substitution), value))
