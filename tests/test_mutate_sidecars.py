"""The checker catches at least 98% of non-equivalent mutants of a sidecar's xDS.

The sidecar's bar, as tests/test_mutation_score.py holds the edge's, on one mesh
scenario small enough for the suite: mesh-consumer-route, whose clients in two
namespaces see different route tables for the same Service (so foreign-route-table,
the consumer route leaking, has sites), mutated on the sidecar of a consumer
(mesh-client/client) and of a workload that mesh clients call (mesh-apps/echo-v1,
whose inbound tunnel listener is mutated too). The full figure, over every mesh
fixture, is `edge-verify mutate fixtures/` (benchmarks/README.md).
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
from envoy_data_plane.envoy.config.listener.v3 import Filter, FilterChain
from envoy_data_plane.envoy.extensions.filters.network.tcp_proxy.v3 import TcpProxy
from test_mutate import sidecar_golden
from verifier.rules import RULES

from verifier import pipeline
from verifier.cli import main
from verifier.mutate.catalog import OPERATORS, mutants, with_peers
from verifier.mutate.run import (
    EDGE,
    SIDECARS,
    MutationReport,
    mutate_scenario,
    mutated_sidecars,
    sidecar_context,
)
from verifier.registry import run
from verifier.xds.codec import pack_any
from verifier.xds.snapshot import envoy_validate

TCP_PROXY = "envoy.filters.network.tcp_proxy"
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SCENARIO = (str(FIXTURES / "base"), str(FIXTURES / "mesh-consumer-route"))
PROXIES = ("mesh-client/client", "mesh-apps/echo-v1")
TARGET = 0.98
# The rules a sidecar's mutants must make fire: every rule of the mesh's xDS.
MESH_RULES = {
    "mesh-cluster-ip-matching",
    "mesh-consumer-route",
    "mesh-identity",
    "mesh-inbound",
    "mesh-mtls",
    "mesh-no-route-kube-proxy",
    "mesh-passthrough",
}
# The sidecar operators this scenario has sites for (inbound-swap-sni and -target need
# two target ports: every Service port here reaches targetPort 3000).
SITED = {
    "chain-other-service-routes",
    "chain-other-port-routes",
    "swap-chain-cluster-ips",
    "drop-outbound-chain",
    "drop-default-chain",
    "retarget-passthrough",
    "drop-original-dst-filter",
    "foreign-route-table",
    "drop-mesh-client-certificate",
    "mesh-wrong-tunnel-port",
    "mesh-san-prefix",
    "mesh-san-other-trust-domain",
    "mesh-extra-san",
    "inbound-san-other-trust-domain",
    "inbound-drop-san",
}
# ... of which those that apply to an edge's mesh clusters as well.
MESH_CLUSTER_OPERATORS = {
    "drop-mesh-client-certificate",
    "mesh-wrong-tunnel-port",
    "mesh-san-prefix",
    "mesh-san-other-trust-domain",
    "mesh-extra-san",
}


@pytest.fixture(scope="module")
def report() -> MutationReport:
    out = MutationReport()
    for proxy in PROXIES:
        opts = pipeline.CheckOptions(proxy=proxy)
        (scn,) = pipeline.discover(SCENARIO, opts)
        mutate_scenario(scn, opts, RULES, out)
    return out


def test_sidecar_mutation_score(report: MutationReport) -> None:
    survivors = "\n".join(
        f"{s['proxy']}: {s['operator']} {s['xds_path']}: {s['detail']}" for s in report.survived
    )
    tally = report.by_xds[SIDECARS]
    print(
        f"\n{tally.total} sidecar mutants, {tally.equivalent} equivalent, {tally.killed} "
        f"killed, score {tally.score:.2%}\n{survivors}"
    )
    assert EDGE not in report.by_xds  # --proxy: that sidecar only
    assert report.baseline_findings == []
    assert tally.total > 200
    assert tally.score >= TARGET, survivors


def test_every_mesh_rule_fires_on_a_sidecar_mutant(report: MutationReport) -> None:
    assert sorted(MESH_RULES - set(report.fired)) == []


def test_the_mesh_operators_find_sites_on_a_sidecar() -> None:
    """Each sidecar operator makes mutants here, and none of them on the edge's xDS:
    the sidecar's shapes are read from its xDS, not assumed."""
    opts = pipeline.CheckOptions()
    (scn,) = pipeline.discover(SCENARIO, opts)
    base, _ = pipeline.prepare(scn, opts)
    assert base is not None
    made: set[str] = set()
    for proxy in PROXIES:
        (source, snap), *_ = mutated_sidecars(base, proxy)[0]
        every = mutated_sidecars(base, proxy)[1]
        peers = {s.line(): x for s, x in every.items() if s != source}
        made |= {m.operator for m in mutants(snap, operators=with_peers(peers))}
    assert sorted(SITED - made) == []
    on_edge = {m.operator for m in mutants(base.snapshot)}
    assert sorted(on_edge & (SITED - MESH_CLUSTER_OPERATORS)) == []


