"""What the sidecar-shape rules share: each judged sidecar, and its listeners read as Envoy does.

The rules ``mesh-inbound-mtls`` and ``mesh-passthrough`` judge the parts of a sidecar's
xDS no mesh request of the spec model reaches: the inbound tunnel listener (another
client's calls to this workload) and the outbound passthrough (destinations no chain
names). What each workload should have comes from the input's deployment facts
(``verifier.gatewayapi.workloads``), never from the translator or the controller.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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
    from envoy_data_plane.envoy.config.listener.v3 import FilterChain, Listener

TCP_PROXY = "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
DOWNSTREAM_TLS = "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"


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


def port_of(li: Listener) -> int | None:
    sock = li.address.socket_address if li.address is not None else None
    return None if sock is None else sock.port_value or 0


def listeners_on(snap: Snapshot, port: int) -> list[Listener]:
    return [li for li in snap.listeners if port_of(li) == port]


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


def downstream_tls(chain: FilterChain) -> Any:
    ts = chain.transport_socket
    found = walk.unpack(ts.typed_config) if ts is not None else None
    return found if read.is_a(found, DOWNSTREAM_TLS) else None


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
