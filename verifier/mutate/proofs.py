"""Equivalence proofs: a mutant is equivalent only when no request can tell it apart.

Each prover first verifies what the mutant changed (see ``mutate.scope``) and returns True
only for a proven case; everything else is False. The proofs:

- unused: the changed route configuration is used by no listener, or the changed cluster is
  named by no route, listener or other cluster (and none picks clusters dynamically);
- same match: a route's match changed to one accepting exactly the same requests (a case flag
  on a value without letters or on a regex, reordered or duplicated conditions);
- droppable route: the changed route can be removed from the original *and* from the mutant
  without effect (it is shadowed by an earlier route, or a later route with the same action
  takes all its requests), so both equal the virtual host without it;
- swap: the two routes accept no common request, have the same action, or one of them is
  shadowed by the routes before both;
- weights: the normalised share of every distinct backend entry is unchanged;
- retarget: the new cluster is configured like the old one, with the same endpoints, and no
  header formatter can reveal cluster names;
- timeouts: only dropping an explicit 15s route timeout (Envoy's default) is harmless;
- mirrors: dropping or retargeting a mirror whose fraction is 0, or changing a fraction to
  one with the same effective probability;
- ignore_port_in_host_matching: irrelevant when every domain of the configuration is ``*``.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable
from fractions import Fraction
from functools import cache

from envoy_data_plane.envoy.config.cluster.v3 import ClusterDiscoveryType
from envoy_data_plane.envoy.config.route.v3 import (
    Route,
    RouteAction,
    RouteActionRequestMirrorPolicy,
    VirtualHost,
    WeightedCluster,
    WeightedClusterClusterWeight,
)
from envoy_data_plane.envoy.type.v3 import FractionalPercentDenominatorType

from verifier.mutate.algebra import (
    canonical_route,
    droppable,
    matches_disjoint,
    same_action,
    shadowed,
)
from verifier.mutate.core import Mutant
from verifier.mutate.scope import (
    VhostScope,
    changed_route,
    cluster_scope,
    cluster_tcp_only,
    cluster_unreferenced,
    facts,
    has_formatters,
    rc_scope,
    rc_unreferenced,
    route_index,
    vhost_scope,
)
from verifier.xds.snapshot import Snapshot, resource_name

ENVOY_DEFAULT_ROUTE_TIMEOUT = datetime.timedelta(seconds=15)


def _observable(original: Snapshot, *routes: Route) -> Callable[[], bool]:
    """Whether route or cluster names may reach a request through a header formatter.

    Lazy, since it serialises routes: proofs first try with names treated as observable.
    """

    @cache
    def check() -> bool:
        return facts(original).formatters or any(has_formatters(r) for r in routes)

    return check


def _droppable(routes: list[Route], i: int, observable: Callable[[], bool]) -> bool:
    return droppable(routes, i, names_observable=True) or (
        not observable() and droppable(routes, i, names_observable=False)
    )


def _same_action(a: Route, b: Route, observable: Callable[[], bool]) -> bool:
    return same_action(a, b, names_observable=True) or (
        not observable() and same_action(a, b, names_observable=False)
    )


def prove_unused_rc(original: Snapshot, mutant: Mutant) -> bool:
    scope = rc_scope(original, mutant.snapshot, mutant.xds_path)
    return scope is not None and rc_unreferenced(original, scope.name)


def _inert(vh: VirtualHost) -> bool:
    """A virtual host that answers every request 404 and adds nothing: no routes, no
    TLS redirect, no headers, as Envoy answers a Host that no virtual host takes."""
    return not (
        vh.routes or vh.require_tls or vh.response_headers_to_add or vh.typed_per_filter_config
    )


def _suffix_covers(general: str, specific: str) -> bool:
    """Suffix wildcard ``general`` matches every host ``specific`` matches."""
    return specific.endswith(general[1:]) and len(specific) >= len(general)


def _takes_over(other: str, dropped: str) -> bool:
    """Would domain ``other`` get some host that ``dropped`` took (more specific
    ones stay where they were)? Exact < suffix < prefix < '*' in Envoy's order."""
    if other == "*" or other.endswith("*"):
        return dropped != "*"
    if other.startswith("*"):
        if dropped.startswith("*"):
            return _suffix_covers(other, dropped) and other != dropped
        return _suffix_covers(other, "x" + dropped) or dropped.endswith(other[1:])
    return False  # an exact domain takes only its own host, which was its own before


