"""The aether sidecar's xDS (``translate --proxy NS/WORKLOAD``; docs/mesh.md).

Read as a person reads a config_dump (the JSON of each resource), on the scenario
fixtures/mesh-sidecar-translation, whose resources.yaml says what each workload and
route is for: which Service ports a client's sidecar captures and routes, which
mesh routes it routes them by (consumer routes of its namespace replace the
producer routes, and never reach another namespace), how each backend is dialled,
and that every SNI a mesh client sends is one the destination's inbound listener
serves, on the right targetPort. The goldens hold the whole output; real Envoy
holds its validity (tests/test_envoy_accepts_fixtures.py, tests/test_ads.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import BASE, FIXTURES, rel, translate_proxy, translate_scenario
from test_check_cli import CLI, cli  # noqa: F401  (the fixture)

from verifier.gatewayapi import mesh_attach
from verifier.gatewayapi.load import load_texts
from verifier.gatewayapi.resources import build, load_resources
from verifier.gatewayapi.workloads import pod_names, target_port
from verifier.translate import TranslateOptions
from verifier.translate.sidecar import translate_sidecar
from verifier.xds.snapshot import Snapshot, dumps, split_by_type

SCENARIO = FIXTURES / "mesh-sidecar-translation"
Json = dict[str, Any]


def resources(snap: Snapshot, kind: str) -> dict[str, Json]:
    """Name -> the resource's JSON, as the golden shows it."""
    found = split_by_type(snap)[kind]["resources"]
    key = "cluster_name" if kind == "endpoints" else "name"
    return {r[key]: r for r in found}


def sidecar(workload: str) -> dict[str, dict[str, Json]]:
    ns, name = workload.split("/")
    snap = translate_proxy(SCENARIO, ns, name)
    return {k: resources(snap, k) for k in ("clusters", "endpoints", "listeners", "routes")}


def route_names(xds: dict[str, dict[str, Json]], service_port: str) -> list[str]:
    (vhost,) = xds["routes"][f"outbound/{service_port}"]["virtual_hosts"]
    assert vhost["domains"] == ["*"]  # MeshClusterIPMatching: the Host selects nothing
    return [r["name"] for r in vhost["routes"]]


def chains(xds: dict[str, dict[str, Json]]) -> dict[str, Json]:
    return {c["name"]: c for c in xds["listeners"]["outbound"]["filter_chains"]}


def test_consumer_routes_replace_producer_routes_for_their_namespace_only(repo_cwd: Path) -> None:
    client, echo_v1 = sidecar("xlate-client/client"), sidecar("xlate-apps/echo-v1")
    consumer = ["xlate-client/echo-pin-v2/rule/0/match/0"]
    # xlate-client's consumer route (no parentRef port) takes both ports of echo there.
    assert route_names(client, "xlate-apps/echo/80") == consumer
    assert route_names(client, "xlate-apps/echo/8080") == consumer
    # Elsewhere the producer route, on the one port it names, in the spec's precedence:
    # the longer prefix /web, then the header match, then the rest.
    producer = [f"xlate-apps/echo-split/rule/{i}/match/0" for i in (1, 0, 2)]
    assert route_names(echo_v1, "xlate-apps/echo/80") == producer
    # No route for that port: to the Service itself, over the mesh.
    assert route_names(echo_v1, "xlate-apps/echo/8080") == ["xlate-apps/echo/8080/default"]
    (default,) = echo_v1["routes"]["outbound/xlate-apps/echo/8080"]["virtual_hosts"][0]["routes"]
    assert default["match"] == {"prefix": "/"}
    assert default["route"]["cluster"] == "mesh/xlate-apps/echo/8080"


def test_the_outbound_listener_captures_service_frontends_and_passes_the_rest(
    repo_cwd: Path,
) -> None:
    client, tools = sidecar("xlate-client/client"), sidecar("xlate-client/tools")
    listener = client["listeners"]["outbound"]
    assert listener["address"]["socket_address"] == {"address": "0.0.0.0", "port_value": 15001}
    assert [f["name"] for f in listener["listener_filters"]] == [
        "envoy.filters.listener.original_dst"
    ]
    echo = chains(client)["xlate-apps/echo/8080"]
    assert echo["filter_chain_match"] == {
        "prefix_ranges": [{"address_prefix": "10.96.140.1", "prefix_len": 32}],
        "destination_port": 8080,
    }
    (hcm,) = echo["filters"]
    assert hcm["typed_config"]["rds"]["route_config_name"] == "outbound/xlate-apps/echo/8080"
    (passthrough,) = listener["default_filter_chain"]["filters"]
    assert passthrough["typed_config"]["cluster"] == "passthrough"
    assert client["clusters"]["passthrough"]["type"] == "ORIGINAL_DST"
    # Default capture: mesh-registered Services only; redirect-all: every ClusterIP.
    meshed = {"xlate-apps/echo/80", "xlate-apps/echo/8080", "xlate-apps/echo-v1/80"}
    meshed |= {"xlate-apps/echo-v2/80", "mesh-apps/mesh-backend-v1/8080"}
    # fixtures/base/mesh.yaml's Services, in mesh-apps too.
    meshed |= {
        f"mesh-apps/{svc}/{port}" for svc in ("echo", "echo-v1", "echo-v2") for port in (80, 8080)
    }
    assert set(chains(client)) == meshed
    outside = set(chains(tools)) - meshed
    assert "edge-web/web-backend/8080" in outside and len(outside) == 6
    assert route_names(tools, "edge-web/web-backend/8080") == ["edge-web/web-backend/8080/default"]
    assert "outbound" in client["listeners"] and "inbound" not in client["listeners"]


