"""Envoy's string and regex matchers, compiled once.

Envoy matches with RE2, never with a backtracking engine, and a ``safe_regex``
must match the *whole* input ("The regex match will be applied to the full
string", RegexMatcher docs), so patterns are compiled with ``re2`` and applied
with ``fullmatch``. Replacement follows RE2's ``GlobalReplace``: ``\\N`` in the
substitution is a capture group, every non-overlapping match is replaced.

Envoy hands RE2 the pattern's UTF-8 bytes in Latin-1 mode and matches bytes
(checked on Envoy 1.40: ``caf.`` does not match the header value ``café`` and
``caf..`` does; ``(?i)é`` does not match ``É``; the program sizes it reports are
Latin-1 mode's). So a ``.`` or a character class takes one byte, not one
character, and this model does the same. ``ignore_case`` folds ASCII letters
only (``é`` with ignore_case does not match ``É`` on Envoy 1.40).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING

import re2

from verifier.errors import clip, clip_message
from verifier.xds import read

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.type.matcher.v3 import RegexMatcher, StringMatcher

Match = Callable[[str], bool]


class ModelError(ValueError):
    """Configuration Envoy would reject (it NACKs the resource), so no outcome exists."""


class RegexError(ModelError):
    """A pattern RE2 refuses as Envoy compiles it; ``detail`` is RE2's own words."""

    def __init__(self, pattern: str, detail: str) -> None:
        super().__init__(f"invalid RE2 regex {clip(repr(pattern))}: {clip_message(detail)}")
        self.detail = detail


def _latin1() -> re2.Options:
    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1
    options.log_errors = False
    return options


_LATIN1 = _latin1()


class EnvoyRegex:
    """An RE2 program as Envoy compiles it, applied to text as its UTF-8 bytes."""

    __slots__ = ("_program",)

    def __init__(self, pattern: str) -> None:
        self._program = re2.compile(pattern.encode("utf-8"), options=_LATIN1)

    def matches(self, text: str) -> bool:
        """Whether the pattern matches the whole of ``text``."""
        return self._program.fullmatch(text.encode("utf-8")) is not None

    def groups(self, text: str) -> tuple[str, ...] | None:
        """The groups of a match of the whole of ``text``, or None."""
        found = self._program.fullmatch(text.encode("utf-8"))
        return None if found is None else tuple(_text(g) for g in found.groups())

    @property
    def program_size(self) -> int:
        """What Envoy compares with ``re2.max_program_size``."""
        return int(self._program.programsize)

    def sub(self, template: str, text: str) -> str:
        return _text(self._program.sub(template.encode("utf-8"), text.encode("utf-8")))


def _text(raw: bytes | None) -> str:
    # A byte-wise match can split a character; such bytes come back as U+FFFD.
    return "" if raw is None else raw.decode("utf-8", "replace")


@lru_cache(maxsize=4096)
def compile_regex(pattern: str) -> EnvoyRegex:
    """One compiled RE2 per distinct pattern; Envoy rejects what RE2 cannot compile."""
    try:
        return EnvoyRegex(pattern)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else exc
        text = detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)
        raise RegexError(pattern, text) from None


def regex_matcher(m: RegexMatcher) -> Match:
    return compile_regex(m.regex).matches


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_lower(text: str) -> str:
    """Lower case as Envoy folds it (absl::AsciiStrToLower): A-Z only."""
    return text.lower() if text.isascii() else text.translate(_ASCII_LOWER)


def _ignore_case(fn: Callable[[str, str], bool], expected: str) -> Match:
    low = ascii_lower(expected)
    return lambda value: fn(ascii_lower(value), low)


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
    kind, value = read.one_of(m, "match_pattern")
    if kind == "safe_regex":
        return regex_matcher(value)
    if kind in _KINDS and isinstance(value, str):
        fn = _KINDS[kind]
        if m.ignore_case:
            return _ignore_case(fn, value)
        return lambda v: fn(v, value)
    raise ModelError(f"StringMatcher {kind or '<unset>'} is not modelled")


def describe_string_matcher(m: StringMatcher) -> str:
    kind, value = read.one_of(m, "match_pattern")
    if kind == "safe_regex":
        value = value.regex
    suffix = " (ignore case)" if m.ignore_case else ""
    return f"{kind} {clip(repr(value))}{suffix}"


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
    return compile_regex(pattern).sub(_re2_template(substitution), value)
