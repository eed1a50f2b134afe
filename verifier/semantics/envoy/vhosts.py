"""Virtual host selection, indexed as Envoy's ``RouteMatcher`` indexes it.

VirtualHost.domains (route_components.proto): "Domain search order: 1. Exact domain
names: www.foo.com. 2. Suffix domain wildcards: *.foo.com or *-bar.foo.com. 3. Prefix
domain wildcards: foo.* or foo-*. 4. Special wildcard * matching any domain." and
"The longest wildcards match first." A wildcard never matches its bare suffix or
prefix (``*.foo.com`` does not match ``.foo.com``): ``findWildcardVirtualHost`` skips
wildcards whose length is ">= host.size()". Hosts compare lower-cased.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

V = TypeVar("V")

# The tables, in the order Envoy consults them (RouteMatcher::findVirtualHost).
SEARCH_ORDER = ("exact", "suffix wildcard", "prefix wildcard", "default '*'")


@dataclass
class VirtualHostIndex(Generic[V]):
    exact: dict[str, V] = field(default_factory=dict)
    suffixes: dict[int, dict[str, V]] = field(default_factory=dict)  # len(suffix) -> ...
    prefixes: dict[int, dict[str, V]] = field(default_factory=dict)
    default: V | None = None
    notes: list[str] = field(default_factory=list)
    _suffix_lengths: list[int] = field(default_factory=list)
    _prefix_lengths: list[int] = field(default_factory=list)

    def add(self, domain: str, value: V, name: str) -> None:
        d = domain.lower()
        if d == "*":
            table_done = self.default is not None
            if not table_done:
                self.default = value
        elif d.startswith("*"):
            table = self.suffixes.setdefault(len(d) - 1, {})
            table_done = d[1:] in table
            table.setdefault(d[1:], value)
        elif d.endswith("*"):
            table = self.prefixes.setdefault(len(d) - 1, {})
            table_done = d[:-1] in table
            table.setdefault(d[:-1], value)
        else:
            table_done = d in self.exact
            self.exact.setdefault(d, value)
        if table_done:
            # Envoy rejects the whole RouteConfiguration: "Only unique values for
            # domains are permitted". Keep the first so the rest can still be judged.
            self.notes.append(f"duplicate domain {domain!r} (virtual host {name}); Envoy rejects")

    def freeze(self) -> None:
        self._suffix_lengths = sorted(self.suffixes, reverse=True)
        self._prefix_lengths = sorted(self.prefixes, reverse=True)

    def find(self, host: str) -> tuple[V | None, str]:
        """The virtual host for ``host`` (port handling is the caller's) and why."""
        h = host.lower()
        found = self.exact.get(h)
        if found is not None:
            return found, f"exact domain {h!r}"
        size = len(h)
        for length in self._suffix_lengths:
            if length < size:
                found = self.suffixes[length].get(h[size - length :])
                if found is not None:
                    return found, f"suffix wildcard '*{h[size - length :]}'"
        for length in self._prefix_lengths:
            if length < size:
                found = self.prefixes[length].get(h[:length])
                if found is not None:
                    return found, f"prefix wildcard '{h[:length]}*'"
        if self.default is not None:
            return self.default, "default domain '*'"
        return None, "no domain matches"


def build_index(
    items: list[tuple[str, list[str], V]], on_note: Callable[[str], None] | None = None
) -> VirtualHostIndex[V]:
    """(name, domains, value) in configuration order."""
    index: VirtualHostIndex[V] = VirtualHostIndex()
    for name, domains, value in items:
        for domain in domains:
            index.add(domain, value, name)
    index.freeze()
    if on_note is not None:
        for note in index.notes:
            on_note(note)
    return index