def test_mesh_backends_are_dialled_over_mtls_and_others_in_cleartext(repo_cwd: Path) -> None:
    clusters = sidecar("xlate-apps/echo-v1")["clusters"]
    web = clusters["k8s/edge-web/web-backend/8080"]
    assert web["type"] == "STRICT_DNS" and "transport_socket" not in web
    for name, accounts, sni in (
        ("mesh/xlate-apps/echo-v2/80", ["echo-v2"], "echo-v2.xlate-apps.svc.cluster.local"),
        # Two workloads with two ServiceAccounts behind one Service of two ports.
        (
            "mesh/xlate-apps/echo/8080",
            ["echo-v1", "echo-v2"],
            "8080.echo.xlate-apps.svc.cluster.local",
        ),
    ):
        tls = clusters[name]["transport_socket"]["typed_config"]
        assert tls["sni"] == sni
        context = tls["common_tls_context"]["combined_validation_context"]
        sans = context["default_validation_context"]["match_typed_subject_alt_names"]
        assert sans == [
            {
                "san_type": "URI",
                "matcher": {"exact": f"spiffe://cluster.local/ns/xlate-apps/sa/{a}"},
            }
            for a in accounts
        ]
        assert clusters[name]["type"] == "EDS"


def _inbound_targets(snap: Snapshot) -> dict[str, int]:
    """SNI -> the application port the inbound listener forwards it to."""
    found = resources(snap, "listeners").get("inbound")
    if found is None:
        return {}
    apps = resources(snap, "clusters")
    out = {}
    for chain in found["filter_chains"]:
        (sni,) = chain["filter_chain_match"]["server_names"]
        cluster = apps[chain["filters"][0]["typed_config"]["cluster"]]
        (lb,) = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]
        socket = lb["endpoint"]["address"]["socket_address"]
        assert socket["address"] == "127.0.0.1"
        out[sni] = socket["port_value"]
    return out


@pytest.mark.parametrize("scenario", ["mesh-sidecar-translation", "httproute-mesh-backend"])
def test_every_mesh_sni_reaches_its_target_port_on_every_selected_workload(
    scenario: str, repo_cwd: Path
) -> None:
    """The mesh clusters of the edge and of every sidecar, against the inbound listeners
    of the workloads their Service selects: each serves the SNI on the targetPort."""
    folder = FIXTURES / scenario
    res = load_resources([rel(BASE), rel(folder)])
    graph = mesh_attach.build_mesh(res)
    meshed = [wl for wl in res.workloads.values() if mesh_attach.has_sidecar(res, wl)]
    sidecars = {wl.meta.key: translate_sidecar(res, graph, wl) for wl in meshed}
    inbound = {key: _inbound_targets(snap) for key, snap in sidecars.items()}
    checked = 0
    for snap in [translate_scenario(folder), *sidecars.values()]:
        for name, cluster in resources(snap, "clusters").items():
            if not name.startswith("mesh/"):
                continue
            _, ns, svc_name, port = name.split("/")
            svc = res.services[(ns, svc_name)]
            sp = next(p for p in svc.ports if p.port == int(port))
            sni = cluster["transport_socket"]["typed_config"]["sni"]
            for wl in meshed:
                if svc not in mesh_attach.selecting_services(res, wl):
                    continue
                assert inbound[wl.meta.key].get(sni) == target_port(sp, wl), (name, wl.meta.key)
                checked += 1
    assert checked >= (8 if scenario == "mesh-sidecar-translation" else 1)


def test_the_trust_domain_is_the_one_given(repo_cwd: Path) -> None:
    res = load_resources([rel(BASE), rel(SCENARIO)])
    wl = mesh_attach.sidecar_workload(res, "xlate-apps/echo-v1")
    snap = translate_sidecar(
        res, mesh_attach.build_mesh(res), wl, TranslateOptions(trust_domain="example.org")
    )
    text = dumps(snap)
    assert "spiffe://cluster.local" not in text
    for chain in resources(snap, "listeners")["inbound"]["filter_chains"]:
        tls = chain["transport_socket"]["typed_config"]
        assert tls["require_client_certificate"] is True
        context = tls["common_tls_context"]["combined_validation_context"]
        (san,) = context["default_validation_context"]["match_typed_subject_alt_names"]
        assert san == {"san_type": "URI", "matcher": {"prefix": "spiffe://example.org/"}}


