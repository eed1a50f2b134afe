"""Each judged sidecar with its workload, and its filter chains' tcp_proxy read as Envoy does.

For the rules that judge a part of a sidecar's xDS no mesh request reaches (the
outbound passthrough: ``mesh-passthrough``). What each workload should have comes
from the input's deployment facts (``verifier.gatewayapi.workloads``), never from the
translator or the controller.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from verifier.rules.support import walk

from verifier.check import Context
from verifier.findings import Finding, new
from verifier.gatewayapi import model as m
from verifier.gatewayapi import workloads as wl
from verifier.semantics.request import Source
from verifier.xds import read
from verifier.xds.snapshot import Snapshot

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.cluster.v3 import Cluster
    from envoy_data_plane.envoy.config.listener.v3 import FilterChain

TCP_PROXY = "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"


@dataclass(frozen=True)
class Sidecar:
    source: Source
    workload: m.Workload
    snapshot: Snapshot

    @property
    def proxy(self) -> str:
        return self.source.line()


def judged(ctx: Context) -> Iterator[Sidecar]:
    """Every sidecar whose xDS this check judges, with its workload."""
    for source, snap in sorted(ctx.mesh.sidecars.items()):
        found = wl.workload(ctx.res, source.namespace, source.workload)
        if found is not None:
            yield Sidecar(source, found, snap)


def tcp_cluster(chain: FilterChain | None) -> str | None:
    """The one cluster a chain's tcp_proxy connects to (None: no tcp_proxy, or
    weighted clusters)."""
    for f in chain.filters if chain is not None else ():
        tcp = walk.unpack(f.typed_config)
        if read.is_a(tcp, TCP_PROXY):
            kind, value = read.one_of(tcp, "cluster_specifier")
            return value if kind == "cluster" and isinstance(value, str) else None
    return None


def only_tcp_proxy(chain: FilterChain | None) -> bool:
    """A chain whose one network filter is a tcp_proxy: bytes pass unchanged."""
    return chain is not None and len(chain.filters) == 1 and tcp_cluster(chain) is not None


def cluster(snap: Snapshot, name: str) -> Cluster | None:
    return next((c for c in snap.clusters if c.name == name), None)


def finding(
    ctx: Context, code: str, rule: str, car: Sidecar, xds_path: str, problem: str
) -> Finding:
    """A finding at the workload whose sidecar it is."""
    where = car.workload.meta.where()
    meta = car.workload.meta
    return new(
        code,
        rule,
        file=where.file,
        line=where.line,
        resource=f"{meta.kind} {meta.namespace}/{meta.name}",
        xds_path=xds_path,
        actual={"problem": problem},
        proxy=car.proxy,
        problem=problem,
        trust_domain=ctx.trust_domain,
    )