def prove_domain_change(original: Snapshot, mutant: Mutant) -> bool:
    """Unused route configuration, or a domain dropped from / '*' added to a
    virtual host that answers everything 404 (``_inert``) where no other virtual
    host would take its hosts: every request gets the same 404 either way."""
    if prove_unused_rc(original, mutant):
        return True
    scope = rc_scope(original, mutant.snapshot, mutant.xds_path)
    if scope is None:
        return False
    before = {vh.name: vh for vh in scope.before.virtual_hosts}
    after = {vh.name: vh for vh in scope.after.virtual_hosts}
    changed = [n for n in before.keys() | after.keys() if before.get(n) != after.get(n)]
    if len(changed) != 1 or not _inert(before.get(changed[0]) or after[changed[0]]):
        return False
    name = changed[0]
    old = set(before[name].domains) if name in before else set()
    new = set(after[name].domains) if name in after else set()
    others = [d for n, vh in after.items() if n != name for d in vh.domains]
    if new - old:
        return new - old == {"*"} and "*" not in others
    return all(not _takes_over(o, d) for d in old - new for o in others)


def prove_unused_cluster(original: Snapshot, mutant: Mutant) -> bool:
    name = cluster_scope(original, mutant.snapshot, mutant.xds_path)
    return name is not None and cluster_unreferenced(original, name)


def prove_no_http_to_cluster(original: Snapshot, mutant: Mutant) -> bool:
    """The changed cluster is unused, or only plain tcp_proxy filters use it (a sidecar's
    passthrough and inbound clusters): its upstream HTTP protocol is never spoken."""
    name = cluster_scope(original, mutant.snapshot, mutant.xds_path)
    return name is not None and (
        cluster_unreferenced(original, name) or cluster_tcp_only(original, name)
    )


def _hostless(snap: Snapshot, name: str, hostless: frozenset[str]) -> bool:
    """The cluster has no host to send to: an empty assignment, or DNS names that
    resolve to Services with no ready endpoint (``hostless``, from the Resources)."""
    cluster = next((c for c in snap.clusters if c.name == name), None)
    if cluster is None or cluster.cluster_type is not None:
        return False
    kind = cluster.type if cluster.type is not None else ClusterDiscoveryType.STATIC
    assignment = cluster.load_assignment
    if kind == ClusterDiscoveryType.EDS:
        service = cluster.eds_cluster_config.service_name if cluster.eds_cluster_config else ""
        assignment = next(
            (e for e in snap.endpoints if resource_name(e) == (service or name)), assignment
        )
    elif kind not in (
        ClusterDiscoveryType.STATIC,
        ClusterDiscoveryType.STRICT_DNS,
        ClusterDiscoveryType.LOGICAL_DNS,
    ):
        return False
    hosts = [
        lb.endpoint.address.socket_address.address.lower().rstrip(".")
        for loc in (assignment.endpoints if assignment else [])
        for lb in loc.lb_endpoints
        if lb.endpoint and lb.endpoint.address and lb.endpoint.address.socket_address
    ]
    dns = kind != ClusterDiscoveryType.STATIC and kind != ClusterDiscoveryType.EDS
    return all(dns and h in hostless for h in hosts)


def prove_hostless_cluster(original: Snapshot, mutant: Mutant, hostless: frozenset[str]) -> bool:
    """One cluster changed that has no host to send to, before and after: every request
    routed to it gets Envoy's 503 either way, however it would have connected."""
    name = cluster_scope(original, mutant.snapshot, mutant.xds_path)
    return (
        name is not None
        and _hostless(original, name, hostless)
        and _hostless(mutant.snapshot, name, hostless)
    )


def _local(original: Snapshot, mutant: Mutant) -> tuple[VhostScope, int] | None:
    scope = vhost_scope(original, mutant.snapshot, mutant.xds_path)
    if scope is None:
        return None
    i = changed_route(scope, mutant.xds_path)
    return None if i is None else (scope, i)


def prove_route_local(original: Snapshot, mutant: Mutant) -> bool:
    """A change inside one route: same match semantics, or the route is droppable both ways."""
    if prove_unused_rc(original, mutant):
        return True
    found = _local(original, mutant)
    if found is None:
        return False
    scope, i = found
    a, b = scope.before[i], scope.after[i]
    if canonical_route(a) == canonical_route(b):
        return True
    obs = _observable(original, b)
    return _droppable(scope.before, i, obs) and _droppable(scope.after, i, obs)


