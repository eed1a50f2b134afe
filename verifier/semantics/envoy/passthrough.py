"""What an HTTP request gets from a filter chain that ends in ``tcp_proxy``.

tcp_proxy is no HTTP proxy: it connects to a host of its cluster and copies bytes
both ways, so the request reaches that host exactly as the client wrote it (no Host
handling, no header changes, no routes) and the host's answer comes back as is.
When there is no host to connect to (a missing cluster, no endpoint, a refused
connection or a failed handshake: tcp_proxy.cc "Creating connection to cluster",
then "no healthy host for TCP connection pool"), the downstream connection is
closed: no HTTP response at all (``NO_RESPONSE``), not a 503.

With ``weighted_clusters`` each connection goes to one cluster by weight: the
shares of the clusters that have a host are reported as backends; a share that
would be closed is noted (an Outcome has no "share without a response").
"""

from __future__ import annotations

from verifier.semantics.envoy.actions import BackendReply
from verifier.semantics.envoy.clusters import ClusterResolver
from verifier.semantics.envoy.downstream import Downstream
from verifier.semantics.envoy.listeners import TcpProxy
from verifier.semantics.request import Backend, Forwarded, Outcome, Request, evolve

NO_RESPONSE = 0


def tcp_outcome(
    request: Request,
    tcp: TcpProxy,
    resolver: ClusterResolver,
    conn: Downstream,
    reply: BackendReply | None,
    trace: list[str],
) -> Outcome:
    shares: dict[Backend, int] = {}
    closed = 0
    notes: list[str] = []
    for name, weight in tcp.clusters:
        if weight <= 0:
            continue
        target = resolver.target_for(name, conn)
        notes += target.notes
        trace += target.trace
        if target.backend is None or target.unavailable:
            closed += weight
            what = "does not exist" if target.backend is None else "has no host to connect to"
            trace.append(f"tcp_proxy: cluster {name!r} {what}")
            continue
        key = evolve(target.backend, weight=1)
        shares[key] = shares.get(key, 0) + weight
        trace.append(
            f"tcp_proxy: cluster {name!r} -> {key.namespace}/{key.name}:{key.port}; "
            "the request passes unchanged"
        )
    if not shares:
        trace.append("tcp_proxy closes the connection: no HTTP response")
        return Outcome(NO_RESPONSE, notes=tuple(notes))
    if closed:
        notes.append(f"tcp_proxy: a share of {closed} of the connections is closed unanswered")
    backends = tuple(sorted(evolve(b, weight=w) for b, w in shares.items()))
    headers = tuple((k, v) for k, v in request.headers if k != "host")
    forwarded = Forwarded(request.method, request.host, request.path, headers)
    status = (reply.status if reply is not None else None) or 200
    return Outcome(status, backends=backends, request=forwarded, notes=tuple(notes))
