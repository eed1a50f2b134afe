"""Listener, cluster and route configuration names, and domains, are unique.

Why it matters: Envoy refuses duplicates, and the whole update with them: LDS "duplicate
listener {} found", CDS "duplicate cluster {} found" (a static bootstrap: "cluster
manager: duplicate cluster '...'"), RDS "Unexpected RDS resource length: 2" for two
route configurations of one name; and within a RouteConfiguration "Only unique values
for domains are permitted. Duplicate entry of domain {} in route {}" (domains compare
case-insensitively; a second ``*`` is "Only a single wildcard domain is permitted"),
across virtual hosts or within one. Checked with ``envoy --mode validate`` 1.40 where
a static bootstrap can show it. Duplicate virtual host names are accepted by Envoy
1.40, so they are not reported.

Example: two HTTPRoutes' hosts ``Shop.example.com`` and ``shop.example.com`` rendered
as two virtual hosts of ``edge-80``: the domain is used twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from verifier.rules.support import walk

from verifier.check import Context
from verifier.findings import Finding, new
from verifier.registry import Rule

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.route.v3 import RouteConfiguration

NAME = "unique-names"
CODE = "EV603"


def _duplicates(kind: str, names: list[str], path: str) -> Iterable[Finding]:
    for name, count in sorted(Counter(names).items()):
        if count > 1:
            yield new(
                CODE,
                NAME,
                resource=f"{kind} {name}",
                xds_path=path.format(name=name),
                actual={"count": count},
                kind=kind,
                name=name,
                count=count,
            )


def _domains(base: str, rc: RouteConfiguration) -> Iterable[Finding]:
    """Each repeated domain, at its second entry (where Envoy stops)."""
    where: dict[str, list[str]] = {}
    for vh in rc.virtual_hosts:
        for j, domain in enumerate(vh.domains):
            path = f"{base}.virtual_hosts[{vh.name}].domains[{j}]"
            where.setdefault(domain.lower(), []).append(path)
    for domain, paths in sorted(where.items()):
        if len(paths) > 1:
            yield new(
                CODE,
                NAME,
                resource=f"RouteConfiguration {rc.name}",
                xds_path=paths[1],
                actual={"count": len(paths), "entries": paths},
                kind=f"RouteConfiguration {rc.name} domain",
                name=domain,
                count=len(paths),
            )


def check(ctx: Context) -> Iterable[Finding]:
    snap = ctx.snapshot
    yield from _duplicates("Listener", [li.name for li in snap.listeners], "listeners[{name}]")
    yield from _duplicates("Cluster", [c.name for c in snap.clusters], "clusters[{name}]")
    names = [rc.name for rc in snap.routes]
    yield from _duplicates("RouteConfiguration", names, "routes[{name}]")
    for base, rc in walk.route_configs(snap):
        yield from _domains(base, rc)


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("Gateway",),
    spec_ref="https://www.envoyproxy.io/docs/envoy/v1.40.0/api-docs/xds_protocol",
    doc=(__doc__ or "").strip(),
    check=check,
)