def prove_swap(original: Snapshot, mutant: Mutant) -> bool:
    """Routes i and i+1 swapped: disjoint, same action, or one shadowed by earlier routes."""
    if prove_unused_rc(original, mutant):
        return True
    scope = vhost_scope(original, mutant.snapshot, mutant.xds_path)
    i = route_index(mutant.xds_path)
    if scope is None or i is None or i + 1 >= len(scope.before):
        return False
    before = scope.before
    a, b = before[i], before[i + 1]
    if scope.after != [*before[:i], b, a, *before[i + 2 :]]:
        return False
    return (
        matches_disjoint(a.match, b.match)
        or _same_action(a, b, _observable(original))
        or shadowed(before, i)
        or shadowed([*before[:i], b], i)
    )


def prove_drop_route(original: Snapshot, mutant: Mutant) -> bool:
    if prove_unused_rc(original, mutant):
        return True
    scope = vhost_scope(original, mutant.snapshot, mutant.xds_path)
    i = route_index(mutant.xds_path)
    if scope is None or i is None or i >= len(scope.before):
        return False
    if scope.after != [*scope.before[:i], *scope.before[i + 1 :]]:
        return False
    return _droppable(scope.before, i, _observable(original))


def _only_action_field(a: Route, b: Route, name: str) -> bool:
    """Routes equal except for ``route.<name>`` (both with a route action)."""
    if a.route is None or b.route is None:
        return False
    ca, cb = copy.copy(a), copy.copy(b)
    ca.route, cb.route = copy.copy(a.route), copy.copy(b.route)
    setattr(ca.route, name, None)
    setattr(cb.route, name, None)
    return ca == cb


def _action_pair(
    original: Snapshot, mutant: Mutant, name: str
) -> tuple[RouteAction, RouteAction] | None:
    """The route actions before and after, when the mutant changed only ``route.<name>``."""
    pair = _changed_pair(original, mutant)
    if pair is None or not _only_action_field(*pair, name):
        return None
    a, b = pair
    assert a.route is not None and b.route is not None
    return a.route, b.route


def _changed_pair(original: Snapshot, mutant: Mutant) -> tuple[Route, Route] | None:
    found = _local(original, mutant)
    if found is None:
        return None
    scope, i = found
    return scope.before[i], scope.after[i]


# --- weights -------------------------------------------------------------------------------------


def weight_shares(
    wc: WeightedCluster,
) -> list[tuple[WeightedClusterClusterWeight, Fraction]] | None:
    """Each distinct entry (ignoring its weight) with its share of the total, if fixed.

    None when weights can be overridden at runtime, or when the deprecated ``total_weight``
    is set (the sum must then match it: any change is a NACK).
    """
    if wc.total_weight or wc.runtime_key_prefix:
        return None
    total = sum(c.weight or 0 for c in wc.clusters)
    if total <= 0:
        return None
    out: list[tuple[WeightedClusterClusterWeight, Fraction]] = []
    for c in wc.clusters:
        key = copy.copy(c)
        key.weight = None
        share = Fraction(c.weight or 0, total)
        for k, (other, s) in enumerate(out):
            if other == key:
                out[k] = (other, s + share)
                break
        else:
            out.append((key, share))
    return [(k, s) for k, s in out if s]


def same_shares(a: WeightedCluster, b: WeightedCluster) -> bool:
    sa, sb = weight_shares(a), weight_shares(b)
    if sa is None or sb is None or len(sa) != len(sb):
        return False
    return all(any(ka == kb and fa == fb for kb, fb in sb) for ka, fa in sa)


def prove_weights(original: Snapshot, mutant: Mutant) -> bool:
    if prove_route_local(original, mutant):
        return True
    actions = _action_pair(original, mutant, "weighted_clusters")
    if actions is None:
        return False
    wa, wb = actions[0].weighted_clusters, actions[1].weighted_clusters
    return wa is not None and wb is not None and same_shares(wa, wb)


# --- retargeting ---------------------------------------------------------------------------------


