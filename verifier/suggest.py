"""The existing name closest to one that names nothing: the "did you mean" of a typo.

Shared by the loader (a mistyped YAML field name) and the rules (a backendRef, a
parentRef or a certificateRef naming an object that does not exist). Pure; no
catalogue wording here, only the choice of the name.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# difflib's similarity ratio a name needs to be offered: 0.6 (its default) takes
# `cart-canry` -> `cart-canary` and `matchs` -> `matches`, not `web` -> `api`.
CUTOFF = 0.6

# Characters a name typed from a screen or a printout swaps for one another. Two
# names as close as each other to the one given (`ledger-vl` is one edit from both
# `ledger-v1` and `ledger-v2`) are told apart by these: `l` was read as `1`.
LOOKALIKES = str.maketrans({"l": "1", "i": "1", "I": "1", "|": "1", "o": "0", "O": "0"})


def _ratio(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()


def closest(wanted: str, names: Iterable[str]) -> str | None:
    """The name in ``names`` most like ``wanted``, or None when none is like it; of
    names equally like it, the one that differs only by look-alike characters, then
    the last in sorted order (difflib's own choice)."""
    options = sorted(set(names) - {wanted})
    found = difflib.get_close_matches(wanted, options, n=max(1, len(options)), cutoff=CUTOFF)
    if not found:
        return None
    best = _ratio(wanted, found[0])
    tied = [n for n in found if _ratio(wanted, n) == best]
    plain = wanted.translate(LOOKALIKES)
    return max(tied, key=lambda n: (_ratio(plain, n.translate(LOOKALIKES)), n))