def test_mutate_proxy_names_a_workload_with_a_sidecar(capsys: pytest.CaptureFixture[str]) -> None:
    """--proxy of a workload without a sidecar is bad input: exit 2, the nearest name."""
    code = main(["mutate", *SCENARIO, "--proxy", "edge-web/client"])
    assert code == 2
    assert "--proxy" in capsys.readouterr().err


def test_inbound_swaps_where_two_ports_reach_different_target_ports() -> None:
    """inbound-swap-sni and -target find a site once two inbound chains reach different
    targetPorts (no fixture has such a workload), swap exactly those, and Envoy
    accepts the mutants."""
    snap = sidecar_golden("mesh-consumer-route", "mesh-apps", "echo-v1")
    (k,) = [i for i, li in enumerate(snap.listeners) if li.name == "inbound"]
    other = copy.deepcopy(next(c for c in snap.clusters if c.name == "inbound/3000"))
    other.name = "inbound/3001"
    assert other.load_assignment is not None
    other.load_assignment.cluster_name = other.name
    sock = other.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address
    sock.port_value = 3001
    inbound = copy.deepcopy(snap.listeners[k])
    inbound.filter_chains[1].filters = [
        Filter(name=TCP_PROXY, typed_config=pack_any(TcpProxy(stat_prefix="x", cluster=other.name)))
    ]
    listeners = list(snap.listeners)
    listeners[k] = inbound
    two = dataclasses.replace(snap, listeners=tuple(listeners), clusters=(*snap.clusters, other))
    ops = tuple(op for op in OPERATORS if op.name in ("inbound-swap-sni", "inbound-swap-target"))
    made = mutants(two, operators=ops)
    assert {m.operator for m in made} == {"inbound-swap-sni", "inbound-swap-target"}
    before = inbound.filter_chains
    first = {m.operator: m for m in reversed(made)}  # each operator's first site: 0 with 1
    sni = first["inbound-swap-sni"].snapshot.listeners[k].filter_chains
    assert [_names(c) for c in sni[:2]] == [_names(before[1]), _names(before[0])]
    target = first["inbound-swap-target"].snapshot.listeners[k].filter_chains
    assert [c.filters for c in target[:2]] == [before[1].filters, before[0].filters]
    ok, out = envoy_validate(made[0].snapshot)
    assert ok, out[-300:]


def _names(chain: FilterChain) -> list[str]:
    return list(chain.filter_chain_match.server_names) if chain.filter_chain_match else []


@pytest.mark.parametrize(
    ("proxy", "operator", "code", "resource"),
    [
        ("mesh-apps/echo-v1", "drop-require-client-certificate", "EV924", "Service mesh-apps/"),
        ("mesh-apps/echo-v1", "inbound-san-other-trust-domain", "EV924", "Service mesh-apps/"),
        ("mesh-client/client", "drop-default-chain", "EV931", "Deployment mesh-client/client"),
        ("mesh-client/client", "retarget-passthrough", "EV931", "Deployment mesh-client/client"),
    ],
)
def test_a_sidecar_shape_mistake_is_found_at_its_line(
    proxy: str, operator: str, code: str, resource: str
) -> None:
    """What no mesh request reaches (the tunnel listener, the passthrough) is an error
    at a YAML line, as check --proxy reports it: the Service port the tunnel serves, or
    the workload whose passthrough it is."""
    opts = pipeline.CheckOptions()
    (scn,) = pipeline.discover(SCENARIO, opts)
    base, _ = pipeline.prepare(scn, opts)
    assert base is not None
    (source, snap), *_ = mutated_sidecars(base, proxy)[0]
    mutant = next(m for m in mutants(snap) if m.operator == operator)
    ran = run(RULES, sidecar_context(base, source, mutant.snapshot))
    found = [f for f in ran.findings if f.code == code]
    assert found, [f.code for f in ran.findings]
    assert all(f.resource.startswith(resource) for f in found)
    assert all(f.file.endswith("mesh.yaml") and f.line > 0 for f in found)
    assert all(f.severity == "error" for f in found)
    assert run(RULES, sidecar_context(base, source, snap)).findings == []
