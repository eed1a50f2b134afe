"""A sidecar restores each original destination, and passes what it does not route through.

Why it matters: the sidecar's outbound listener receives every connection its capture
redirects (docs/mesh.md). It must restore the destination the client dialled (the
``original_dst`` listener filter) and pass what no chain routes through, unchanged,
to where it was sent (a ``tcp_proxy`` to an ``ORIGINAL_DST`` cluster, in cleartext as
the client sent it). A passthrough that is missing, wrapped in TLS or sent to some
cluster breaks or redirects every destination the sidecar has no chain for, which no
mesh request of the models shows (every Service port of the input has its chain); a
route that sends a mesh Service's requests to the passthrough cluster reaches its
pods in cleartext, around the mesh's mTLS, with the answers kube-proxy would give.
(A mesh Service port with no chain at all, passed through, is mesh-mtls's.)

Checked on every judged sidecar's xDS: a listener with the ``original_dst`` listener
filter; its default chain a lone ``tcp_proxy`` to an ``ORIGINAL_DST`` cluster without
transport socket; and no route of the chain for a mesh-registered Service port
(``appProtocol`` unset, ``http``, ``kubernetes.io/h2c`` or ``kubernetes.io/ws``)
forwarding to an ``ORIGINAL_DST`` cluster. The finding points at the workload.

Example: the outbound listener of mesh-apps/client whose default chain sends to
``mesh/mesh-apps/echo/80`` instead of ``passthrough``: a connection to any address
no chain names reaches echo.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator
from typing import Any

from verifier.rules.support import backends as bk
from verifier.rules.support import sidecar as sc
from verifier.rules.support import walk

from verifier.check import Context
from verifier.findings import Finding
from verifier.gatewayapi import workloads as wl
from verifier.registry import Rule
from verifier.xds import read

NAME = "mesh-passthrough"
CODE = "EV931"
ORIGINAL_DST_FILTER = "envoy.filters.listener.original_dst"
ORIGINAL_DST_TYPE = "envoy.extensions.filters.listener.original_dst.v3.OriginalDst"
ORIGINAL_DST = "ORIGINAL_DST"
# GEP-1911's HTTP protocols (and none given): what a sidecar routes by HTTP.
HTTP_APP_PROTOCOLS = (None, "http", "kubernetes.io/h2c", "kubernetes.io/ws")


def _restores(li: Any) -> bool:
    return any(
        f.name == ORIGINAL_DST_FILTER
        or (f.typed_config is not None and f.typed_config.type_url.endswith(ORIGINAL_DST_TYPE))
        for f in li.listener_filters
    )


def _matches(chain: Any, ip: str, port: int) -> bool:
    """Whether a chain's match takes connections to ``ip``:``port`` (ranges and port)."""
    fcm = chain.filter_chain_match
    if fcm is None:
        return True
    if fcm.destination_port is not None and fcm.destination_port != port:
        return False
    if not fcm.prefix_ranges:
        return True
    addr = ipaddress.ip_address(ip)
    for r in fcm.prefix_ranges:
        try:
            net = ipaddress.ip_network(f"{r.address_prefix}/{r.prefix_len or 0}", strict=False)
        except ValueError:
            continue
        if addr in net:
            return True
    return False


def _captured(ctx: Context, car: sc.Sidecar) -> Iterator[tuple[str, str, int]]:
    """(Service, ClusterIP, port) of each mesh Service port the sidecar routes by HTTP
    (every sidecar captures mesh-registered Services, with redirect-all or not)."""
    for key in sorted(ctx.res.services):
        svc = ctx.res.services[key]
        ip = svc.cluster_ip
        if not ip or ip == "None" or svc.type == "ExternalName":
            continue
        if not wl.mesh_service(ctx.res, ctx.mesh_registry, *key):
            continue  # passing a Service outside the mesh through is kube-proxy's way
        for p in svc.ports:
            if p.protocol == "TCP" and p.app_protocol in HTTP_APP_PROTOCOLS:
                yield f"{key[0]}/{key[1]}", ip, p.port


def _default_problems(car: sc.Sidecar, li: Any) -> Iterator[str]:
    chain = li.default_filter_chain
    if chain is None:
        yield "has no default filter chain: a destination no chain names is refused"
        return
    name = sc.tcp_cluster(chain)
    if name is None or not sc.only_tcp_proxy(chain):
        yield "has a default filter chain that is not a lone tcp_proxy"
        return
    cl = sc.cluster(car.snapshot, name)
    kind = bk.kind(cl) if cl is not None else ""
    if kind != ORIGINAL_DST:
        yield f"passes other destinations to cluster {name}, not to an ORIGINAL_DST cluster"
    elif cl is not None and bk.encrypts(cl):
        yield f"wraps passed-through connections in TLS (cluster {name})"


def _problems(ctx: Context, car: sc.Sidecar) -> Iterator[tuple[str, str]]:
    outbound = [li for li in car.snapshot.listeners if _restores(li)]
    if not outbound:
        yield "listeners", "has no listener restoring original destinations (original_dst)"
        return
    li = outbound[0]
    path = f"listeners[{li.name}]"
    yield from ((f"{path}.default_filter_chain", p) for p in _default_problems(car, li))
    routed = bk.routed_clusters(car.snapshot)
    for svc, ip, port in _captured(ctx, car):
        chains = [c for c in li.filter_chains if _matches(c, ip, port)]
        for route in _to_original_dst(car, chains[:1], routed):
            problem = (
                f"routes mesh Service {svc} at {ip}:{port} to the passthrough (route "
                f"{route}): it leaves the pod in cleartext"
            )
            yield f"{path}.filter_chains", problem


def _to_original_dst(
    car: sc.Sidecar, chains: list[Any], routed: dict[str, list[walk.RouteRef]]
) -> Iterator[str]:
    """The routes of ``chains``' route tables that forward to an ORIGINAL_DST cluster."""
    tables = {
        hcm.rds.route_config_name
        for chain in chains
        for f in chain.filters
        if read.is_a(hcm := walk.unpack(f.typed_config), walk.HCM) and hcm.rds is not None
    }
    for name, refs in sorted(routed.items()):
        cl = sc.cluster(car.snapshot, name)
        if cl is None or bk.kind(cl) != ORIGINAL_DST:
            continue
        yield from sorted({r.label for r in refs if r.config.name in tables})


def check(ctx: Context) -> Iterable[Finding]:
    for car in sc.judged(ctx):
        for path, problem in _problems(ctx, car):
            yield sc.finding(ctx, CODE, NAME, car, path, problem)


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("Mesh",),
    spec_ref="docs/mesh.md#the-sidecars-xds-reference-translator-translate---proxy-nsworkload",
    doc=(__doc__ or "").strip(),
    check=check,
    reads_models=True,
)
