"""Mutation operators and equivalence proofs (verifier.mutate).

Three layers: every operator on the fixture snapshots (coverage, determinism, purity, and
Envoy accepting the mutants); hand-built snapshots where equivalence is known by
construction; and properties that hold the match algebra and the proofs to a brute-force
reference matcher written here, independently of the code under test.
"""

from __future__ import annotations

import copy
import datetime
import itertools
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import re2
from conftest import valid_scenarios
from envoy_data_plane.envoy.config.cluster.v3 import Cluster, ClusterDiscoveryType
from envoy_data_plane.envoy.config.core.v3 import (
    Address,
    AggregatedConfigSource,
    ApiVersion,
    ConfigSource,
    HeaderValue,
    HeaderValueOption,
    RuntimeFractionalPercent,
    SocketAddress,
)
from envoy_data_plane.envoy.config.endpoint.v3 import (
    ClusterLoadAssignment,
    Endpoint,
    LbEndpoint,
    LocalityLbEndpoints,
)
from envoy_data_plane.envoy.config.listener.v3 import Filter, FilterChain, Listener
from envoy_data_plane.envoy.config.route.v3 import (
    HeaderMatcher,
    QueryParameterMatcher,
    Route,
    RouteAction,
    RouteActionRequestMirrorPolicy,
    RouteConfiguration,
    RouteMatch,
    VirtualHost,
    WeightedCluster,
    WeightedClusterClusterWeight,
)
from envoy_data_plane.envoy.extensions.filters.network.http_connection_manager.v3 import (
    HttpConnectionManager,
    Rds,
)
from envoy_data_plane.envoy.type.matcher.v3 import RegexMatcher, StringMatcher
from envoy_data_plane.envoy.type.v3 import FractionalPercent
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from verifier.mutate import algebra as mm
from verifier.mutate.catalog import (
    MAX_SITES,
    OPERATORS,
    Mutant,
    equivalent,
    mutants,
    with_peers,
)
from verifier.mutate.core import RouteRef, Site, select, with_route
from verifier.mutate.regex_prefixes import (
    regex_any_after,
    regex_literal,
    regex_prefixes,
    regex_segment_prefix,
)
from verifier.xds.codec import pack_any
from verifier.xds.snapshot import Snapshot, dumps, envoy_validate, find_envoy, load_path

# --- fixture snapshots ---------------------------------------------------------------------------


def golden_scenarios() -> list[Path]:
    return [s for s in valid_scenarios() if (s / "xds.routes.golden.json").is_file()]


@cache
def fixture_snapshots() -> tuple[tuple[str, Snapshot], ...]:
    """The checked-in xDS of every valid scenario (the translator's output, from any source)."""
    return tuple((s.name, load_path(s)[0]) for s in golden_scenarios())


@cache
def fixture_mutants() -> tuple[tuple[str, Snapshot, tuple[Mutant, ...]], ...]:
    return tuple((name, snap, tuple(mutants(snap))) for name, snap in fixture_snapshots())


def test_registry_names_and_docs() -> None:
    names = [op.name for op in OPERATORS]
    assert len(set(names)) == len(names)
    assert len(names) >= 15
    for op in OPERATORS:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", op.name), op.name
        assert len(op.doc) > 40, op.name


# Two sidecars' checked-in xDS (translate --proxy), each mutated beside the other's:
# a consumer's (mesh-client) and a producer's workload, which mesh clients call.
SIDECARS = (
    ("mesh-consumer-route", "mesh-client", "client"),
    ("mesh-consumer-route", "mesh-apps", "echo-v1"),
)
# Sidecar operators no fixture has a site for: every fixture's Service ports reach
# targetPort 3000, so no two inbound chains differ (tests/test_mutate_sidecars.py
# builds one where they do).
NO_FIXTURE_SITE = {"inbound-swap-sni", "inbound-swap-target"}


def sidecar_golden(scenario: str, namespace: str, workload: str) -> Snapshot:
    """A sidecar's goldens (xds.<ns>.<workload>.<type>.golden.json), loaded as one snapshot."""
    root = Path(__file__).resolve().parent.parent / "fixtures" / scenario
    with tempfile.TemporaryDirectory() as tmp:
        for t in ("listeners", "clusters", "routes", "endpoints"):
            found = root / f"xds.{namespace}.{workload}.{t}.golden.json"
            if found.is_file():
                shutil.copy(found, Path(tmp) / f"xds.{t}.golden.json")
        return load_path(tmp)[0]


@cache
def sidecar_mutants() -> tuple[Mutant, ...]:
    snaps = {f"{ns}/{wl}": sidecar_golden(scn, ns, wl) for scn, ns, wl in SIDECARS}
    out: list[Mutant] = []
    for who, snap in snaps.items():
        peers = {k: v for k, v in snaps.items() if k != who}
        out += mutants(snap, operators=with_peers(peers))
    return tuple(out)


def test_every_operator_fires_on_some_fixture() -> None:
    fired = {m.operator for _, _, ms in fixture_mutants() for m in ms}
    fired |= {m.operator for m in sidecar_mutants()}
    assert fired == {op.name for op in OPERATORS} - NO_FIXTURE_SITE


