"""unreachable-routes' path index keeps exactly the pairs the quadratic scan kept."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from verifier.rules.unreachable_routes import PathIndex, PathInfo, _may_cover

KINDS = ("prefix", "path", "path_separated_prefix", "safe_regex", "connect_matcher")
VALUES = st.text(alphabet="/aAbB.İı", max_size=5).map(lambda t: "/" + t) | st.just("/")
INFOS = st.none() | st.tuples(st.sampled_from(KINDS), VALUES | st.text(max_size=3))


@settings(max_examples=400, deadline=None)
@given(st.lists(INFOS, max_size=25))
def test_candidates_are_the_scans_pairs(infos: list[PathInfo | None]) -> None:
    index = PathIndex(infos)
    for late_index, late in enumerate(infos):
        if late is None:
            continue
        scanned = [i for i in range(late_index) if _may_cover(infos[i], late)]
        assert index.candidates(late, late_index) == scanned


class _CountingDict(dict[str, list[int]]):
    lookups = 0

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        _CountingDict.lookups += 1
        return super().get(key, default)


def test_a_long_later_path_costs_one_lookup_per_key_length() -> None:
    """Not one per character: a 1 MB regex made the index slice it a million times
    (5 minutes for one check). The count of lookups is the measure, not a clock."""
    index = PathIndex([("prefix", "/a"), ("path", "/ab"), ("prefix", "/"), ("prefix", "/b")])
    index.by_value = _CountingDict(index.by_value)
    late: PathInfo = ("safe_regex", "/a" + "b" * 10_000)
    assert index.candidates(late, 4) == [0, 1, 2]
    assert _CountingDict.lookups == 2  # lengths 2 and 3
