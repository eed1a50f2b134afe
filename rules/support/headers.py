"""Header mutations in route configurations, and the ones Envoy refuses.

Checked against ``envoy --mode validate`` (1.40): adding or removing a header whose
name starts with ``:`` or is ``host`` (any case), in requests or responses, at route
configuration, virtual host, route or weighted-cluster level, is refused with
":-prefixed or host headers may not be modified" (``..._to_add``) or "... may not be
removed" (``..._to_remove``), whether or not the route also rewrites the Host.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from verifier.rules.support import walk

from verifier.xds import read
from verifier.xds.snapshot import Snapshot

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    pass

HOST_HEADERS = frozenset({"host", ":authority"})
FIELDS = (
    "request_headers_to_add",
    "request_headers_to_remove",
    "response_headers_to_add",
    "response_headers_to_remove",
)


@dataclass(frozen=True)
class Mutation:
    path: str  # xds_path of the entry
    field: str  # one of FIELDS
    name: str
    value: str | None  # None for removals
    route: walk.RouteRef | None  # the route it belongs to (route or weighted-cluster level)

    @property
    def protected(self) -> bool:
        return self.name.startswith(":") or self.name.lower() == "host"

    @property
    def verb(self) -> str:
        return "removed" if self.field.endswith("remove") else "modified"


def _of(owner: object, base: str, route: walk.RouteRef | None) -> Iterator[Mutation]:
    for field in FIELDS:
        for i, entry in enumerate(getattr(owner, field, [])):
            path = f"{base}.{field}[{i}]"
            if read.is_a(entry, "envoy.config.core.v3.HeaderValueOption"):
                header = entry.header
                key, value = (header.key, header.value) if header is not None else ("", "")
                yield Mutation(path, field, key, value, route)
            else:
                yield Mutation(path, field, str(entry), None, route)


def mutations(snap: Snapshot) -> Iterator[Mutation]:
    for base, rc in walk.route_configs(snap):
        yield from _of(rc, base, None)
        for vh in rc.virtual_hosts:
            yield from _of(vh, f"{base}.virtual_hosts[{vh.name}]", None)
    for ref in walk.routes(snap):
        yield from _of(ref.route, ref.path, ref)
        act = walk.action(ref.route)
        wc = act.weighted_clusters if act is not None else None
        weighted = wc.clusters if wc is not None else []
        for i, cw in enumerate(weighted):
            yield from _of(cw, f"{ref.path}.route.weighted_clusters.clusters[{i}]", ref)


def host_rewrite(ref: walk.RouteRef) -> str | None:
    """The RouteAction field that rewrites the Host, if any."""
    act = walk.action(ref.route)
    if act is None:
        return None
    kind, value = read.one_of(act, "host_rewrite_specifier")
    if not kind or (kind == "auto_host_rewrite" and not value):
        return None
    return kind


def rewrite_conflict(mutation: Mutation) -> bool:
    """A request Host change on a route that also rewrites the Host (host-rewrite-with-
    host-header reports it; envoy-invalid-values reports every other protected one)."""
    return (
        mutation.route is not None
        and mutation.field.startswith("request")
        and mutation.name.lower() in HOST_HEADERS
        and host_rewrite(mutation.route) is not None
    )