def test_pure_and_deterministic() -> None:
    """From a fresh load: the same mutants in the same order, each different from the
    original, and the original unchanged after generating and judging all of them."""
    for scenario, (name, _, cached) in zip(golden_scenarios(), fixture_mutants(), strict=True):
        original = load_path(scenario)[0]
        before = dumps(original)
        fresh = mutants(original)
        for m in fresh:
            assert m.snapshot != original, (name, m.operator, m.xds_path)
            equivalent(original, m)
        assert dumps(original) == before, name
        assert [(m.operator, m.xds_path, m.detail) for m in fresh] == [
            (m.operator, m.xds_path, m.detail) for m in cached
        ], name
        assert all(a.snapshot == b.snapshot for a, b in zip(fresh, cached, strict=True)), name


def test_sites_are_capped_and_spread() -> None:
    for _, _, ms in fixture_mutants():
        per_op: dict[str, int] = {}
        for m in ms:
            per_op[m.operator] = per_op.get(m.operator, 0) + 1
        assert max(per_op.values()) <= MAX_SITES
    sites = [Site(str(i), "", lambda: Snapshot()) for i in range(50)]
    chosen = [s.xds_path for s in select(sites, 5)]
    assert chosen == ["0", "10", "20", "30", "40"]
    assert select(sites[:3], 5) == sites[:3]


_PATH = re.compile(r"^(routes|clusters|listeners)\[[^\[\]]+\]")


def test_paths_name_their_resource() -> None:
    for _, _, ms in fixture_mutants():
        for m in ms:
            assert _PATH.match(m.xds_path), m.xds_path
            assert m.detail


def test_fixture_equivalences_hold_by_brute_force() -> None:
    """Every route-order or match mutant proven equivalent on a fixture survives a reference
    check on requests built from the conditions of the vhost's routes."""
    checked = 0
    for name, snap, ms in fixture_mutants():
        for m in ms:
            matching = m.operator.startswith(
                ("swap-", "drop-route", "prefix-", "case-", "fractional-")
            )
            # Timeout proofs are about deadlines, which this matcher does not model.
            if matching and "timeout" not in m.operator and equivalent(snap, m):
                assert _same_everywhere(snap, m.snapshot), (name, m.xds_path)
                checked += 1
    assert checked > 50


def _domain_probes(snap: Snapshot) -> list[tuple[int, str, str | None]]:
    """(port, Host, SNI) for a host of every domain of every route configuration, on
    every port and server name of the listeners, plus a host no domain names."""
    hosts = {"unmatched.invalid"}
    for rc in snap.routes:
        for vh in rc.virtual_hosts:
            for d in vh.domains:
                hosts.add("any.invalid" if d == "*" else d.replace("*", "w", 1))
    probes = []
    for li in snap.listeners:
        port = (
            li.address.socket_address.port_value if li.address and li.address.socket_address else 0
        )
        names = [
            n
            for c in li.filter_chains
            if c.filter_chain_match
            for n in c.filter_chain_match.server_names
        ]
        for host in sorted(hosts):
            probes.append((port, host, None))
            probes += [(port, host, n.replace("*", "w", 1)) for n in names]
    return probes


def test_domain_equivalences_hold_on_every_host() -> None:
    """A domain dropped from, or '*' added to, a virtual host that answers everything
    404, when proven equivalent: the Envoy model answers every probe (a host of each
    domain, on every port and server name, plain and over TLS) as on the original."""
    from verifier.semantics.directory import BackendDirectory
    from verifier.semantics.envoy.model import EnvoyModel
    from verifier.semantics.request import Request

    checked = 0
    for name, snap, ms in fixture_mutants():
        probes = _domain_probes(snap)
        before = EnvoyModel(snap, BackendDirectory.build([], []))
        for m in ms:
            if m.operator not in ("drop-domain", "add-wildcard-domain") or not equivalent(snap, m):
                continue
            after = EnvoyModel(m.snapshot, BackendDirectory.build([], []))
            for port, host, sni in probes:
                for scheme in ("http", "https"):
                    req = Request(scheme=scheme, host=host, port=port, path="/", sni=sni)
                    a = before.evaluate(req, trace=False).outcome
                    b = after.evaluate(req, trace=False).outcome
                    assert (a.status, a.backends, a.redirect) == (
                        b.status,
                        b.backends,
                        b.redirect,
                    ), (
                        name,
                        m.detail,
                        req,
                    )
            checked += 1
    assert checked >= 6


@pytest.mark.skipif(find_envoy() is None, reason="no envoy binary")
def test_envoy_accepts_one_mutant_per_operator() -> None:
    first: dict[str, Mutant] = {}
    for _, _, ms in fixture_mutants():
        for m in ms:
            first.setdefault(m.operator, m)
    for m in sidecar_mutants():
        first.setdefault(m.operator, m)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda m: (m, envoy_validate(m.snapshot)), first.values()))
    bad = [f"{m.operator} {m.xds_path}: {out[-300:]}" for m, (ok, out) in results if not ok]
    assert not bad, "\n".join(bad)


# --- a reference matcher (independent of verifier.mutate.algebra) ----------------------------


@dataclass(frozen=True)
class Req:
    path: str
    headers: tuple[tuple[str, str], ...] = ()  # lower-case name, joined value
    query: tuple[tuple[str, str], ...] = ()  # name, first value


