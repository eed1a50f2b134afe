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


def closest(wanted: str, names: Iterable[str]) -> str | None:
    """The name in ``names`` most like ``wanted``, or None when none is like it."""
    found = difflib.get_close_matches(wanted, sorted(set(names) - {wanted}), n=1, cutoff=CUTOFF)
    return found[0] if found else None
