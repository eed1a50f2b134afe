"""Mutation operators on where a selected route sends requests, and its policies.

Backends (cluster, weighted split, mirrors), timeouts, direct responses and upgrades; each
operator's doc says which rule should catch it and when a mutant is provably equivalent.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from typing import Any

from envoy_data_plane.envoy.config.core.v3 import RuntimeFractionalPercent
from envoy_data_plane.envoy.config.route.v3 import Route, RouteActionRequestMirrorPolicy
from envoy_data_plane.envoy.type.v3 import FractionalPercent

from verifier.mutate.core import (
    Edit,
    Nav,
    Operator,
    on_routes,
    pop_item,
    route_action,
    set_field,
    weighted_entry,
)
from verifier.mutate.proofs import (
    DENOMINATORS,
    mirror_probability,
    prove_mirror,
    prove_retarget,
    prove_retarget_mirror,
    prove_route_local,
    prove_same_deadline,
    prove_weights,
)
from verifier.xds.snapshot import Snapshot

# --- backends ------------------------------------------------------------------------------------


def _other_cluster(snap: Snapshot, current: str) -> str | None:
    names = sorted({c.name for c in snap.clusters} - {current})
    later = [n for n in names if n > current]
    options = later or names
    return options[0] if options else None


def _retarget(snap: Snapshot, r: Route) -> Iterator[Edit]:
    if r.route is None:
        return
    if r.route.cluster:
        new = _other_cluster(snap, r.route.cluster)
        if new:
            yield Edit(
                ".route.cluster",
                f"cluster {r.route.cluster} -> {new}",
                set_field(route_action, "cluster", new),
            )
    wc = r.route.weighted_clusters
    for k, c in enumerate(wc.clusters if wc else []):
        new = _other_cluster(snap, c.name)
        if new:
            yield Edit(
                f".route.weighted_clusters.clusters[{k}].name",
                f"{c.name} -> {new}",
                set_field(weighted_entry(k), "name", new),
            )


def _swap_weights(snap: Snapshot, r: Route) -> Iterator[Edit]:
    wc = r.route.weighted_clusters if r.route else None
    entries = wc.clusters if wc else []
    for k in range(len(entries) - 1):
        a, b = entries[k].weight or 0, entries[k + 1].weight or 0
        if a != b:

            def apply(x: Route, k: int = k, a: int = a, b: int = b) -> None:
                weighted_entry(k)(x).weight, weighted_entry(k + 1)(x).weight = b, a

            yield Edit(
                f".route.weighted_clusters.clusters[{k}].weight",
                f"weights {a},{b} of clusters[{k}],[{k + 1}] swapped",
                apply,
            )


def _zero_weight(snap: Snapshot, r: Route) -> Iterator[Edit]:
    wc = r.route.weighted_clusters if r.route else None
    entries = wc.clusters if wc else []
    positive = [k for k, c in enumerate(entries) if (c.weight or 0) > 0]
    if len(positive) < 2:
        return  # zeroing the only weight would be an invalid (all-zero) split
    for k in positive:
        yield Edit(
            f".route.weighted_clusters.clusters[{k}].weight",
            f"weight {entries[k].weight} of {entries[k].name} -> 0",
            set_field(weighted_entry(k), "weight", 0),
        )


def _retarget_mirror(snap: Snapshot, r: Route) -> Iterator[Edit]:
    for k, p in enumerate(r.route.request_mirror_policies if r.route else []):
        new = _other_cluster(snap, p.cluster) if p.cluster else None
        if new:
            yield Edit(
                f".route.request_mirror_policies[{k}].cluster",
                f"{p.cluster} -> {new}",
                set_field(_mirror(k), "cluster", new),
            )


def _mirror(k: int) -> Nav:
    def nav(r: Route) -> Any:
        return route_action(r).request_mirror_policies[k]

    return nav


def _direct_status(snap: Snapshot, r: Route) -> Iterator[Edit]:
    if r.direct_response is not None:
        old = r.direct_response.status
        new = 503 if old == 500 else 500

        def apply(x: Route) -> None:
            assert x.direct_response is not None
            x.direct_response.status = new

        yield Edit(".direct_response.status", f"status {old} -> {new}", apply)


def _drop_upgrade(snap: Snapshot, r: Route) -> Iterator[Edit]:
    for k, u in enumerate(r.route.upgrade_configs if r.route else []):
        yield Edit(
            f".route.upgrade_configs[{k}]",
            f"{u.upgrade_type} upgrade config dropped",
            pop_item(route_action, "upgrade_configs", k),
        )


# --- mirrors and timeouts ------------------------------------------------------------------------


def _drop_mirror(snap: Snapshot, r: Route) -> Iterator[Edit]:
    for k, p in enumerate(r.route.request_mirror_policies if r.route else []):
        yield Edit(
            f".route.request_mirror_policies[{k}]",
            f"mirror to {p.cluster} dropped",
            pop_item(route_action, "request_mirror_policies", k),
        )


def altered_fraction(p: RuntimeFractionalPercent | None) -> RuntimeFractionalPercent:
    """Half the mirrored share (or 50% when it was 0): a wrong percentage."""
    if p is None or p.default_value is None:
        return RuntimeFractionalPercent(default_value=FractionalPercent(numerator=50))
    d = p.default_value
    numerator = d.numerator // 2 if d.numerator else DENOMINATORS.get(d.denominator, 100) // 2
    return RuntimeFractionalPercent(
        default_value=FractionalPercent(numerator=numerator, denominator=d.denominator),
        runtime_key=p.runtime_key,
    )


def _mirror_fraction(snap: Snapshot, r: Route) -> Iterator[Edit]:
    for k, p in enumerate(r.route.request_mirror_policies if r.route else []):
        new = altered_fraction(p.runtime_fraction)
        old = mirror_probability(p)
        now = mirror_probability(RouteActionRequestMirrorPolicy(runtime_fraction=new))
        yield Edit(
            f".route.request_mirror_policies[{k}].runtime_fraction",
            f"mirrored share {old} -> {now}",
            set_field(_mirror(k), "runtime_fraction", new),
        )


def altered_timeout(t: datetime.timedelta) -> datetime.timedelta:
    return t * 2 if t else datetime.timedelta(seconds=1)


def _retry(r: Route) -> Any:
    return route_action(r).retry_policy


def _timeouts(
    nav: Nav, owner_of: Callable[[Route], Any], where: str, drop: bool
) -> Callable[[Snapshot, Route], Iterator[Edit]]:
    field = where.rsplit(".", 1)[-1]

    def edits(snap: Snapshot, r: Route) -> Iterator[Edit]:
        owner = owner_of(r)
        value = getattr(owner, field, None) if owner is not None else None
        if value is None:
            return
        new = None if drop else altered_timeout(value)
        yield Edit(f".{where}", f"{field} {value} -> {new}", set_field(nav, field, new))

    return edits


def _route_action(r: Route) -> Any:
    return r.route


def _per_try_owner(r: Route) -> Any:
    return r.route.retry_policy if r.route else None


OPERATORS: tuple[Operator, ...] = (
    Operator(
        "retarget-cluster",
        "A route (or weighted entry) sent to another existing cluster: wrong backend. "
        "The backend rules (attached-rules-rendered, httproute-backend-weights) should "
        "catch it. Equivalent when both clusters are configured alike with the same "
        "endpoints and no header formatter can reveal cluster names.",
        on_routes(_retarget),
        prove_retarget,
    ),
    Operator(
        "swap-weights",
        "Two different weights of a weighted split swapped. httproute-backend-weights "
        "should catch it. Equivalent when every distinct entry keeps its normalised share.",
        on_routes(_swap_weights),
        prove_weights,
    ),
    Operator(
        "zero-weight",
        "One positive weight of a split set to 0: that backend gets no traffic. "
        "httproute-backend-weights should catch it. Equivalent as for swap-weights.",
        on_routes(_zero_weight),
        prove_weights,
    ),
    Operator(
        "alter-direct-response",
        "A direct response status changed (500 <-> 503). httproute-backend-weights / "
        "attached-rules-rendered should catch it.",
        on_routes(_direct_status),
        prove_route_local,
    ),
    Operator(
        "drop-upgrade-config",
        "A route's upgrade config (WebSocket) dropped: upgrades are refused. The backend "
        "protocol rule should catch it.",
        on_routes(_drop_upgrade),
        prove_route_local,
    ),
    Operator(
        "drop-mirror",
        "A request mirror policy dropped. httproute-request-mirror should catch it. "
        "Equivalent when its fraction is provably 0 (no runtime key).",
        on_routes(_drop_mirror),
        prove_mirror,
    ),
    Operator(
        "alter-mirror-fraction",
        "A mirror's fraction halved (or set to 50% when 0). httproute-request-mirror "
        "should catch it. Equivalent when the effective probability is unchanged.",
        on_routes(_mirror_fraction),
        prove_mirror,
    ),
    Operator(
        "retarget-mirror",
        "A mirror sent to another existing cluster. httproute-request-mirror should catch "
        "it. Equivalent as for retarget-cluster, or when the mirror never fires (fraction 0).",
        on_routes(_retarget_mirror),
        prove_retarget_mirror,
    ),
    Operator(
        "alter-route-timeout",
        "A route timeout doubled (0 -> 1s). httproute-timeouts should catch it. "
        "Equivalent when, with no retries, min(route, per-try timeout) is unchanged.",
        on_routes(_timeouts(route_action, _route_action, "route.timeout", drop=False)),
        prove_same_deadline,
    ),
    Operator(
        "drop-route-timeout",
        "A route timeout removed (Envoy's default 15s applies). httproute-timeouts should "
        "catch it. Equivalent when the effective deadline is unchanged (e.g. it was 15s).",
        on_routes(_timeouts(route_action, _route_action, "route.timeout", drop=True)),
        prove_same_deadline,
    ),
    Operator(
        "alter-per-try-timeout",
        "A per-try (backendRequest) timeout doubled. httproute-timeouts should catch it. "
        "Equivalent when the effective deadline is unchanged.",
        on_routes(
            _timeouts(_retry, _per_try_owner, "route.retry_policy.per_try_timeout", drop=False)
        ),
        prove_same_deadline,
    ),
    Operator(
        "drop-per-try-timeout",
        "A per-try (backendRequest) timeout removed. httproute-timeouts should catch it. "
        "Equivalent when the effective deadline is unchanged.",
        on_routes(
            _timeouts(_retry, _per_try_owner, "route.retry_policy.per_try_timeout", drop=True)
        ),
        prove_same_deadline,
    ),
)