def _string_ok(sm: StringMatcher, value: str) -> bool | None:
    def f(x: str) -> str:
        return x.lower() if sm.ignore_case else x

    if sm.safe_regex is not None:
        return re2.fullmatch(sm.safe_regex.regex, value) is not None

    if sm.exact is not None:
        return f(value) == f(sm.exact)
    if sm.prefix is not None:
        return f(value).startswith(f(sm.prefix))
    if sm.suffix is not None:
        return f(value).endswith(f(sm.suffix))
    return None


def accepts(m: RouteMatch, req: Req) -> bool | None:
    """Envoy's route matching on ASCII requests; None for what this reference does not model."""
    fold = m.case_sensitive is False

    def f(x: str) -> str:
        return x.lower() if fold else x

    path = f(req.path)
    if m.path is not None:
        ok = path == f(m.path)
    elif m.prefix is not None:
        ok = path.startswith(f(m.prefix))
    elif m.path_separated_prefix is not None:
        p = f(m.path_separated_prefix)
        ok = path == p or path.startswith(p + "/")
    elif m.safe_regex is not None:  # whole-path match; case_sensitive does not apply
        ok = re2.fullmatch(m.safe_regex.regex, req.path) is not None
    else:
        return None
    headers, query = dict(req.headers), dict(req.query)
    for h in m.headers:
        value = headers.get(h.name.lower())
        if value is None and not h.treat_missing_header_as_empty:
            hit: bool | None = h.invert_match
        elif h.string_match is None:
            return None
        else:
            r = _string_ok(h.string_match, value or "")
            hit = None if r is None else r != h.invert_match
        if hit is None:
            return None
        ok = ok and hit
    for q in m.query_parameters:
        first = query.get(q.name)
        if q.present_match is not None:
            ok = ok and (first is not None) == q.present_match
        elif q.string_match is None:
            return None
        else:
            r = first is not None and _string_ok(q.string_match, first)
            if r is None:
                return None
            ok = ok and r
    return ok


def _share(m: RouteMatch) -> float:
    """The share of matching requests a route takes (runtime_fraction's default)."""
    if m.runtime_fraction is None or m.runtime_fraction.default_value is None:
        return 1.0
    v = m.runtime_fraction.default_value
    return min(1.0, v.numerator / {0: 100, 1: 10_000, 2: 1_000_000}[int(v.denominator)])


def selected(routes: list[Route], req: Req) -> list[Route | None] | str:
    """Every answer the request may get: the first matching route without its match,
    then, while that route takes only a share of requests, the next one (None: no
    route); "?" if unknown."""
    found: list[Route | None] = []
    for r in routes:
        m = r.match or RouteMatch()
        hit = accepts(m, req)
        if hit is None:
            return "?"
        share = _share(m)
        if hit and share > 0:
            out = copy.copy(r)
            out.match, out.name, out.metadata = None, "", None
            found.append(out)
            if share >= 1:
                return found
    return [*found, None]


def same_answers(a: list[Route | None] | str, b: list[Route | None] | str) -> bool:
    """The same possible answers, in any order and number."""
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return all(x in b for x in a) and all(x in a for x in b)


def _values(sm: StringMatcher | None) -> list[str]:
    if sm is None:
        return []
    v = next((x for x in (sm.exact, sm.prefix, sm.suffix) if x is not None), None)
    return [] if v is None else [v, v + "x", v.swapcase()]


def requests_for(routes: list[Route]) -> Iterator[Req]:
    """Requests exercising every path value and header/query value the routes mention."""
    paths = {"/", "/zz"}
    hdrs: dict[str, set[str]] = {}
    qs: dict[str, set[str]] = {}
    for r in routes:
        m = r.match or RouteMatch()
        values = [m.path, m.prefix, m.path_separated_prefix]
        if m.safe_regex is not None:
            values += [p + "1" for p in regex_prefixes(m.safe_regex.regex) or ()]
        for v in values:
            if v is not None:
                paths |= {v, v + "/", v + "/x", v + "x", v.swapcase(), v.rstrip("/") or "/"}
        for h in m.headers:
            values = _values(h.string_match)
            if h.name.lower() == ":method":
                # Envoy's codec upper-cases methods: `get` never reaches the router.
                values = [v.upper() for v in values]
            hdrs.setdefault(h.name.lower(), set()).update(values)
        for q in m.query_parameters:
            qs.setdefault(q.name, set()).update(_values(q.string_match) or ["1"])
    names = sorted(hdrs)[:4]
    qnames = sorted(qs)[:2]
    h_opts = [[None, *sorted(hdrs[n])] for n in names]
    q_opts = [[None, *sorted(qs[n])] for n in qnames]
    for path in sorted(paths):
        for hv in itertools.product(*h_opts):
            for qv in itertools.product(*q_opts):
                yield Req(
                    path,
                    tuple((n, v) for n, v in zip(names, hv, strict=True) if v is not None),
                    tuple((n, v) for n, v in zip(qnames, qv, strict=True) if v is not None),
                )


def _involved(a: list[Route], b: list[Route]) -> list[Route]:
    """The routes a mutant moved, changed or dropped (requests are built from these)."""
    if len(a) == len(b):
        return [r for k in range(len(a)) if a[k] != b[k] for r in (a[k], b[k])]
    longer, shorter = (a, b) if len(a) > len(b) else (b, a)
    k = next((k for k in range(len(shorter)) if longer[k] != shorter[k]), len(shorter))
    return longer[k : k + 2]