def _retargeted(a: Route, b: Route) -> tuple[str, str] | None:
    """(old, new) when b is a with exactly one cluster reference renamed."""
    ra, rb = a.route, b.route
    if ra is None or rb is None:
        return None
    found: list[tuple[str, str]] = []
    if ra.cluster != rb.cluster:
        found.append((ra.cluster or "", rb.cluster or ""))
    wa, wb = ra.weighted_clusters, rb.weighted_clusters
    if wa is not None and wb is not None and len(wa.clusters) == len(wb.clusters):
        found += [
            (x.name, y.name)
            for x, y in zip(wa.clusters, wb.clusters, strict=True)
            if x.name != y.name
        ]
    pa, pb = ra.request_mirror_policies, rb.request_mirror_policies
    if len(pa) == len(pb):
        found += [
            (x.cluster, y.cluster) for x, y in zip(pa, pb, strict=True) if x.cluster != y.cluster
        ]
    if len(found) != 1 or not all(found[0]):
        return None
    old, new = found[0]
    # Undo the rename in a copy of b: it must give back a exactly.
    undone = copy.deepcopy(b)
    assert undone.route is not None
    if undone.route.cluster == new and ra.cluster == old:
        undone.route.cluster = old
    for x in undone.route.weighted_clusters.clusters if undone.route.weighted_clusters else []:
        if x.name == new:
            x.name = old
    for y in undone.route.request_mirror_policies:
        if y.cluster == new:
            y.cluster = old
    return (old, new) if undone == a else None


def interchangeable(snap: Snapshot, x: str, y: str) -> bool:
    """Clusters x and y exist, are configured alike and have the same endpoints."""
    cx = [c for c in snap.clusters if c.name == x]
    cy = [c for c in snap.clusters if c.name == y]
    if len(cx) != 1 or len(cy) != 1:
        return False
    a, b = copy.deepcopy(cx[0]), copy.deepcopy(cy[0])
    a.name = b.name = ""
    for c in (a, b):
        if c.load_assignment is not None:
            c.load_assignment.cluster_name = ""
    if a != b:
        return False
    if a.eds_cluster_config is None or a.eds_cluster_config.service_name:
        return True  # static/DNS endpoints compared above; or the same EDS service name
    ex = [e for e in snap.endpoints if resource_name(e) == x]
    ey = [e for e in snap.endpoints if resource_name(e) == y]
    if len(ex) != len(ey) or len(ex) > 1:
        return False
    if not ex:
        return True
    la, lb = copy.copy(ex[0]), copy.copy(ey[0])
    la.cluster_name = lb.cluster_name = ""
    return la == lb


def prove_retarget(original: Snapshot, mutant: Mutant) -> bool:
    if prove_route_local(original, mutant):
        return True
    pair = _changed_pair(original, mutant)
    names = _retargeted(*pair) if pair is not None else None
    if pair is None or names is None or not interchangeable(original, *names):
        return False
    return not _observable(original, *pair)()


# --- timeouts and mirrors ------------------------------------------------------------------------


def prove_drop_timeout(original: Snapshot, mutant: Mutant) -> bool:
    if prove_route_local(original, mutant):
        return True
    actions = _action_pair(original, mutant, "timeout")
    return (
        actions is not None
        and actions[0].timeout == ENVOY_DEFAULT_ROUTE_TIMEOUT
        and actions[1].timeout is None
    )


def prove_method_case(original: Snapshot, mutant: Mutant) -> bool:
    """Ignoring case on a `:method` matcher whose value is upper-case changes
    nothing: Envoy 1.40's HTTP/1 codec upper-cases every request method (checked
    on the real binary: `put` is routed as `PUT`)."""
    if prove_route_local(original, mutant):
        return True
    pair = _changed_pair(original, mutant)
    if pair is None or pair[0].match is None or pair[1].match is None:
        return False
    before, after = pair[0].match.headers, pair[1].match.headers
    if len(before) != len(after):
        return False
    changed = [(x, y) for x, y in zip(before, after, strict=True) if x != y]
    if len(changed) != 1:
        return False
    x, y = changed[0]
    exact = x.string_match.exact if x.string_match is not None else None
    return (
        x.name == ":method"
        and exact is not None
        and exact == exact.upper()
        and y.string_match is not None
        and y.string_match.exact == exact
    )


