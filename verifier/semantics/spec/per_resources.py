"""One derived object per live ``Resources``: the spec model's indexes.

An index holds what no request changes (routes filed by listener or by Service),
never the ``Resources`` itself, so the ``Resources`` can be collected and its entry
leaves with it. The loader builds a ``Resources`` and checks and rules only read
it; a table replaced, grown or shrunk is caught (a value replaced in place is not).
Pure: no I/O.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sized
from typing import Generic, TypeVar

from verifier.gatewayapi.resources import Resources

T = TypeVar("T")


class PerResources(Generic[T]):
    """``make(res)`` once per ``Resources`` object, while the ``tables`` it reads
    (``tables(res)``) keep their identity and size."""

    def __init__(
        self, make: Callable[[Resources], T], tables: Callable[[Resources], tuple[Sized, ...]]
    ) -> None:
        self.make = make
        self.tables = tables
        # id(res) -> (weak reference to res, shape of its tables, derived object)
        self.entries: dict[int, tuple[weakref.ref[Resources], tuple[int, ...], T]] = {}

    def __call__(self, res: Resources) -> T:
        key = id(res)
        shape = tuple(x for t in self.tables(res) for x in (id(t), len(t)))
        entry = self.entries.get(key)
        if entry is not None and entry[0]() is res and entry[1] == shape:
            return entry[2]
        made = self.make(res)

        def forget(ref: weakref.ref[Resources]) -> None:
            current = self.entries.get(key)
            if current is not None and current[0] is ref:
                del self.entries[key]

        self.entries[key] = (weakref.ref(res, forget), shape, made)
        return made
