"""The existing name closest to one that names nothing: the "did you mean" of a typo.

Shared by the loader (a mistyped YAML field name), the rules (a backendRef, a
parentRef or a certificateRef naming an object that does not exist) and the mesh's
references (a case's client or Service, ``explain --from``, ``--proxy``: ``missing``,
the input error's words, which are not catalogue findings). Pure.
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


def wrong_part(
    namespace: str, name: str, refs: Iterable[tuple[str, str]]
) -> tuple[str, str | None]:
    """For ``namespace/name`` that names none of ``refs`` (namespace, name): which part
    is wrong, and the closest ``namespace/name`` that exists (None when none is like it).

    The namespace is wrong when nothing of the kind is in it, or when the name is there
    in another namespace (then that one is offered); else the name is. Each part is
    compared alone: ``payments/zzz`` is not like ``payments/batch``."""
    refs = set(refs)

    def names_in(ns: str) -> list[str]:
        return [n for rns, n in refs if rns == ns]

    elsewhere = sorted(ns for ns, n in refs if n == name)
    if names_in(namespace) and not elsewhere:
        near = closest(name, names_in(namespace))
        return "name", None if near is None else f"{namespace}/{near}"
    near_ns = closest(namespace, elsewhere or {ns for ns, _n in refs})
    if near_ns is None and len(elsewhere) == 1:
        near_ns = elsewhere[0]
    if near_ns is None:
        return "namespace", None
    near = name if name in names_in(near_ns) else closest(name, names_in(near_ns))
    return "namespace", None if near is None else f"{near_ns}/{near}"


def missing(
    what: str, namespace: str, name: str, refs: Iterable[tuple[str, str]]
) -> tuple[str, str]:
    """``namespace/name`` names no ``what`` (``refs``: those that exist): the part that is
    wrong ("namespace" or "name", ``wrong_part``) and the input error's message, with the
    did-you-mean, else what is there. One wording for a client workload or a Service
    named by a cases table, ``explain --from`` and ``--proxy``."""
    refs = set(refs)
    part, near = wrong_part(namespace, name, refs)
    message = f"no {what} {namespace}/{name} in the input"
    if near is not None:
        return part, f"{message}: did you mean {near}?"
    if part == "namespace":
        there = ", ".join(sorted({ns for ns, _n in refs})) or "none"
        return part, f"{message} (none in namespace {namespace}; namespaces that have one: {there})"
    there = ", ".join(sorted(n for ns, n in refs if ns == namespace))
    return part, f"{message} (there: {there})"