def _same_everywhere(original: Snapshot, mutant: Snapshot) -> bool:
    for rc_a, rc_b in zip(original.routes, mutant.routes, strict=True):
        for va, vb in zip(rc_a.virtual_hosts, rc_b.virtual_hosts, strict=True):
            if va == vb:
                continue
            for req in requests_for(_involved(va.routes, vb.routes)):
                a, b = selected(va.routes, req), selected(vb.routes, req)
                if "?" not in (a, b) and not same_answers(a, b):
                    return False
    return True


# --- hand-built snapshots ------------------------------------------------------------------------


def cluster(name: str, host: str | None = None) -> Cluster:
    address = Address(socket_address=SocketAddress(address=host or f"{name}.ns.svc", port_value=80))
    return Cluster(
        name=name,
        type=ClusterDiscoveryType.STRICT_DNS,
        load_assignment=ClusterLoadAssignment(
            cluster_name=name,
            endpoints=[
                LocalityLbEndpoints(lb_endpoints=[LbEndpoint(endpoint=Endpoint(address=address))])
            ],
        ),
    )


def listener(rc: str = "rc") -> Listener:
    source = ConfigSource(ads=AggregatedConfigSource(), resource_api_version=ApiVersion.V3)
    hcm = HttpConnectionManager(
        stat_prefix="x", rds=Rds(config_source=source, route_config_name=rc)
    )
    chain = FilterChain(filters=[Filter(name="hcm", typed_config=pack_any(hcm))])
    return Listener(name="l", filter_chains=[chain])


def rt(cluster_name: str = "a", name: str = "", **match: object) -> Route:
    return Route(name=name, match=RouteMatch(**match), route=RouteAction(cluster=cluster_name))  # type: ignore[arg-type]


def hdr(name: str, exact: str, **kw: object) -> HeaderMatcher:
    return HeaderMatcher(name=name, string_match=StringMatcher(exact=exact, **kw))  # type: ignore[arg-type]


def snap(
    *routes: Route,
    rc: str = "rc",
    clusters: tuple[Cluster, ...] | None = None,
    domain: str = "example.com",
    ignore_port: bool = False,
) -> Snapshot:
    """One listener serving route configuration "rc" (pass ``rc`` to make it unused)."""
    vh = VirtualHost(name="vh", domains=[domain], routes=list(routes))
    config = RouteConfiguration(
        name=rc, virtual_hosts=[vh], ignore_port_in_host_matching=ignore_port
    )
    return Snapshot(
        clusters=clusters if clusters is not None else (cluster("a"), cluster("b")),
        listeners=(listener(),),
        routes=(config,),
    )


def edited(original: Snapshot, index: int, fn: Callable[[Route], None], op: str) -> Mutant:
    """A hand-made mutant changing route ``index`` of the one virtual host."""
    path = f"routes[rc].virtual_hosts[vh].routes[{index}]"
    return Mutant(op, path, "hand-made", with_route(original, RouteRef(0, 0, index, path), fn))


def mutant_at(original: Snapshot, op: str, index: int) -> Mutant:
    prefix = f"routes[rc].virtual_hosts[vh].routes[{index}]"
    found = [m for m in mutants(original) if m.operator == op and m.xds_path.startswith(prefix)]
    assert found, (op, index)
    return found[0]


SWAP_CASES = [
    ("different exact paths", rt("a", path="/a"), rt("b", path="/b"), True),
    ("exact not under prefix", rt("a", path="/x"), rt("b", prefix="/a"), True),
    ("non-overlapping prefixes", rt("a", prefix="/a"), rt("b", prefix="/b"), True),
    ("segment prefixes /a, /ab", rt("a", path_separated_prefix="/a"), rt("b", prefix="/ab"), True),
    (
        "same header, different values",
        rt("a", prefix="/", headers=[hdr("x", "1")]),
        rt("b", prefix="/", headers=[hdr("X", "2")]),
        True,
    ),
    (
        "different methods",
        rt("a", prefix="/", headers=[hdr(":method", "GET")]),
        rt("b", prefix="/", headers=[hdr(":method", "POST")]),
        True,
    ),
    ("same action", rt("a", name="one", prefix="/"), rt("a", name="two", path="/x"), True),
    ("prefix over exact", rt("a", prefix="/a"), rt("b", path="/a/b"), False),
    ("nested prefixes", rt("a", prefix="/a"), rt("b", prefix="/a/b"), False),
    ("segment /a vs prefix /a/", rt("a", path_separated_prefix="/a"), rt("b", prefix="/a/"), False),
    (
        "case-insensitive overlap",
        rt("a", path="/A", case_sensitive=False),
        rt("b", path="/a"),
        False,
    ),
    (
        "header values differ only in case, ignore_case",
        rt("a", prefix="/", headers=[hdr("x", "A", ignore_case=True)]),
        rt("b", prefix="/", headers=[hdr("x", "a")]),
        False,
    ),
    (
        "inverted header",
        rt(
            "a",
            prefix="/",
            headers=[
                HeaderMatcher(name="x", string_match=StringMatcher(exact="1"), invert_match=True)
            ],
        ),
        rt("b", prefix="/", headers=[hdr("x", "2")]),
        False,
    ),
]


