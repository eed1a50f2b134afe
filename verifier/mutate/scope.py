"""What exactly a mutant changed, verified, and facts about the original snapshot.

Proofs never trust a mutant's description: they locate the site from its xDS path and check
that the mutant snapshot equals the original everywhere else. Anything unexpected means
"no proof".
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from envoy_data_plane.envoy.config.route.v3 import Route, RouteConfiguration, VirtualHost

from verifier.mutate.core import (
    CLUSTER_PATH,
    RC_PATH,
    ROUTE_PATH,
    VHOST_PATH,
    find_named,
)
from verifier.xds.codec import Json, to_json_dict
from verifier.xds.snapshot import Snapshot, resource_name

# --- facts about a snapshot ----------------------------------------------------------------------

# Keys whose presence means a cluster may be chosen by something other than its name.
_DYNAMIC_CLUSTER_KEYS: Final = frozenset(
    {
        "cluster_header",
        "cluster_specifier_plugin",
        "inline_cluster_specifier_plugin",
        "cluster_specifier_plugins",
    }
)


@dataclass(frozen=True)
class Facts:
    strings: frozenset[str]  # every string value in listeners and route configurations
    cluster_strings: dict[str, frozenset[str]]  # every string value in each cluster
    dynamic_clusters: bool  # some route or listener picks clusters by header or plugin
    formatters: bool  # some string may be a formatter (%ROUTE_NAME%, %UPSTREAM_CLUSTER%, ...)
    rds_names: frozenset[str] | None  # route configurations listeners use; None: unknown


def _walk(node: Json) -> Iterator[tuple[str | None, Json]]:
    stack: list[tuple[str | None, Json]] = [(None, node)]
    while stack:
        key, value = stack.pop()
        yield key, value
        if isinstance(value, dict):
            stack.extend(value.items())
        elif isinstance(value, list):
            stack.extend((key, v) for v in value)


def _scan(docs: list[Json]) -> tuple[frozenset[str], frozenset[str]]:
    strings: set[str] = set()
    keys: set[str] = set()
    for doc in docs:
        for key, value in _walk(doc):
            if key is not None:
                keys.add(key)
            if isinstance(value, str):
                strings.add(value)
    return frozenset(strings), frozenset(keys)


def _rds_names(snap: Snapshot) -> frozenset[str] | None:
    if not snap.listeners:
        return None
    names: set[str] = set()
    for listener in snap.listeners:
        for key, value in _walk(to_json_dict(listener)):
            if key in ("scoped_routes", "vhds"):
                return None
            if key == "rds" and isinstance(value, dict):
                names.add(str(value.get("route_config_name", "")))
    return frozenset(names)


# What is assumed when a snapshot cannot be serialised: nothing is known to be unused.
_UNKNOWN: Final = Facts(frozenset(), {}, dynamic_clusters=True, formatters=True, rds_names=None)


def _compute(snap: Snapshot) -> Facts:
    try:
        docs = [to_json_dict(m) for m in (*snap.listeners, *snap.routes)]
        clusters = {c.name: _scan([to_json_dict(c)])[0] for c in snap.clusters}
        rds = _rds_names(snap)
    except (ValueError, TypeError):  # pydantic's ValidationError is a ValueError
        return _UNKNOWN
    strings, keys = _scan(docs)
    return Facts(
        strings=strings,
        cluster_strings=clusters,
        dynamic_clusters=bool(keys & _DYNAMIC_CLUSTER_KEYS),
        formatters=any("%" in s for s in strings),
        rds_names=rds,
    )


_CACHE: dict[int, tuple[Snapshot, Facts]] = {}


def facts(snap: Snapshot) -> Facts:
    """Facts about a snapshot, computed once per snapshot object (a small identity cache)."""
    hit = _CACHE.get(id(snap))
    if hit is not None and hit[0] is snap:
        return hit[1]
    result = _compute(snap)
    if len(_CACHE) >= 16:
        _CACHE.clear()
    _CACHE[id(snap)] = (snap, result)
    return result


def has_formatters(msg: object) -> bool:
    """Whether a message may hold a formatter (``%...%``); True when it cannot be serialised."""
    try:
        return "%" in json.dumps(to_json_dict(msg))  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return True


def rc_unreferenced(snap: Snapshot, rc_name: str) -> bool:
    """No listener routes requests through this route configuration."""
    names = facts(snap).rds_names
    return names is not None and rc_name not in names


def cluster_unreferenced(snap: Snapshot, name: str) -> bool:
    """No route, listener or other cluster can send a request to this cluster."""
    f = facts(snap)
    if f.dynamic_clusters or name in f.strings:
        return False
    return not any(name in s for other, s in f.cluster_strings.items() if other != name)


TCP_PROXY: Final = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"


def cluster_tcp_only(snap: Snapshot, name: str) -> bool:
    """Only plain tcp_proxy filters (no HTTP tunnelling) send to this cluster: no route,
    HTTP filter or other cluster does, so its HTTP protocol options are never used."""
    f = facts(snap)
    if f.dynamic_clusters or any(name in s for o, s in f.cluster_strings.items() if o != name):
        return False
    try:
        routes = _scan([to_json_dict(rc) for rc in snap.routes])[0]
        listeners = [to_json_dict(li) for li in snap.listeners]
    except (ValueError, TypeError):
        return False
    if name in routes:
        return False
    for doc in listeners:
        for _key, value in _walk(doc):
            if not isinstance(value, dict):
                continue
            if "filters" in value:
                value.pop("name", None)  # a filter chain's name names no cluster
            if value.get("@type") != TCP_PROXY:
                continue
            if "tunneling_config" in value:
                return False
            value.clear()  # a plain tcp_proxy's naming is allowed: drop it from the scan
        if name in _scan([doc])[0]:
            return False
    return True


# --- verified scopes -----------------------------------------------------------------------------


def _blank(msg: object, field_name: str) -> object:
    out = copy.copy(msg)
    setattr(out, field_name, [])
    return out


@dataclass(frozen=True)
class RcScope:
    """The mutant changed route configuration ``index`` (named ``name``) only."""

    index: int
    name: str
    before: RouteConfiguration
    after: RouteConfiguration


def rc_scope(original: Snapshot, mutant: Snapshot, xds_path: str) -> RcScope | None:
    m = RC_PATH.match(xds_path)
    if m is None:
        return None
    if (original.clusters, original.endpoints, original.listeners) != (
        mutant.clusters,
        mutant.endpoints,
        mutant.listeners,
    ) or len(original.routes) != len(mutant.routes):
        return None
    i = find_named(original.routes, m["rc"])
    if i is None or mutant.routes[i].name != m["rc"]:
        return None
    if any(
        a != b
        for k, (a, b) in enumerate(zip(original.routes, mutant.routes, strict=True))
        if k != i
    ):
        return None
    return RcScope(i, m["rc"], original.routes[i], mutant.routes[i])


@dataclass(frozen=True)
class VhostScope:
    """The mutant changed only the routes of one virtual host, which routes requests the
    plain way (first matching route of ``routes``), so the match algebra applies."""

    rc: RcScope
    before: list[Route]
    after: list[Route]
    vhost: VirtualHost


def vhost_scope(original: Snapshot, mutant: Snapshot, xds_path: str) -> VhostScope | None:
    scope = rc_scope(original, mutant, xds_path)
    m = VHOST_PATH.match(xds_path)
    if scope is None or m is None:
        return None
    a, b = scope.before, scope.after
    if _blank(a, "virtual_hosts") != _blank(b, "virtual_hosts"):
        return None
    if len(a.virtual_hosts) != len(b.virtual_hosts):
        return None
    j = find_named(a.virtual_hosts, m["vh"])
    if j is None:
        return None
    for k, (va, vb) in enumerate(zip(a.virtual_hosts, b.virtual_hosts, strict=True)):
        if k != j and va != vb:
            return None
    va, vb = a.virtual_hosts[j], b.virtual_hosts[j]
    if _blank(va, "routes") != _blank(vb, "routes"):
        return None
    if va.matcher is not None or a.ignore_path_parameters_in_path_matching:
        return None  # routes chosen by a matcher tree, or paths sanitised per matcher kind
    return VhostScope(scope, list(va.routes), list(vb.routes), va)


def route_index(xds_path: str) -> int | None:
    m = ROUTE_PATH.match(xds_path)
    return None if m is None else int(m["index"])


def changed_route(scope: VhostScope, xds_path: str) -> int | None:
    """The index of the one route the mutant changed in place (same length, same order)."""
    i = route_index(xds_path)
    before, after = scope.before, scope.after
    if i is None or i >= len(before) or len(before) != len(after):
        return None
    if any(a != b for k, (a, b) in enumerate(zip(before, after, strict=True)) if k != i):
        return None
    return i


def cluster_scope(original: Snapshot, mutant: Snapshot, xds_path: str) -> str | None:
    """The name of the one cluster the mutant changed (with, at most, its own endpoints)."""
    m = CLUSTER_PATH.match(xds_path)
    if m is None:
        return None
    name = m["name"]
    if (original.listeners, original.routes) != (mutant.listeners, mutant.routes):
        return None
    if [c.name for c in original.clusters] != [c.name for c in mutant.clusters]:
        return None
    if any(
        a != b for a, b in zip(original.clusters, mutant.clusters, strict=True) if a.name != name
    ):
        return None
    if any(
        c.eds_cluster_config is not None and c.eds_cluster_config.service_name == name
        for c in original.clusters
        if c.name != name
    ):
        return None
    other = [e for e in original.endpoints if resource_name(e) != name]
    if other != [e for e in mutant.endpoints if resource_name(e) != name]:
        return None
    return name
