"""A RouteAction's upstream side: which clusters, in what shares, mirrors, timeouts.

Weights are reported as configured (a backend's share is its weight over the total,
the missing clusters' weight included), merged when several clusters reach the same
Service port. A weighted cluster is picked per request before any host is: one with
no host to send to answers its share "no healthy upstream" (503, UH) whatever the
others have, so that share is ``unavailable_weight``, as is a missing cluster's
answered 503.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from verifier.semantics.envoy.clusters import ClusterResolver
from verifier.semantics.envoy.downstream import Downstream
from verifier.semantics.envoy.headers import HeaderParser, header_parser
from verifier.semantics.envoy.match import parts_per_million
from verifier.semantics.request import Backend, evolve
from verifier.xds.enums import RouteActionClusterNotFoundResponseCode

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.route.v3 import (
        RetryPolicy,
        RouteAction,
        RouteActionRequestMirrorPolicy,
        RouteConfiguration,
        VirtualHost,
    )

NotFound = RouteActionClusterNotFoundResponseCode

# RouteAction.cluster_not_found_response_code: "The HTTP status code to use when
# configured cluster is not found. The default response code is 503 Service Unavailable."
CLUSTER_NOT_FOUND_STATUS: dict[int, int] = {
    NotFound.SERVICE_UNAVAILABLE: 503,
    NotFound.NOT_FOUND: 404,
    NotFound.INTERNAL_SERVER_ERROR: 500,
}
# A cluster with no host to send to: Envoy's router answers "no healthy upstream"
# (UH), and a connection refused by a Service without endpoints fails the same way.
NO_HEALTHY_UPSTREAM_STATUS = 503
# RouteAction.timeout: "If not specified, the default is 15s. ... A value of 0 will
# disable the route's timeout." Reported as None (the proxy's default) when unset.
DEFAULT_ROUTE_TIMEOUT_MS = 15_000


@dataclass
class Upstream:
    """Where a routed request goes; ``status`` is what the client sees if it goes nowhere."""

    status: int
    backends: tuple[Backend, ...] = ()
    invalid_weight: int = 0
    unavailable_weight: int = 0  # the share answered 503: no host, or a missing cluster
    host_literal: str | None = None  # weighted cluster host_rewrite_literal
    dns_host: str | None = None  # for auto_host_rewrite
    request_headers: list[HeaderParser] = field(default_factory=list)
    response_headers: list[HeaderParser] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)


def _shares(shares: dict[Backend, int]) -> tuple[Backend, ...]:
    return tuple(sorted(evolve(b, weight=w) for b, w in shares.items()))


class Upstreams:
    """``upstream`` per route action, worked out once when the request cannot change
    it (no ``cluster_header``, no ORIGINAL_DST cluster): check asks it for every
    witness a route forwards. The Upstreams it returns are shared: read them, never
    change them."""

    def __init__(self, resolver: ClusterResolver) -> None:
        self.resolver = resolver
        self._known: dict[int, tuple[RouteAction, Upstream]] = {}
        self._per_connection: dict[int, bool] = {}

    def of(
        self, action: RouteAction, headers: dict[str, str], conn: Downstream | None = None
    ) -> Upstream:
        if action.cluster_header or self._depends_on_connection(action):
            return upstream(action, self.resolver, headers, conn)
        known = self._known.get(id(action))
        if known is None or known[0] is not action:
            known = self._known[id(action)] = (action, upstream(action, self.resolver, headers))
        return known[1]

    def _depends_on_connection(self, action: RouteAction) -> bool:
        found = self._per_connection.get(id(action))
        if found is None:
            names = clusters_named(action) or frozenset()
            found = any(self.resolver.depends_on_connection(n) for n in names)
            self._per_connection[id(action)] = found
        return found


def upstream(
    action: RouteAction,
    resolver: ClusterResolver,
    headers: dict[str, str],
    conn: Downstream | None = None,
) -> Upstream:
    code = action.cluster_not_found_response_code or NotFound.SERVICE_UNAVAILABLE
    missing_status = CLUSTER_NOT_FOUND_STATUS.get(int(code), 503)
    if action.weighted_clusters is not None:
        return _weighted(action, resolver, missing_status, conn, headers)
    name = action.cluster
    if action.cluster_header:
        name = headers.get(action.cluster_header.lower(), "").split(",")[0]
        note = f"cluster_header {action.cluster_header!r} names cluster {name!r}"
        out = _single(name, resolver, missing_status, conn, headers)
        out.notes.append(note)
        return out
    if not name:
        out = Upstream(missing_status)
        out.notes.append("cluster specifier not modelled (plugin)")
        return out
    return _single(name, resolver, missing_status, conn, headers)


def _single(
    name: str,
    resolver: ClusterResolver,
    missing_status: int,
    conn: Downstream | None,
    headers: dict[str, str],
) -> Upstream:
    target = resolver.target_for(name, conn, headers)
    if target.backend is None:
        # As in a weighted list: a missing cluster answered 500 is an invalid backend's
        # share (here all of it), which is how other implementations write invalid
        # backendRefs (cluster_not_found_response_code: INTERNAL_SERVER_ERROR).
        invalid = 1 if missing_status == 500 else 0
        out = Upstream(missing_status, invalid_weight=invalid, notes=list(target.notes))
        out.trace.append(f"cluster {name!r} does not exist: {missing_status}")
        return out
    if target.unavailable:
        out = Upstream(NO_HEALTHY_UPSTREAM_STATUS, unavailable_weight=1, notes=list(target.notes))
        out.trace += target.trace
        out.trace.append(f"cluster {name!r} has no healthy host: {NO_HEALTHY_UPSTREAM_STATUS}")
        return out
    out = Upstream(200, (target.backend,), dns_host=target.dns_host, notes=list(target.notes))
    b = target.backend
    out.trace.append(f"cluster {name!r} -> {b.namespace}/{b.name}:{b.port}")
    out.trace += target.trace
    return out


def _weighted(
    action: RouteAction,
    resolver: ClusterResolver,
    missing_status: int,
    conn: Downstream | None,
    headers: dict[str, str],
) -> Upstream:
    wc = action.weighted_clusters
    assert wc is not None
    out = Upstream(200)
    shares: dict[Backend, int] = {}
    invalid = unavailable = 0
    first: tuple[object, ...] | None = None
    for cw in wc.clusters:
        weight = cw.weight or 0
        if weight <= 0:
            out.trace.append(f"weighted cluster {cw.name!r} has weight 0: never used")
            continue
        if cw.cluster_header:
            out.notes.append(f"weighted cluster_header {cw.cluster_header!r} not modelled")
            continue
        target = resolver.target_for(cw.name, conn, headers)
        out.notes += target.notes
        if target.backend is None:
            invalid += weight
            out.trace.append(f"weighted cluster {cw.name!r} ({weight}) does not exist")
            continue
        key = evolve(target.backend, weight=1)
        if target.unavailable:
            unavailable += weight
            out.trace += target.trace
            out.trace.append(
                f"weighted cluster {cw.name!r} ({weight}) -> {key.namespace}/{key.name} has "
                f"no healthy host: its share gets {NO_HEALTHY_UPSTREAM_STATUS}"
            )
            continue
        shares[key] = shares.get(key, 0) + weight
        out.trace.append(f"weighted cluster {cw.name!r} ({weight}) -> {key.namespace}/{key.name}")
        out.trace += target.trace
        label = f"weighted cluster {cw.name}"
        req = header_parser(
            label, cw.request_headers_to_add, cw.request_headers_to_remove, request=True
        )
        resp = header_parser(
            label, cw.response_headers_to_add, cw.response_headers_to_remove, request=False
        )
        # What the cluster does to a forwarded request, its label aside.
        mods = (req.to_add, req.to_remove, resp.to_add, resp.to_remove, cw.host_rewrite_literal)
        if first is None:
            out.request_headers, out.response_headers = [req], [resp]
            out.host_literal = cw.host_rewrite_literal or None
            out.dns_host = target.dns_host
            first = mods
        elif mods != first:
            out.notes.append(
                "weighted clusters modify headers differently; the first cluster's are shown"
            )
    if wc.header_name or wc.use_hash_policy:
        out.notes.append("weighted cluster selection by header/hash not modelled")
    if invalid and missing_status not in (500, NO_HEALTHY_UPSTREAM_STATUS):
        out.notes.append(
            f"a share of the traffic names a missing cluster and is answered {missing_status}"
        )
    out.invalid_weight = invalid if missing_status == 500 else 0
    out.unavailable_weight = unavailable + (
        invalid if missing_status == NO_HEALTHY_UPSTREAM_STATUS else 0
    )
    if not shares and not unavailable:
        out.status = missing_status
        out.trace.append(f"no weighted cluster exists: {missing_status}")
        return out
    if not shares:
        out.status = NO_HEALTHY_UPSTREAM_STATUS
        out.trace.append(f"no weighted cluster has a healthy host: {NO_HEALTHY_UPSTREAM_STATUS}")
        return out
    out.backends = _shares(shares)
    return out


def clusters_named(action: RouteAction) -> frozenset[str] | None:
    """Every cluster ``upstream`` and ``mirrors`` may ask the resolver about for this
    action (its own mirror policies; not the virtual host's or the configuration's),
    or None when a request header names the cluster. Over, never under: check
    --baseline digests exactly these clusters for the requests this route answers."""
    if action.cluster_header:
        return None
    names = {action.cluster or "", *(p.cluster for p in action.request_mirror_policies)}
    if action.weighted_clusters is not None:
        names |= {cw.name for cw in action.weighted_clusters.clusters}
    return frozenset(names - {""})


def mirrors(
    action: RouteAction, vhost: VirtualHost, rc: RouteConfiguration, resolver: ClusterResolver
) -> tuple[tuple[Backend, ...], list[str]]:
    """request_mirror_policies of the most specific level that has any (route, virtual
    host, route configuration), each with its share in parts per million."""
    policies: list[RouteActionRequestMirrorPolicy] = list(
        action.request_mirror_policies
        or vhost.request_mirror_policies
        or rc.request_mirror_policies
    )
    out: dict[Backend, int] = {}
    notes: list[str] = []
    for p in policies:
        ppm = parts_per_million(p.runtime_fraction.default_value) if p.runtime_fraction else 10**6
        if p.cluster_header:
            notes.append(f"mirror cluster_header {p.cluster_header!r} not modelled")
            continue
        target = resolver.target(p.cluster)
        if target.backend is None:
            notes.append(f"mirror cluster {p.cluster!r} does not exist: nothing is mirrored")
            continue
        if ppm == 0:
            notes.append(f"mirror to {p.cluster!r} at 0%: never mirrored")
            continue
        b = target.backend
        key = evolve(b, weight=1)
        out[key] = max(out.get(key, 0), ppm)
    return tuple(sorted(evolve(b, weight=w) for b, w in out.items())), notes


def _ms(value: timedelta | None) -> int | None:
    if value is None:
        return None
    return round(value.total_seconds() * 1000)


def timeouts(action: RouteAction, vhost: VirtualHost) -> tuple[int | None, int | None]:
    """(route timeout, per-try timeout) in ms. RouteAction.retry_policy: "if this is set,
    it'll take precedence over the virtual host level retry policy entirely"."""
    retry: RetryPolicy | None = action.retry_policy or vhost.retry_policy
    return _ms(action.timeout), _ms(retry.per_try_timeout) if retry is not None else None


def upstream_deadline_ms(request_ms: int | None, backend_ms: int | None) -> int | None:
    """How long Envoy waits for a backend before answering 504; None: forever."""
    route = DEFAULT_ROUTE_TIMEOUT_MS if request_ms is None else request_ms
    limits = [t for t in (route, backend_ms) if t]
    return min(limits) if limits else None