@pytest.mark.parametrize(("case", "a", "b", "expected"), SWAP_CASES, ids=[c[0] for c in SWAP_CASES])
def test_swap_equivalence(case: str, a: Route, b: Route, expected: bool) -> None:
    original = snap(a, b, rt("a", prefix="/zzz"))
    m = mutant_at(original, "swap-adjacent-routes", 0)
    assert equivalent(original, m) is expected
    assert _same_everywhere(original, m.snapshot) is expected


def test_swap_with_a_shadowed_route_is_equivalent() -> None:
    original = snap(rt("a", prefix="/"), rt("b", prefix="/x"), rt("a", path="/x/y"))
    assert equivalent(original, mutant_at(original, "swap-adjacent-routes", 1))


def _weighted(*weights: tuple[str, int]) -> Route:
    wc = WeightedCluster(
        clusters=[WeightedClusterClusterWeight(name=n, weight=w) for n, w in weights]
    )
    return Route(match=RouteMatch(prefix="/"), route=RouteAction(weighted_clusters=wc))


def test_weight_changes_keeping_proportions_are_equivalent() -> None:
    original = snap(_weighted(("a", 2), ("a", 1), ("b", 3)))
    assert equivalent(original, mutant_at(original, "swap-weights", 0))

    def scale(r: Route) -> None:
        assert r.route is not None and r.route.weighted_clusters is not None
        for c in r.route.weighted_clusters.clusters:
            c.weight = (c.weight or 0) * 10

    assert equivalent(original, edited(original, 0, scale, "swap-weights"))


def test_weight_changes_altering_proportions_are_not() -> None:
    original = snap(_weighted(("a", 70), ("b", 30)))
    assert not equivalent(original, mutant_at(original, "swap-weights", 0))
    assert not equivalent(original, mutant_at(original, "zero-weight", 0))


def test_weight_changes_on_an_unreachable_route_are_equivalent() -> None:
    original = snap(rt("a", prefix="/"), _weighted(("a", 70), ("b", 30)))
    assert equivalent(original, mutant_at(original, "swap-weights", 1))


DROP_CASES = [
    ("after catch-all", [rt("a", prefix="/"), rt("b", path="/x")], 1, True),
    ("the catch-all itself", [rt("a", prefix="/"), rt("b", path="/x")], 0, False),
    (
        "empty prefix, any regex after",
        [rt("a", prefix=""), rt("b", safe_regex=RegexMatcher(regex=".*q"))],
        1,
        True,
    ),
    (
        "prefix, regex with that literal prefix after",
        [rt("a", prefix="/q"), rt("b", safe_regex=RegexMatcher(regex="^/q(a|b)?[0-9]+$"))],
        1,
        True,
    ),
    (
        "root prefix, unanchored regex after",
        [rt("a", prefix="/"), rt("b", safe_regex=RegexMatcher(regex=".*q"))],
        1,
        False,
    ),
    (
        "subset of conditions",
        [
            rt("a", prefix="/a", headers=[hdr("x", "1")]),
            rt("b", path_separated_prefix="/a/b", headers=[hdr("x", "1"), hdr("y", "2")]),
        ],
        1,
        True,
    ),
    (
        "earlier needs a header the later does not",
        [rt("a", prefix="/a", headers=[hdr("x", "1")]), rt("b", path="/a/b")],
        1,
        False,
    ),
    (
        "identical route follows, disjoint in between",
        [rt("a", path="/x"), rt("b", prefix="/y"), rt("a", path="/x")],
        0,
        True,
    ),
    (
        "identical route follows, overlap in between",
        [rt("a", path="/x"), rt("b", prefix="/"), rt("a", path="/x")],
        0,
        False,
    ),
    (
        "case-insensitive earlier prefix",
        [rt("a", prefix="/A", case_sensitive=False), rt("b", path="/a")],
        1,
        True,
    ),
    ("case-sensitive earlier prefix", [rt("a", prefix="/A"), rt("b", path="/a")], 1, False),
]


@pytest.mark.parametrize(
    ("case", "routes", "index", "expected"), DROP_CASES, ids=[c[0] for c in DROP_CASES]
)
def test_drop_route_equivalence(case: str, routes: list[Route], index: int, expected: bool) -> None:
    original = snap(*routes)
    m = mutant_at(original, "drop-route", index)
    assert equivalent(original, m) is expected
    if expected or not any(r.match and r.match.safe_regex for r in routes):
        # (for a regex, the distinguishing request may lie outside the reference's sample)
        assert _same_everywhere(original, m.snapshot) is expected


def test_changes_on_an_unreachable_route_are_equivalent() -> None:
    shadowed = snap(rt("a", prefix="/"), rt("b", path="/x", headers=[hdr("x", "1")]))
    reachable = snap(rt("b", path="/x", headers=[hdr("x", "1")]), rt("a", prefix="/"))
    for op in ("alter-header-value", "drop-header-matcher", "exact-to-prefix", "retarget-cluster"):
        assert equivalent(shadowed, mutant_at(shadowed, op, 1)), op
        assert not equivalent(reachable, mutant_at(reachable, op, 0)), op


