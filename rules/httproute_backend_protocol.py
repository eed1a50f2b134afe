"""Clusters speak the protocol their Service port's ``appProtocol`` names.

Why it matters: GEP-1911: "``kubernetes.io/h2c`` - HTTP/2 over cleartext as described
in RFC7540" and "``kubernetes.io/ws`` - WebSocket over cleartext as described in
RFC6455"; an implementation that supports them MUST use that protocol to the backend.
An h2c backend spoken to in HTTP/1.1 rejects the request; a WebSocket handshake the
proxy will not upgrade never reaches the backend; an HTTP/1.1-only backend spoken to
in HTTP/2 fails.

How: a cluster's Service port is found from what it dials (DNS name, clusterIP,
EndpointSlice addresses and ports); cluster names are never read. Pods that several
Service ports may stand for are judged on what would be wrong for each of them. For
``kubernetes.io/h2c`` the cluster must always use HTTP/2
(``HttpProtocolOptions.explicit_http_config.http2_protocol_options``, or the legacy
``http2_protocol_options``). For
``kubernetes.io/ws`` every route forwarding to the cluster must allow WebSocket
upgrades, decided as Envoy's ``createUpgradeFilterChain`` does: a route-level
``upgrade_configs`` entry wins, else the HCM's entry (``enabled`` defaults to true);
no entry at all means no upgrade. Without an appProtocol (or ``http``, or ``ws``) the
cluster must not use HTTP/2 (explicitly, or whenever the client does).

On a sidecar's xDS (``check --xds FILE --proxy NS/WORKLOAD``) the clusters of its
routes to a Service itself (docs/mesh.md) are judged too: they speak HTTP to it.

Example: Service port ``appProtocol: kubernetes.io/h2c`` and a cluster with
``explicit_http_config: {http_protocol_options: {}}``: every request fails.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from verifier.rules.support import backends as bk
from verifier.rules.support import served as spec
from verifier.rules.support import walk

from verifier.check import Context
from verifier.findings import Finding, new
from verifier.registry import Rule

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.cluster.v3 import Cluster
    from envoy_data_plane.envoy.config.route.v3 import RouteAction
    from envoy_data_plane.envoy.extensions.filters.network.http_connection_manager.v3 import (
        HttpConnectionManager,
    )

NAME = "httproute-backend-protocol"
CODE = "EV221"
H2C, WS = "kubernetes.io/h2c", "kubernetes.io/ws"
HTTP1_PROTOCOLS = (None, "http", WS)
SPEAKS = {
    "h1": "speaks HTTP/1.1",
    "downstream": "speaks HTTP/2 only when the client does",
    "auto": "picks the protocol by ALPN",
    "h2": "forces HTTP/2",
}


def websocket_allowed(act: RouteAction, hcm: HttpConnectionManager) -> bool:
    for u in act.upgrade_configs:
        if u.upgrade_type.lower() == "websocket":
            return u.enabled is None or bool(u.enabled)
    for h in hcm.upgrade_configs:
        if h.upgrade_type.lower() == "websocket":
            return h.enabled is None or bool(h.enabled)
    return False


def _protocol_problem(cluster: Cluster, app_protocol: str | None) -> str | None:
    speaks = bk.http_protocol(cluster)
    if app_protocol == H2C and speaks != "h2":
        return f"{SPEAKS[speaks]}, expected HTTP/2 with prior knowledge (h2c)"
    if app_protocol in HTTP1_PROTOCOLS and speaks in ("h2", "downstream"):
        return f"{SPEAKS[speaks]}, expected HTTP/1.1"
    return None


def _ws_problems(ctx: Context, cluster: Cluster, refs: list[walk.RouteRef]) -> Iterator[str]:
    users = walk.config_users(ctx.snapshot)
    for ref in refs:
        act = walk.action(ref.route)
        if act is None or cluster.name not in {c for c, _ in walk.forward_clusters(act)}:
            continue
        if any(not websocket_allowed(act, hcm) for hcm in users.get(id(ref.config), [])):
            yield f"is reached by route {ref.label}, which does not allow WebSocket upgrades"


def check(ctx: Context) -> Iterable[Finding]:
    # A cluster dialling a Service port no HTTPRoute names serves another route kind
    # (a GRPCRoute's HTTP/2 cluster, say), even when that route is not in the input.
    named = spec.named_by_httproutes(ctx.res)
    if not ctx.edge_xds:
        # A sidecar's (check --proxy): its route to each Service itself (no mesh route
        # applies) speaks HTTP to the Service as much as a backendRef does.
        named |= {
            (ns, name, p.port) for (ns, name), svc in ctx.res.services.items() for p in svc.ports
        }
    clusters = bk.with_service(ctx.snapshot, ctx.res, shared=True, unjudged=ctx.unjudged.clusters)
    for cluster, found, refs in clusters:
        # Endpoints that may stand for several Service ports (pods shared, or one
        # targetPort behind several ports): a problem only if it is one for each.
        readings = found.readings or ((found.service, found.port),)
        if any(p is None for _, p in readings):
            continue
        svc, port = readings[0]
        assert port is not None
        if not any((s.meta.namespace, s.meta.name, p.port) in named for s, p in readings if p):
            continue  # no HTTPRoute sends here: another route kind's cluster
        problems = [_protocol_problem(cluster, port.app_protocol)]
        if problems[0] and not all(_protocol_problem(cluster, p.app_protocol) for _, p in readings):
            problems = [None]
        if all(p.app_protocol == WS for _, p in readings):
            problems += list(_ws_problems(ctx, cluster, refs))
        index = svc.ports.index(port)
        where = svc.meta.where(f"spec.ports[{index}]")
        for problem in filter(None, problems):
            yield new(
                CODE,
                NAME,
                file=where.file,
                line=where.line,
                resource=f"Service {svc.meta.namespace}/{svc.meta.name}",
                xds_path=f"clusters[{cluster.name}]",
                expected={"appProtocol": port.app_protocol},
                actual={"cluster": cluster.name, "problem": problem},
                backend=f"{svc.meta.namespace}/{svc.meta.name}:{port.port}",
                protocol=port.app_protocol or "unset",
                cluster=cluster.name,
                problem=problem,
            )


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("HTTPRouteBackendProtocolH2C", "HTTPRouteBackendProtocolWebSocket"),
    spec_ref="https://gateway-api.sigs.k8s.io/geps/gep-1911/",
    doc=(__doc__ or "").strip(),
    check=check,
)
