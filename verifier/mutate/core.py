"""Mutation machinery: mutants, operators, sites, copy-on-write edits and xDS paths.

A mutant snapshot is built by path copying: the message an operator edits is a deep copy,
every message on the way to it (route configuration, virtual host, their lists) is a new
shallow copy, and everything else is shared with the original. Messages are never modified
in place once built (a convention of the whole verifier), so sharing is safe and the
original snapshot is never changed. xDS paths name resources and virtual hosts by name and routes by
their index in the original virtual host, e.g.
``routes[edge-80].virtual_hosts[foo.example.com].routes[3].match.headers[0]``.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from envoy_data_plane.envoy.config.cluster.v3 import Cluster
from envoy_data_plane.envoy.config.endpoint.v3 import ClusterLoadAssignment
from envoy_data_plane.envoy.config.listener.v3 import Listener
from envoy_data_plane.envoy.config.route.v3 import (
    RedirectAction,
    Route,
    RouteAction,
    RouteConfiguration,
    VirtualHost,
)

from verifier.xds.snapshot import Snapshot

MAX_SITES: Final = 20


@dataclass(frozen=True)
class Mutant:
    operator: str  # kebab-case operator name
    xds_path: str  # where the change is
    detail: str  # what changed, human-readable
    snapshot: Snapshot = field(repr=False)


@dataclass(frozen=True)
class Site:
    """One place an operator can change, and how to build the mutant (lazily)."""

    xds_path: str
    detail: str
    build: Callable[[], Snapshot] = field(repr=False, compare=False)


Prover = Callable[[Snapshot, Mutant], bool]


def never(original: Snapshot, mutant: Mutant) -> bool:
    """The default proof: none, so the mutant counts as distinguishable."""
    return False


@dataclass(frozen=True)
class Operator:
    """A kind of mistake: where it applies, and when a mutant of it is provably harmless."""

    name: str
    doc: str
    sites: Callable[[Snapshot], Iterable[Site]] = field(repr=False)
    prove: Prover = field(default=never, repr=False)

    def generate(self, snapshot: Snapshot, *, cap: int = MAX_SITES) -> Iterator[Mutant]:
        for site in select(list(self.sites(snapshot)), cap):
            yield Mutant(self.name, site.xds_path, site.detail, site.build())


def select(sites: list[Site], cap: int) -> list[Site]:
    """At most ``cap`` sites, evenly spread over the whole list, deterministically."""
    n = len(sites)
    if n <= cap:
        return sites
    return [sites[(k * n) // cap] for k in range(cap)]


# --- copy-on-write edits -------------------------------------------------------------------------


def _replaced(items: tuple[object, ...], index: int, new: object | None) -> tuple[object, ...]:
    out = list(items)
    if new is None:
        del out[index]
    else:
        out[index] = new
    return tuple(out)


def _with_rc_copy(snap: Snapshot, rc: int, new: RouteConfiguration) -> Snapshot:
    routes: tuple[RouteConfiguration, ...] = _replaced(snap.routes, rc, new)  # type: ignore[assignment]
    return dataclasses.replace(snap, routes=routes)


def with_route_config(
    snap: Snapshot, rc: int, fn: Callable[[RouteConfiguration], None]
) -> Snapshot:
    """``fn`` edits a deep copy of route configuration ``rc``."""
    new = copy.deepcopy(snap.routes[rc])
    fn(new)
    return _with_rc_copy(snap, rc, new)


def _vhost_copy(snap: Snapshot, rc: int, vh: int) -> tuple[RouteConfiguration, VirtualHost]:
    """Path copies: a new configuration and virtual host, new lists, shared list items."""
    new_rc = copy.copy(snap.routes[rc])
    new_rc.virtual_hosts = list(new_rc.virtual_hosts)
    new_vh = copy.copy(new_rc.virtual_hosts[vh])
    new_vh.routes = list(new_vh.routes)
    new_vh.domains = list(new_vh.domains)
    new_rc.virtual_hosts[vh] = new_vh
    return new_rc, new_vh


def with_vhost(snap: Snapshot, rc: int, vh: int, fn: Callable[[VirtualHost], None]) -> Snapshot:
    """``fn`` rearranges a copy of the virtual host's ``routes``/``domains`` lists.

    The routes themselves are shared with the original, so ``fn`` must not edit them in place.
    """
    new_rc, new_vh = _vhost_copy(snap, rc, vh)
    fn(new_vh)
    return _with_rc_copy(snap, rc, new_rc)


def with_route(snap: Snapshot, ref: RouteRef, fn: Callable[[Route], None]) -> Snapshot:
    """``fn`` edits a deep copy of one route; the rest of its configuration is shared."""
    new_rc, new_vh = _vhost_copy(snap, ref.rc, ref.vh)
    route = copy.deepcopy(new_vh.routes[ref.route])
    fn(route)
    new_vh.routes[ref.route] = route
    return _with_rc_copy(snap, ref.rc, new_rc)


def with_cluster(
    snap: Snapshot,
    index: int,
    fn: Callable[[Cluster], None],
    endpoints: Callable[[tuple[ClusterLoadAssignment, ...]], tuple[ClusterLoadAssignment, ...]]
    | None = None,
) -> Snapshot:
    new = copy.deepcopy(snap.clusters[index])
    fn(new)
    clusters: tuple[Cluster, ...] = _replaced(snap.clusters, index, new)  # type: ignore[assignment]
    eps = endpoints(snap.endpoints) if endpoints else snap.endpoints
    return dataclasses.replace(snap, clusters=clusters, endpoints=eps)


def with_listener(snap: Snapshot, index: int, fn: Callable[[Listener], None] | None) -> Snapshot:
    """Edit a copy of listener ``index``; ``fn=None`` removes it."""
    new = None
    if fn is not None:
        new = copy.deepcopy(snap.listeners[index])
        fn(new)
    listeners: tuple[Listener, ...] = _replaced(snap.listeners, index, new)  # type: ignore[assignment]
    return dataclasses.replace(snap, listeners=listeners)


# --- walking routes ------------------------------------------------------------------------------


class RouteRef(NamedTuple):
    rc: int
    vh: int
    route: int
    path: str


def vhost_path(rc: RouteConfiguration, vh: VirtualHost) -> str:
    return f"routes[{rc.name}].virtual_hosts[{vh.name}]"


def each_vhost(snap: Snapshot) -> Iterator[tuple[int, int, VirtualHost]]:
    for i, rc in enumerate(snap.routes):
        for j, vh in enumerate(rc.virtual_hosts):
            yield i, j, vh


def each_route(snap: Snapshot) -> Iterator[tuple[RouteRef, Route]]:
    for i, j, vh in each_vhost(snap):
        base = vhost_path(snap.routes[i], vh)
        for k, route in enumerate(vh.routes):
            yield RouteRef(i, j, k, f"{base}.routes[{k}]"), route


class Edit(NamedTuple):
    """A change inside one message: path suffix, description, and the in-place edit of a copy."""

    suffix: str
    detail: str
    apply: Callable[[Route], None]


def route_sites(
    snap: Snapshot, edits: Callable[[Snapshot, Route], Iterable[Edit]]
) -> Iterator[Site]:
    """One site per edit of every route; the edit is applied to a copy of the route."""
    for ref, route in each_route(snap):
        for e in edits(snap, route):
            yield Site(ref.path + e.suffix, e.detail, _route_builder(snap, ref, e.apply))


def _route_builder(
    snap: Snapshot, ref: RouteRef, fn: Callable[[Route], None]
) -> Callable[[], Snapshot]:
    return lambda: with_route(snap, ref, fn)


# --- navigating to what an edit changes -------------------------------------------------------

Nav = Callable[[Route], Any]  # from a (copied) route to the message an edit changes


def route_action(r: Route) -> RouteAction:
    assert r.route is not None
    return r.route


def redirect_action(r: Route) -> RedirectAction:
    assert r.redirect is not None
    return r.redirect


def set_field(nav: Nav, field: str, value: object) -> Callable[[Route], None]:
    def apply(r: Route) -> None:
        setattr(nav(r), field, value)

    return apply


def clear_field(nav: Nav, field: str) -> Callable[[Route], None]:
    """Reset a field to its proto default (None for messages and oneofs, "" for strings)."""

    def apply(r: Route) -> None:
        owner = nav(r)
        setattr(owner, field, type(owner).__dataclass_fields__[field].default_factory())

    return apply


def pop_item(nav: Nav, field: str, k: int) -> Callable[[Route], None]:
    def apply(r: Route) -> None:
        del getattr(nav(r), field)[k]

    return apply


def on_routes(
    edits: Callable[[Snapshot, Route], Iterator[Edit]],
) -> Callable[[Snapshot], Iterator[Site]]:
    return lambda snap: route_sites(snap, edits)


def weighted_entry(k: int) -> Nav:
    def nav(r: Route) -> Any:
        wc = route_action(r).weighted_clusters
        assert wc is not None
        return wc.clusters[k]

    return nav


# --- reading xDS paths back ----------------------------------------------------------------------

_NAME: Final = r"\[(?P<{}>[^\[\]]*)\]"
ROUTE_PATH: Final = re.compile(
    "^routes"
    + _NAME.format("rc")
    + r"\.virtual_hosts"
    + _NAME.format("vh")
    + r"\.routes\[(?P<index>\d+)\]"
)
VHOST_PATH: Final = re.compile(
    "^routes" + _NAME.format("rc") + r"\.virtual_hosts" + _NAME.format("vh")
)
RC_PATH: Final = re.compile("^routes" + _NAME.format("rc"))
CLUSTER_PATH: Final = re.compile("^clusters" + _NAME.format("name"))


def find_named(items: Sequence[object], name: str) -> int | None:
    """The index of the only item called ``name`` (None if missing or ambiguous)."""
    found = [i for i, x in enumerate(items) if getattr(x, "name", None) == name]
    return found[0] if len(found) == 1 else None