def test_no_op_case_flags_are_equivalent() -> None:
    original = snap(rt("a", path="/123", headers=[hdr("x", "42")]), rt("b", prefix="/"))

    def fold_path(r: Route) -> None:
        assert r.match is not None
        r.match.case_sensitive = False

    def fold_header(r: Route) -> None:
        assert r.match is not None and r.match.headers[0].string_match is not None
        r.match.headers[0].string_match.ignore_case = True

    assert equivalent(original, edited(original, 0, fold_path, "case-insensitive-path"))
    assert equivalent(original, edited(original, 0, fold_header, "case-insensitive-header"))
    lettered = snap(rt("a", path="/abc"), rt("b", prefix="/"))
    assert not equivalent(lettered, mutant_at(lettered, "case-insensitive-path", 0))


def _timed(timeout: int) -> Route:
    r = rt("a", prefix="/")
    assert r.route is not None
    r.route.timeout = datetime.timedelta(seconds=timeout)
    return r


def test_timeouts() -> None:
    for seconds, dropped_is_equivalent in ((15, True), (10, False)):
        original = snap(_timed(seconds))
        assert (
            equivalent(original, mutant_at(original, "drop-route-timeout", 0))
            is dropped_is_equivalent
        )
        assert not equivalent(original, mutant_at(original, "alter-route-timeout", 0))


def _mirrored(numerator: int | None) -> Route:
    r = rt("a", prefix="/")
    assert r.route is not None
    fraction = (
        None
        if numerator is None
        else RuntimeFractionalPercent(default_value=FractionalPercent(numerator=numerator))
    )
    r.route.request_mirror_policies = [
        RouteActionRequestMirrorPolicy(cluster="b", runtime_fraction=fraction)
    ]
    return r


@pytest.mark.parametrize(("numerator", "expected"), [(0, True), (50, False), (None, False)])
def test_dropping_or_retargeting_a_mirror(numerator: int | None, expected: bool) -> None:
    original = snap(_mirrored(numerator))
    assert equivalent(original, mutant_at(original, "drop-mirror", 0)) is expected
    assert equivalent(original, mutant_at(original, "retarget-mirror", 0)) is expected


def test_mirror_fractions_with_the_same_probability_are_equivalent() -> None:
    original = snap(_mirrored(400))  # 400% is clamped to always

    def half(r: Route) -> None:
        assert r.route is not None
        r.route.request_mirror_policies[0].runtime_fraction = RuntimeFractionalPercent(
            default_value=FractionalPercent(numerator=200)
        )

    assert equivalent(original, edited(original, 0, half, "alter-mirror-fraction"))
    assert equivalent(original, mutant_at(original, "alter-mirror-fraction", 0))  # 200%: always
    sometimes = snap(_mirrored(50))
    assert not equivalent(sometimes, mutant_at(sometimes, "alter-mirror-fraction", 0))


def test_retarget_to_a_twin_cluster() -> None:
    twins = (cluster("a", "same.ns.svc"), cluster("b", "same.ns.svc"))
    original = snap(rt("a", prefix="/"), clusters=twins)
    assert equivalent(original, mutant_at(original, "retarget-cluster", 0))
    distinct = snap(rt("a", prefix="/"))
    assert not equivalent(distinct, mutant_at(distinct, "retarget-cluster", 0))
    formatter = rt("a", prefix="/")
    formatter.request_headers_to_add = [
        HeaderValueOption(header=HeaderValue(key="x-c", value="%UPSTREAM_CLUSTER%"))
    ]
    revealing = snap(formatter, clusters=twins)
    assert not equivalent(revealing, mutant_at(revealing, "retarget-cluster", 0))


def test_unused_resources() -> None:
    original = snap(rt("a", prefix="/"), clusters=(cluster("a"), cluster("unused")))
    by_cluster = {
        (m.operator, m.xds_path.split("]")[0]): m
        for m in mutants(original)
        if m.xds_path.startswith("clusters")
    }
    assert equivalent(original, by_cluster[("dns-wrong-port", "clusters[unused")])
    assert not equivalent(original, by_cluster[("dns-wrong-port", "clusters[a")])
    orphan = snap(rt("a", prefix="/"), rc="not-served")
    route_mutants = [m for m in mutants(orphan) if m.xds_path.startswith("routes[")]
    assert len(route_mutants) >= 5
    assert all(equivalent(orphan, m) for m in route_mutants)


def test_tampered_or_unknown_mutants_are_not_equivalent() -> None:
    original = snap(rt("a", path="/a"), rt("b", path="/b"))
    honest = mutant_at(original, "swap-adjacent-routes", 0)
    assert equivalent(original, honest)
    extra = copy.deepcopy(honest.snapshot.routes[0])
    extra.virtual_hosts[0].routes[0].route.cluster = "zzz"  # type: ignore[union-attr]
    tampered = Snapshot(original.clusters, original.endpoints, original.listeners, (extra,))
    assert not equivalent(original, Mutant(honest.operator, honest.xds_path, "", tampered))
    assert not equivalent(
        original, Mutant("no-such-operator", honest.xds_path, "", honest.snapshot)
    )
    assert not equivalent(original, Mutant(honest.operator, "routes[rc]", "", honest.snapshot))


@pytest.mark.parametrize(("domain", "expected"), [("*", True), ("example.com", False)])
def test_ignore_port_only_matters_with_named_domains(domain: str, expected: bool) -> None:
    original = snap(rt("a", prefix="/"), domain=domain, ignore_port=True)
    m = next(m for m in mutants(original) if m.operator == "drop-ignore-port-in-host")
    assert equivalent(original, m) is expected


