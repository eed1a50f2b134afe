"""Walking a snapshot as Envoy reads it: listeners, their HCMs, route configurations, routes.

Shared by the structural rules. Nothing here reads resource names for meaning: a route
configuration is found through the HCMs that use it (RDS or inline), a cluster through
the route fields that name it. Paths are ``xds_path`` strings in the form
``routes[<rc>].virtual_hosts[<vh>].routes[<i>]`` used by every finding.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from verifier.check import Context
from verifier.gatewayapi.load import Location
from verifier.xds import read
from verifier.xds.layout import XdsLoadError
from verifier.xds.snapshot import Snapshot

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.listener.v3 import Listener
    from envoy_data_plane.envoy.config.route.v3 import (
        Route,
        RouteAction,
        RouteActionRequestMirrorPolicy,
        RouteConfiguration,
        VirtualHost,
    )
    from envoy_data_plane.envoy.extensions.filters.network.http_connection_manager.v3 import (
        HttpConnectionManager,
    )
    from envoy_data_plane.google.protobuf import Any as PbAny

ROUTE_METADATA = "aether.io/route"
MEMO_SIZE = 8  # snapshots remembered by ``PerSnapshot``
HCM = "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
T = TypeVar("T")


@dataclass(frozen=True)
class RouteRef:
    config: RouteConfiguration
    vhost: VirtualHost
    index: int
    route: Route
    path: str

    @property
    def label(self) -> str:
        return self.route.name or self.path


class PerSnapshot(Generic[T]):
    """``compute``, remembered for the last few snapshots by identity: a snapshot is
    immutable, and a mutant of it is another snapshot, so it never sees a stale answer."""

    def __init__(self, compute: Callable[[Snapshot], T]) -> None:
        self.compute = compute
        self._memo: dict[int, tuple[Snapshot, T]] = {}

    def known(self, snap: Snapshot) -> bool:
        hit = self._memo.get(id(snap))
        return hit is not None and hit[0] is snap

    def __call__(self, snap: Snapshot) -> T:
        if self.known(snap):
            return self._memo[id(snap)][1]
        result = self.compute(snap)
        if len(self._memo) >= MEMO_SIZE:
            self._memo.pop(next(iter(self._memo)))
        self._memo[id(snap)] = (snap, result)
        return result


def unpack(value: PbAny | None) -> Any:
    """The message or record an ``Any`` holds; None if it holds nothing readable."""
    if value is None or not value.type_url:
        return None
    try:
        return read.unpack(value)
    except (XdsLoadError, ValueError):
        return None


def hcms(listener: Listener) -> Iterator[tuple[str, HttpConnectionManager]]:
    """Every HTTP connection manager of a listener, with its path."""
    base = f"listeners[{listener.name}]"
    chains = [(f"{base}.filter_chains[{i}]", c) for i, c in enumerate(listener.filter_chains)]
    if listener.default_filter_chain is not None:
        chains.append((f"{base}.default_filter_chain", listener.default_filter_chain))
    for path, chain in chains:
        for j, f in enumerate(chain.filters):
            hcm = unpack(f.typed_config)
            if read.is_a(hcm, HCM):
                yield f"{path}.filters[{j}]", hcm


def route_configs(snap: Snapshot) -> list[tuple[str, RouteConfiguration]]:
    """RDS route configurations, then those inlined in listeners, with their paths."""
    out = [(f"routes[{rc.name}]", rc) for rc in snap.routes]
    for listener in snap.listeners:
        for path, hcm in hcms(listener):
            inline = read.one_of(hcm, "route_specifier")[0] == "route_config"
            if inline and hcm.route_config is not None:
                out.append((f"{path}.route_config", hcm.route_config))
    return out


def routes(snap: Snapshot) -> Iterator[RouteRef]:
    for base, rc in route_configs(snap):
        for vh in rc.virtual_hosts:
            for i, route in enumerate(vh.routes):
                yield RouteRef(rc, vh, i, route, f"{base}.virtual_hosts[{vh.name}].routes[{i}]")


def action(route: Route) -> RouteAction | None:
    kind, value = read.one_of(route, "action")
    return value if kind == "route" else None


def forward_clusters(act: RouteAction) -> list[tuple[str, str]]:
    """(cluster, field) pairs a route action forwards to; mirrors excluded."""
    kind, _ = read.one_of(act, "cluster_specifier")
    if kind == "cluster":
        return [(act.cluster or "", "route.cluster")]
    if kind == "weighted_clusters" and act.weighted_clusters is not None:
        return [
            (c.name, f"route.weighted_clusters.clusters[{i}]")
            for i, c in enumerate(act.weighted_clusters.clusters)
            if c.name
        ]
    return []


def mirror_clusters(
    policies: list[RouteActionRequestMirrorPolicy], field: str
) -> list[tuple[str, str]]:
    return [(p.cluster, f"{field}[{i}]") for i, p in enumerate(policies) if p.cluster]


def dynamic_cluster_choice(snap: Snapshot) -> bool:
    """True when some route picks its cluster at request time (header, plugin)."""
    for ref in routes(snap):
        act = action(ref.route)
        if act is None:
            continue
        kind, _ = read.one_of(act, "cluster_specifier")
        weighted = act.weighted_clusters.clusters if act.weighted_clusters is not None else []
        if kind not in ("", "cluster", "weighted_clusters") or any(
            c.cluster_header for c in weighted
        ):
            return True
        if any(p.cluster_header for p in act.request_mirror_policies):
            return True
    return False


_Plan = tuple[tuple[str, int], ...]
_plans: dict[tuple[str, str], _Plan] = {}


def instances(msg: Any, path: str, target: str) -> list[tuple[str, Any]]:
    """Every message of type ``target`` (a full proto name) nested in ``msg`` (``Any``
    unpacked), depth first, with its path; messages and records alike.

    Only fields whose message type can lead to ``target`` (directly, or through an
    ``Any``) are read; see ``_plan``.
    """
    found: list[tuple[str, Any]] = []
    _collect(msg, path, target, found)
    return found


def _collect(msg: Any, path: str, target: str, found: list[tuple[str, Any]]) -> None:
    name = read.type_name(msg)
    if name == target:
        found.append((path, msg))
    plan = _plans.get((name, target))
    if plan is None:
        plan = _plans[name, target] = _plan(msg, target)
    for attr, shape in plan:
        value = getattr(msg, attr, None)
        if value is None:
            continue
        if shape == read.ONE:
            _visit(value, f"{path}.{attr}", target, found)
        elif shape == read.LIST:
            named = attr == "virtual_hosts"
            for i, item in enumerate(value):
                _visit(item, f"{path}.{attr}[{item.name if named else i}]", target, found)
        else:
            for key, item in value.items():
                _visit(item, f"{path}.{attr}[{key}]", target, found)


def _visit(value: Any, path: str, target: str, found: list[tuple[str, Any]]) -> None:
    if read.type_name(value) == read.ANY:
        inner = unpack(value)
        if inner is not None:
            _collect(inner, path, target, found)
    else:
        _collect(value, path, target, found)


def _plan(msg: Any, target: str) -> _Plan:
    """The fields of ``msg``'s type worth reading to find ``target``: those whose
    message type reaches ``target`` or an ``Any`` (which may hold anything)."""
    return tuple(
        (attr, shape)
        for attr, shape, sub in read.fields(msg)
        if sub is None or _reaches(sub, target)
    )


@functools.cache
def _reaches(name: str, target: str) -> bool:
    seen: set[str] = set()
    todo = [name]
    while todo:
        here = todo.pop()
        if here in (target, read.ANY):
            return True
        if here not in seen:
            seen.add(here)
            subs = read.fields_of_type(here)
            if subs is None:
                return True  # a type we cannot see through, so maybe
            todo.extend(sub if sub is not None else read.ANY for _a, _s, sub in subs)
    return False


def resources(snap: Snapshot) -> Iterator[tuple[str, Any]]:
    """Every top-level resource with its path root."""
    for c in snap.clusters:
        yield f"clusters[{c.name}]", c
    for e in snap.endpoints:
        yield f"endpoints[{e.cluster_name}]", e
    for li in snap.listeners:
        yield f"listeners[{li.name}]", li
    for rc in snap.routes:
        yield f"routes[{rc.name}]", rc


KINDS = {
    "clusters": "Cluster",
    "endpoints": "ClusterLoadAssignment",
    "listeners": "Listener",
    "routes": "RouteConfiguration",
}


def resource_of(path: str) -> str:
    """``routes[edge-80].virtual_hosts[...]`` -> ``RouteConfiguration edge-80``."""
    kind, _, rest = path.partition("[")
    name = rest.split("]", 1)[0]
    return f"{KINDS.get(kind, kind)} {name}"


def route_where(ctx: Context, ref: RouteRef) -> dict[str, Any]:
    """``file``, ``line``, ``resource`` for a finding about an xDS route."""
    origin = route_origin(ctx, ref.route)
    if origin is None:
        return {"file": "", "line": 0, "resource": resource_of(ref.path)}
    return {"file": origin[0].file, "line": origin[0].line, "resource": origin[1]}


def route_origin(ctx: Context, route: Route) -> tuple[Location, str] | None:
    """Where an xDS route came from, when it carries ``aether.io/route`` metadata.

    Only used to point a finding at YAML; no decision depends on it.
    """
    meta = route.metadata.filter_metadata.get(ROUTE_METADATA) if route.metadata else None
    if meta is None:
        return None
    fields = read.struct_json(meta)
    key = str(fields.get("httproute", "")).split("/")
    found = ctx.res.httproutes.get((key[0], key[1])) if len(key) == 2 else None
    if found is None:
        return None
    rule, match = _index(fields.get("rule")), _index(fields.get("match"))
    path = "" if rule is None else f"spec.rules[{rule}]"
    if path and match is not None:
        path += f".matches[{match}]"
    return found.meta.where(path), f"HTTPRoute {found.meta.namespace}/{found.meta.name}"


def _index(value: object) -> int | None:
    """A rule or match index from route metadata: a whole number (or its digits); None
    for anything else, which points the finding at the HTTPRoute itself."""
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def route_config_of(
    hcm: HttpConnectionManager, rds: dict[str, RouteConfiguration]
) -> RouteConfiguration | None:
    """The route configuration an HCM uses: inline, or the RDS one it names."""
    kind, _ = read.one_of(hcm, "route_specifier")
    if kind == "rds" and hcm.rds is not None:
        return rds.get(hcm.rds.route_config_name)
    return hcm.route_config if kind == "route_config" else None


def configs_by_port(snap: Snapshot) -> dict[int, tuple[list[str], list[RouteConfiguration]]]:
    """Listener names and the route configurations their HCMs use, by bound port."""
    rds = {rc.name: rc for rc in snap.routes}
    out: dict[int, tuple[list[str], list[RouteConfiguration]]] = {}
    for li in snap.listeners:
        sa = li.address.socket_address if li.address else None
        if sa is None:
            continue
        names, configs = out.setdefault(sa.port_value or 0, ([], []))
        names.append(li.name)
        for _path, hcm in hcms(li):
            rc = route_config_of(hcm, rds)
            if rc is not None:
                configs.append(rc)
    return out


def domain_name(domain: str) -> str:
    """A virtual host domain without its port, lower-cased (Host matching ignores case)."""
    host, _, port = domain.lower().rpartition(":")
    return host if host and port.isdigit() else domain.lower()


def config_users(snap: Snapshot) -> dict[int, list[HttpConnectionManager]]:
    """The HCMs using each route configuration, keyed by ``id`` of the configuration."""
    rds = {rc.name: rc for rc in snap.routes}
    out: dict[int, list[HttpConnectionManager]] = {}
    for listener in snap.listeners:
        for _path, hcm in hcms(listener):
            rc = route_config_of(hcm, rds)
            if rc is not None:
                out.setdefault(id(rc), []).append(hcm)
    return out