WORLD = """\
apiVersion: v1
kind: Namespace
metadata: {name: app, labels: {aether.io/managed: "true"}}
---
apiVersion: v1
kind: Namespace
metadata: {name: legacy}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: client, namespace: app}
spec:
  selector: {matchLabels: {app: client}}
  template:
    metadata: {labels: {app: client}}
    spec: {containers: [{name: client, image: client}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: wrong-port, namespace: app}
spec:
  parentRefs: [{group: "", kind: Service, name: tls, port: 9999}]
  rules: [{backendRefs: [{name: tls, port: 443}]}]
"""
SERVICES = {
    ("app", "headless"): "{clusterIP: None, ports: [{port: 80}]}",
    ("app", "unset"): "{ports: [{port: 80}]}",
    ("app", "dns"): "{clusterIP: 10.96.0.4, ports: [{port: 53, protocol: UDP}]}",
    ("app", "tls"): "{clusterIP: 10.96.0.5, ports: [{port: 443, appProtocol: kubernetes.io/wss}]}",
    ("legacy", "legacy"): "{clusterIP: 10.96.0.6, ports: [{port: 80}]}",
}


def test_what_gets_no_outbound_chain() -> None:
    """A headless Service, a UDP port, a port the sidecar does not speak HTTP on (with
    no route that applies: a parentRef port the Service lacks attaches nothing), and a
    Service outside the mesh that nothing registers. A Service written without a
    ClusterIP is given one at load, as a cluster would: it gets its chain there."""
    text = WORLD + "".join(
        f"---\napiVersion: v1\nkind: Service\nmetadata: {{name: {n}, namespace: {ns}}}\n"
        f"spec: {spec}\n"
        for (ns, n), spec in SERVICES.items()
    )
    res = build(load_texts([("world.yaml", text)]))
    graph = mesh_attach.build_mesh(res)
    assert graph.attached == [] and [r.reason for r in graph.refused] == ["NoMatchingParent"]
    wl = mesh_attach.sidecar_workload(res, "app/client")
    snap = translate_sidecar(res, graph, wl)
    (unset,) = resources(snap, "listeners")["outbound"].get("filter_chains", [])
    assert unset["name"] == "app/unset/80"
    assigned = res.services[("app", "unset")].cluster_ip
    assert (
        assigned and unset["filter_chain_match"]["prefix_ranges"][0]["address_prefix"] == assigned
    )
    registered = TranslateOptions(mesh_registry=frozenset({("legacy", "legacy")}))
    snap = translate_sidecar(res, graph, wl, registered)
    chains = resources(snap, "listeners")["outbound"]["filter_chains"]
    assert [c["name"] for c in chains] == ["app/unset/80", "legacy/legacy/80"]
    assert "mesh/legacy/legacy/80" in resources(snap, "clusters")


# ---------------------------------------------------------------- the command


def args(*more: str) -> list[str]:
    return ["translate", rel(BASE), rel(SCENARIO), *more]


def test_translate_proxy_writes_the_sidecar_and_without_it_the_edge(cli: CLI) -> None:  # noqa: F811
    sidecar_run = cli(*args("--proxy", "xlate-client/client"))
    assert sidecar_run.rc == 0, sidecar_run.err
    assert sidecar_run.out == dumps(translate_proxy(SCENARIO, "xlate-client", "client"))
    edge = cli(*args())
    assert edge.rc == 0 and edge.out == dumps(translate_scenario(SCENARIO))
    res = load_resources([rel(BASE), rel(SCENARIO)])
    (pod,) = pod_names(res.workloads[("Deployment", "xlate-client", "client")])
    assert cli(*args("--proxy", f"xlate-client/{pod}")).out == sidecar_run.out
    assert cli(*args("--proxy", "xlate-client/Deployment/client")).out == sidecar_run.out


@pytest.mark.parametrize(
    ("proxy", "more", "expected"),
    [
        ("xlate-client/clinet", (), "did you mean xlate-client/client? [unknown-proxy]"),
        ("edge-web/web-backend", (), "namespace edge-web is not mesh-registered"),
        ("xlate-client", (), "expected NAMESPACE/WORKLOAD [bad-proxy]"),
        ("xlate-client/client", ("--gateway-address", "a/b=10.0.0.1"), "[not-applicable]"),
    ],
)
def test_translate_proxy_refuses_what_it_cannot_write(
    cli: CLI,  # noqa: F811
    proxy: str,
    more: tuple[str, ...],
    expected: str,
) -> None:
    run = cli(*args("--proxy", proxy, *more))
    (line,) = run.error_lines()
    assert expected in line and run.out == ""


def test_translate_without_a_gateway_points_at_proxy(cli: CLI, tmp_path: Path) -> None:  # noqa: F811
    """Mesh routes and no Gateway: nothing for the edge, said as such, with the way to
    a sidecar's xDS."""
    mesh_only = tmp_path / "mesh.yaml"
    mesh_only.write_text((SCENARIO / "resources.yaml").read_text(encoding="utf-8"), "utf-8")
    (line,) = cli("translate", str(mesh_only)).error_lines()
    assert "[nothing-to-check]" in line and "--proxy NS/WORKLOAD" in line
    assert cli("translate", str(mesh_only), "--proxy", "xlate-client/client").rc == 0