# --- properties against the reference matcher ----------------------------------------------------

PATHS = ["/", "/a", "/a/", "/a/b", "/ab", "/A", "/A/b", "/b"]
REQUESTS = [
    Req(p, tuple((n, v) for n, v in (("x", x), (":method", meth)) if v is not None), q)
    for p in PATHS
    for x in (None, "1", "2", "1x", "A")
    for meth in ("GET", "POST")
    for q in ((), (("q", "1"),), (("q", "2"),))
]

_values_st = st.sampled_from(["1", "2", "1x", "a", "A", ""])
_header_st = st.builds(
    HeaderMatcher,
    name=st.sampled_from(["x", "X", ":method"]),
    string_match=st.one_of(
        st.builds(
            StringMatcher,
            exact=st.sampled_from(["1", "2", "A", "GET", "POST"]),
            ignore_case=st.booleans(),
        ),
        st.builds(StringMatcher, prefix=_values_st, ignore_case=st.booleans()),
    ),
    invert_match=st.booleans(),
    treat_missing_header_as_empty=st.booleans(),
)
_query_st = st.one_of(
    st.builds(
        QueryParameterMatcher,
        name=st.just("q"),
        string_match=st.builds(StringMatcher, exact=st.sampled_from(["1", "2"])),
    ),
    st.builds(QueryParameterMatcher, name=st.just("q"), present_match=st.just(True)),
)


REGEXES = ["^/a/.*", "/(a|b)/b", "^/a[0-9]*$", "/ab?", "(?:/a|/b)", "/A.*", ".*", "/a|/b"]


@st.composite
def matches(draw: st.DrawFn) -> RouteMatch:
    kind = draw(st.sampled_from(["path", "prefix", "path_separated_prefix", "safe_regex"]))
    if kind == "safe_regex":
        m = RouteMatch(safe_regex=RegexMatcher(regex=draw(st.sampled_from(REGEXES))))
    else:
        values = ["/a", "/a/b", "/ab", "/A", "/b"] + (
            ["/", ""] if kind == "prefix" else ["/"] if kind == "path" else []
        )
        m = RouteMatch(**{kind: draw(st.sampled_from(values))})  # type: ignore[arg-type]
    m.case_sensitive = draw(st.sampled_from([None, False, True]))
    m.headers = draw(st.lists(_header_st, max_size=2))
    m.query_parameters = draw(st.lists(_query_st, max_size=1))
    return m


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(matches(), matches())
def test_disjoint_and_subsumes_are_sound(a: RouteMatch, b: RouteMatch) -> None:
    both = [r for r in REQUESTS if accepts(a, r) and accepts(b, r)]
    if mm.matches_disjoint(a, b):
        assert not both
    if mm.subsumes(a, b):
        assert all(accepts(a, r) for r in REQUESTS if accepts(b, r))
    canon = mm.canonical_match(a)
    assert all(accepts(canon, r) == accepts(a, r) for r in REQUESTS)


_ROUTE_LEVEL = [
    op
    for op in OPERATORS
    if op.name
    in {
        "prefix-to-exact",
        "exact-to-prefix",
        "drop-segment-boundary",
        "case-insensitive-path",
        "drop-header-matcher",
        "alter-header-value",
        "header-exact-to-prefix",
        "case-insensitive-header",
        "drop-method-matcher",
        "alter-method-matcher",
        "drop-query-matcher",
        "alter-query-value",
        "case-insensitive-query",
        "swap-adjacent-routes",
        "drop-route",
        "fractional-route",
        "retarget-cluster",
    }
]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(matches(), st.sampled_from(["a", "b"])), min_size=1, max_size=4))
def test_proven_equivalent_mutants_are_indistinguishable(
    spec: list[tuple[RouteMatch, str]],
) -> None:
    routes = [Route(match=m, route=RouteAction(cluster=c)) for m, c in spec]
    original = snap(*routes)
    for m in mutants(original, operators=tuple(_ROUTE_LEVEL)):
        if equivalent(original, m):
            before = original.routes[0].virtual_hosts[0].routes
            after = m.snapshot.routes[0].virtual_hosts[0].routes
            for r in REQUESTS:
                assert same_answers(selected(before, r), selected(after, r)), (
                    m.operator,
                    m.xds_path,
                    r,
                )


REGEX_PREFIX_CASES = [
    ("^/(v1|v2)/items/[a-z]{3}$", ("/v1/items/", "/v2/items/")),
    ("^/regex/[0-9]+$", ("/regex/",)),
    ("^/img/.*\\.png$", ("/img/",)),
    ("\\/x\\-y/z", ("/x-y/z",)),
    ("/ab?c", ("/a",)),
    ("/ab+c", ("/ab",)),
    ("/x\\d", ("/x",)),
    ("(?:/v1|/v2)/x", ("/v1/x", "/v2/x")),
    ("/(a|b)?c", ("/",)),
    ("/a(?i)bc", ("/a",)),
    ("a|b", None),
    ("(?i)/abc", None),
    ("[|]a", ("",)),
]


@pytest.mark.parametrize(("regex", "expected"), REGEX_PREFIX_CASES)
def test_regex_prefixes(regex: str, expected: tuple[str, ...] | None) -> None:
    assert regex_prefixes(regex) == expected


