"""A Gateway as its ListenerSets extend it (GEP-1713, ``apis/v1/listenerset_types.go``).

"Implementations MUST treat the parent Gateway as having the merged list of all
listeners from itself and attached ListenerSets using the following
precedence: 1. "parent" Gateway 2. ListenerSet ordered by creation time
(oldest first) 3. ListenerSet ordered alphabetically by "{namespace}/{name}"."
A Gateway admits ListenerSets only through ``spec.allowedListeners`` ("By
default, Gateways do not allow ListenerSet attachment"). Each merged listener
keeps the ListenerSet it came from: Routes reach it only through a parentRef to
that ListenerSet, and "Same" namespace and certificate references are relative
to the ListenerSet.
"""

from __future__ import annotations

import dataclasses
import weakref

from verifier.gatewayapi.model import GATEWAY_GROUP, Gateway, ListenerSet
from verifier.gatewayapi.resources import Resources
from verifier.semantics.spec.attach import selector_matches

# id(gateway) -> (weak reference to it, id of the ListenerSet table, merged Gateway);
# an entry leaves with its Gateway.
_MERGED: dict[int, tuple[weakref.ref[Gateway], int, Gateway]] = {}


def admits(res: Resources, gw: Gateway, ls: ListenerSet) -> bool:
    """Does ``gw`` take ``ls``'s listeners? Its parentRef must name the Gateway and
    the Gateway's allowedListeners must admit the ListenerSet's namespace."""
    if (ls.parent_group, ls.parent_kind) != (GATEWAY_GROUP, "Gateway"):
        return False
    if (ls.parent_namespace, ls.parent_name) != gw.meta.key:
        return False
    ns = ls.meta.namespace
    policy = gw.allowed_listeners
    if policy == "All":
        return True
    if policy == "Same":
        return ns == gw.meta.namespace
    if policy == "Selector":
        return selector_matches(gw.allowed_listeners_selector, res.namespace_labels(ns))
    return False


def listener_sets(res: Resources, gw: Gateway) -> list[ListenerSet]:
    """The ListenerSets ``gw`` admits, in precedence order."""
    found = [ls for ls in res.listener_sets.values() if admits(res, gw, ls)]
    return sorted(
        found, key=lambda ls: (ls.meta.creation_timestamp, ls.meta.namespace, ls.meta.name)
    )


def merged_gateway(res: Resources, gw: Gateway) -> Gateway:
    """``gw`` with the listeners of the ListenerSets it admits appended (the same
    object when there are none), remembered per Gateway object."""
    if not res.listener_sets:
        return gw
    key = id(gw)
    known = _MERGED.get(key)
    if known is not None and known[0]() is gw and known[1] == id(res.listener_sets):
        return known[2]
    merged = gw
    extra = [lst for ls in listener_sets(res, gw) for lst in ls.listeners]
    if extra:
        merged = dataclasses.replace(gw, listeners=gw.listeners + tuple(extra))

    table = _MERGED  # held here: module globals may be gone when this runs at exit

    def forget(ref: weakref.ref[Gateway]) -> None:
        current = table.get(key)
        if current is not None and current[0] is ref:
            del table[key]

    _MERGED[key] = (weakref.ref(gw, forget), id(res.listener_sets), merged)
    return merged