def _deadline(route: Route) -> float:
    """When the client gets its 504: with no retries, the route timeout and the
    per-try timeout act as one deadline (0 disables a timeout; no route timeout
    means Envoy's 15 s)."""
    action = route.route
    assert action is not None
    total = ENVOY_DEFAULT_ROUTE_TIMEOUT if action.timeout is None else action.timeout
    limits = [t.total_seconds() for t in (total,) if t.total_seconds() > 0]
    retry = action.retry_policy
    if (
        retry is not None
        and retry.per_try_timeout is not None
        and retry.per_try_timeout.total_seconds() > 0
    ):
        limits.append(retry.per_try_timeout.total_seconds())
    return min(limits) if limits else float("inf")


def _no_retries(route: Route) -> bool:
    retry = route.route.retry_policy if route.route is not None else None
    return retry is None or (not retry.retry_on and not retry.retriable_status_codes)


def prove_same_deadline(original: Snapshot, mutant: Mutant) -> bool:
    """A timeout change is unobservable when, with no retries, min(route timeout,
    per-try timeout) is unchanged (e.g. a route timeout raised above the per-try one)."""
    if prove_route_local(original, mutant) or prove_drop_timeout(original, mutant):
        return True
    pair = _changed_pair(original, mutant)
    if pair is None:
        return False
    a, b = pair
    if a.route is None or b.route is None or not (_no_retries(a) and _no_retries(b)):
        return False
    ca, cb = copy.copy(a), copy.copy(b)
    ca.route, cb.route = copy.copy(a.route), copy.copy(b.route)
    for c in (ca, cb):
        assert c.route is not None
        c.route.timeout = None
        c.route.retry_policy = None
    return ca == cb and _deadline(a) == _deadline(b)


DENOMINATORS = {
    FractionalPercentDenominatorType.HUNDRED: 100,
    FractionalPercentDenominatorType.TEN_THOUSAND: 10_000,
    FractionalPercentDenominatorType.MILLION: 1_000_000,
}


def mirror_probability(p: RouteActionRequestMirrorPolicy) -> Fraction | None:
    """The share of requests mirrored, when no runtime override can change it."""
    rf = p.runtime_fraction
    if rf is None:
        return Fraction(1)
    if rf.runtime_key or rf.default_value is None:
        return None
    denominator = DENOMINATORS.get(rf.default_value.denominator)
    if denominator is None:
        return None
    return min(Fraction(1), Fraction(rf.default_value.numerator, denominator))


def mirrors_equivalent(
    before: list[RouteActionRequestMirrorPolicy], after: list[RouteActionRequestMirrorPolicy]
) -> bool:
    """One mirror policy dropped or changed, without effect on what gets mirrored where.

    Dropping or changing (cluster included) a mirror that never fires on either side, or
    changing only its fraction to one with the same effective probability.
    """
    if len(before) == len(after) + 1:
        return any(
            [*before[:k], *before[k + 1 :]] == after and mirror_probability(p) == 0
            for k, p in enumerate(before)
        )
    if len(before) != len(after):
        return False
    diffs = [(x, y) for x, y in zip(before, after, strict=True) if x != y]
    if len(diffs) != 1:
        return False
    x, y = diffs[0]
    px, py = mirror_probability(x), mirror_probability(y)
    if px == 0 and py == 0:
        return True
    cx, cy = copy.copy(x), copy.copy(y)
    cx.runtime_fraction = cy.runtime_fraction = None
    return cx == cy and px is not None and px == py


def prove_mirror(original: Snapshot, mutant: Mutant) -> bool:
    """A mirror change that cannot change what is mirrored (see ``mirrors_equivalent``)."""
    if prove_route_local(original, mutant):
        return True
    actions = _action_pair(original, mutant, "request_mirror_policies")
    if actions is None:
        return False
    return mirrors_equivalent(
        actions[0].request_mirror_policies, actions[1].request_mirror_policies
    )


def prove_retarget_mirror(original: Snapshot, mutant: Mutant) -> bool:
    return prove_retarget(original, mutant) or prove_mirror(original, mutant)


# --- route-configuration level -------------------------------------------------------------------


def prove_ignore_port(original: Snapshot, mutant: Mutant) -> bool:
    """Host ports cannot change the virtual host chosen when every domain is ``*``."""
    scope = rc_scope(original, mutant.snapshot, mutant.xds_path)
    if scope is None:
        return False
    if rc_unreferenced(original, scope.name):
        return True
    a, b = copy.copy(scope.before), copy.copy(scope.after)
    a.ignore_port_in_host_matching = b.ignore_port_in_host_matching = False
    domains = [d for vh in scope.before.virtual_hosts for d in vh.domains]
    return a == b and all(d == "*" for d in domains)