_PIECES = [
    "/",
    "a",
    "b",
    "\\/",
    "\\.",
    "(a|b)",
    "(?:a|/)",
    "a?",
    "b*",
    "a+",
    "(a|b)?",
    "a{2}",
    "[a-z]",
    "[|]",
    ".",
    "\\d",
    "$",
    "(?i)",
    "(a(b)|/)",
]


@settings(max_examples=300, deadline=None)
@given(
    st.booleans(),
    st.lists(st.sampled_from(_PIECES), max_size=5),
    st.booleans(),
    st.lists(st.text(alphabet="/ab.|1A", max_size=6), min_size=1, max_size=20),
)
def test_regex_prefixes_are_sound(
    anchored: bool, pieces: list[str], alternate: bool, strings: list[str]
) -> None:
    regex = ("^" if anchored else "") + "".join(pieces) + ("|b" if alternate else "")
    prefixes = regex_prefixes(regex)
    if prefixes is None:
        return
    for text in strings:
        if re2.fullmatch(regex, text) is not None:
            assert any(text.startswith(p) for p in prefixes), (regex, text, prefixes)


_LITERAL_PIECES = ["(/.*)?", "(?:/.*)?", "x", "\\$", ".*", "\\.*"]


@settings(max_examples=300, deadline=None)
@example(False, ["$", ".*"], False, [""])  # found by a random run: "$" read as a literal head
@given(
    st.booleans(),
    st.lists(st.sampled_from([*_PIECES, *_LITERAL_PIECES]), max_size=5),
    st.booleans(),
    st.lists(st.text(alphabet="/ab.$x1", max_size=7), min_size=1, max_size=20),
)
def test_regex_literal_readings_are_exact(
    anchored: bool, pieces: list[str], dollar: bool, strings: list[str]
) -> None:
    """Where a regex is read as one literal, or as a literal and its sub-paths, RE2
    fully matches exactly those strings (the proofs use these sets on both sides)."""
    regex = ("^" if anchored else "") + "".join(pieces) + ("$" if dollar else "")
    literal, seg = regex_literal(regex), regex_segment_prefix(regex)
    head = regex_any_after(regex)
    for text in [*strings, literal or "", (seg or "") + "/a", seg or "", (head or "") + "x"]:
        hit = re2.fullmatch(regex, text) is not None
        if literal is not None:
            assert hit == (text == literal), (regex, text)
        if seg is not None:
            assert hit == (text == seg or text.startswith(seg + "/")), (regex, text)
        if head is not None:
            assert hit == text.startswith(head), (regex, text)


def test_regex_literal_readings() -> None:
    assert regex_literal("^/\\.well-known$") == "/.well-known"
    assert regex_literal("exact\\-value") == "exact-value"
    assert regex_literal("/a.b") is None
    assert regex_segment_prefix("/foo(/.*)?") == "/foo"
    assert regex_segment_prefix("^/foo\\.x(?:/.*)?$") == "/foo.x"
    assert regex_segment_prefix("/foo/(/.*)?") is None
    assert regex_segment_prefix("/fo+(/.*)?") is None
    assert regex_any_after("/.*") == "/"
    assert regex_any_after("^/api.*$") == "/api"
    assert regex_any_after("/a\\.*") is None


def test_timeout_changes_with_the_same_deadline_are_equivalent() -> None:
    """With no retries, min(route timeout, per-try timeout) is all a client can observe."""
    from verifier.mutate.proofs import prove_same_deadline

    for name, snap, ms in fixture_mutants():
        for m in ms:
            if "timeout" not in m.operator:
                continue
            changed = _timeouts_of(m.snapshot) != _timeouts_of(snap)
            assert changed, (name, m.xds_path)
            if prove_same_deadline(snap, m):
                assert _deadlines(snap) == _deadlines(m.snapshot), (name, m.xds_path)


def _timeouts_of(snap: Snapshot) -> list[object]:
    return [
        (r.route.timeout, r.route.retry_policy)
        for rc in snap.routes
        for vh in rc.virtual_hosts
        for r in vh.routes
        if r.route is not None
    ]


def _deadlines(snap: Snapshot) -> list[float]:
    out = []
    for rc in snap.routes:
        for vh in rc.virtual_hosts:
            for r in vh.routes:
                if r.route is None:
                    continue
                t = r.route.timeout
                total = 15.0 if t is None else t.total_seconds()
                limits = [total] if total > 0 else []
                p = r.route.retry_policy.per_try_timeout if r.route.retry_policy else None
                if p is not None and p.total_seconds() > 0:
                    limits.append(p.total_seconds())
                out.append(min(limits) if limits else float("inf"))
    return out


def test_method_case_proof_only_covers_upper_case_methods() -> None:
    from verifier.mutate.proofs import prove_method_case, prove_route_local

    proven, refused = 0, 0
    for _name, snap, ms in fixture_mutants():
        for m in ms:
            if m.operator != "case-insensitive-header" or prove_route_local(snap, m):
                continue
            if prove_method_case(snap, m):
                assert "':method'" in m.detail, m.detail
                proven += 1
            else:
                assert "':method'" not in m.detail, m.detail
                refused += 1
    assert proven > 0 and refused > 0
