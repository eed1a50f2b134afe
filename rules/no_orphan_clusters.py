"""Every cluster in the snapshot is used by some route or mirror, or by the bootstrap.

Why it matters: an unused cluster is harmless to traffic but usually means a route that
should reach it does not (a dropped backendRef, a renamed cluster), and Envoy still
resolves, health-checks and keeps connections for it.

Referenced means: named by a route (``cluster``, ``weighted_clusters``, request mirror
policies of a route, virtual host or route configuration) of any RouteConfiguration,
RDS or inline; or named anywhere in a listener or another cluster (an ext_authz or
tcp_proxy cluster, an aggregate cluster's members, an xDS config source); or named by
the Envoy's bootstrap, which an admin config_dump shows (``BootstrapConfigDump``): the
xDS server's cluster in ``ads_config`` or a config source, stats sinks, tracing,
access-log services. Every real Envoy has at least the first, and no route names it.
A cluster that only a bootstrap a dump does not show uses is not visible here; when
routes choose clusters at request time (``cluster_header``, cluster specifier plugins)
nothing is reported.

Example: CDS has ``k8s/shop/cart-v2/8080`` but every route sends to ``cart-v1``: the
HTTPRoute's second backendRef was lost.
"""

from __future__ import annotations

from collections.abc import Iterable

from verifier.rules.support import walk

from verifier.check import Context
from verifier.findings import Finding, new
from verifier.registry import Rule
from verifier.xds import read
from verifier.xds.layout import strings
from verifier.xds.snapshot import Snapshot

NAME = "no-orphan-clusters"
CODE = "EV103"


def _route_references(snap: Snapshot) -> set[str]:
    used: set[str] = set()
    for ref in walk.routes(snap):
        act = walk.action(ref.route)
        if act is not None:
            used |= {c for c, _ in walk.forward_clusters(act)}
            used |= {p.cluster for p in act.request_mirror_policies}
    for _path, rc in walk.route_configs(snap):
        used |= {p.cluster for p in rc.request_mirror_policies}
        used |= {p.cluster for vh in rc.virtual_hosts for p in vh.request_mirror_policies}
    return used


def check(ctx: Context) -> Iterable[Finding]:
    snap = ctx.snapshot
    if walk.dynamic_cluster_choice(snap):
        return
    used = _route_references(snap) | snap.bootstrap_names
    for li in snap.listeners:
        used |= set(strings(read.to_json(li)))
    named_by: list[set[str]] | None = None  # each cluster's strings, once a name is unused
    for i, cluster in enumerate(snap.clusters):
        if cluster.name in used:
            continue
        if named_by is None:  # once, not once per unused cluster and other cluster
            named_by = [set(strings(read.to_json(c))) for c in snap.clusters]
        if any(cluster.name in names for j, names in enumerate(named_by) if j != i):
            continue
        yield new(
            CODE,
            NAME,
            resource=f"Cluster {cluster.name}",
            xds_path=f"clusters[{cluster.name}]",
            cluster=cluster.name,
        )


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("HTTPRoute",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httpbackendref",
    doc=(__doc__ or "").strip(),
    check=check,
)
