"""A new user's mesh input, as the GAMMA trial wrote it (tests/mesh_user_scenario.py).

What a user meets before any routing is judged: a mesh-only input (no Gateway) is
something to check in every command; the cases table's mistakes are all reported in
one run, at the field that is wrong, with a did-you-mean; live-only case fields a
mesh case cannot have are refused when the table is read; Services written without
``spec.clusterIP`` get the one a cluster would assign, the same in every command.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest
import yaml
from mesh_user_scenario import CASES, write
from test_check_cli import CLI, cli  # noqa: F401  (the fixture)

from verifier import features, pipeline
from verifier.gatewayapi.addresses import SERVICE_CIDR
from verifier.gatewayapi.resources import load_resources
from verifier.live import mesh_live
from verifier.live.envoy_process import envoy_available
from verifier.live.results import CaseResult, LiveReport, ScenarioRun
from verifier.report.conformance import Implementation, conformance_report
from verifier.suggest import wrong_part


def test_a_mesh_only_input_is_checked_by_every_command(cli: CLI, tmp_path: Path) -> None:  # noqa: F811
    """No Gateway, mesh routes: check, status, explain and translate --proxy judge or
    write it; translate without --proxy (the edge's xDS) has nothing to write."""
    folder = str(write(tmp_path / "mesh"))
    resources = f"{folder}/resources.yaml"
    checked = cli("check", folder)
    assert checked.rc == 0, checked.err
    assert "mesh requests judged" in checked.out and "0 errors" in checked.out
    status = cli("status", resources)
    assert status.rc == 0 and "-> Service payments/ledger port 8080: Accepted=True" in status.out
    url = "GET http://ledger.payments.svc.cluster.local:8080/reports/1"
    explained = cli("explain", resources, "--from", "storefront/web", "--request", url)
    assert explained.rc == 0 and "\nagree" in explained.out, explained.err
    (line,) = cli("explain", resources, "--request", url).error_lines()  # no Gateway to send to
    assert "[no-gateway]" in line and "--from NAMESPACE/WORKLOAD" in line
    table = cli("explain", resources, "--cases", f"{folder}/cases.yaml")
    assert table.rc == 0 and table.out.count("case expectation: spec met, Envoy met") == 4
    assert cli("translate", resources, "--proxy", "storefront/web").rc == 0
    (line,) = cli("translate", resources).error_lines()
    assert "[nothing-to-check]" in line and "--proxy NS/WORKLOAD" in line


PLAIN_CASE = """\
- name: to-v1-by-kube-proxy
  from: {namespace: payments, workload: batch}
  service: {namespace: payments, name: ledger-v1, port: 8080}
  expect: {status: 200, backend: ledger-v1, namespace: payments}
"""


def test_a_mesh_case_alone_is_something_to_check(cli: CLI, tmp_path: Path) -> None:  # noqa: F811
    """No Gateway and no route: a mesh case is kube-proxy's to answer, and is checked;
    with no case either, nothing would be: exit 2."""
    folder = write(tmp_path / "plain", PLAIN_CASE, routes=False)
    checked = cli("check", str(folder))
    assert checked.rc == 0 and "mesh requests judged" in checked.out, checked.err
    (folder / "cases.yaml").unlink()
    (line,) = cli("check", str(folder)).error_lines()
    assert "[nothing-to-check]" in line and "no mesh route" in line
    url = "GET http://ledger-v1.payments.svc.cluster.local:8080/"
    explained = cli("explain", str(folder), "--from", "payments/batch", "--request", url)
    assert explained.rc == 0, explained.err


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
@pytest.mark.skipif(mesh_live.mesh_unavailable() is not None, reason="needs root and nft")
def test_a_mesh_only_input_runs_live(cli: CLI, tmp_path: Path) -> None:  # noqa: F811
    """``run`` (check, then live) on the user's mesh-only scenario, its Services written
    without a ClusterIP: every case passes, sent to the ClusterIPs check assigned."""
    folder = str(write(tmp_path / "mesh", cluster_ips=False))
    ran = cli("run", folder, "--format", "json")
    assert ran.rc == 0, ran.err
    assert "edge-verify live: 4 passed, 0 failed" in ran.err
    ip = load_resources([folder]).services[("payments", "ledger")].cluster_ip
    sent = [c["request"] for c in ran.json()["cases"]]
    assert len(sent) == 4 and all(f" to {ip}:8080)" in line for line in sent), sent
    # its consumer-route cases ran: MeshConsumerRoute is tested, though no scenario is
    # named after it
    report = cli("live", folder, "--format", "conformance")
    (mesh,) = yaml.safe_load(report.out)["profiles"]
    assert "MeshConsumerRoute" in mesh["extended"]["supportedFeatures"], report.out


def test_what_the_in_mesh_client_cannot_send_is_refused_at_once(cli: CLI, tmp_path: Path) -> None:  # noqa: F811
    """h2c, a WebSocket upgrade or TLS on a mesh case: every case's problem in one run,
    at its field, by check as by live (live used to retry 60 s and blame Envoy)."""
    cases = CASES.replace("request: {path: /balance}", "request: {path: /balance, protocol: h2c}")
    cases = cases.replace(
        "request: {path: /reports/2026,", "request: {path: /reports/2026, scheme: https, sni: x,"
    )
    folder = write(tmp_path / "h2c", cases)
    for command in ("check", "live"):
        lines = cli(command, str(folder)).error_lines()
        assert [line.split(": ", 2)[1] for line in lines] == [
            "[1].request.protocol",
            "[2].request.scheme",
            "[3].request.protocol",
        ], lines
        assert "cleartext HTTP/1.1 by the in-mesh client" in lines[0]
        assert "no scheme https, sni" in lines[1]


def test_a_sidecar_dump_where_the_edge_is_read_says_what_each_command_does(
    cli: CLI,  # noqa: F811
    tmp_path: Path,
) -> None:
    """check takes --proxy for it; live and run do not (they serve every sidecar its
    reference xDS), so they point at check; a --translator was asked for the edge's."""
    folder = str(write(tmp_path / "mesh"))
    dump = str(tmp_path / "web.json")
    assert cli("translate", folder, "--proxy", "storefront/web", "-o", dump).rc == 0
    (line,) = cli("check", folder, "--xds", dump).error_lines()
    assert "[sidecar-xds]" in line and "name its workload with --proxy NAMESPACE/WORKLOAD" in line
    judged = cli("check", folder, "--xds", dump, "--proxy", "storefront/web")
    assert judged.rc == 0, judged.err
    # the edge's rules not run are said as the summary counts them: skipped, not warnings
    (unrun,) = [line for line in judged.err.splitlines() if "rules not run" in line]
    n = unrun.removeprefix("skipped: ").split()[0]
    assert unrun.startswith("skipped: ") and f" {n} skipped," in judged.out, judged.out
    assert "0 warnings" in judged.out and "warning:" not in judged.err
    for command in ("live", "run"):
        (line,) = cli(command, folder, "--xds", dump).error_lines()
        assert f"judged by check --xds {dump} --proxy NAMESPACE/WORKLOAD [sidecar-xds]" in line
    (line,) = cli("check", folder, "--translator", f"sh -c 'cat {dump}' sh").error_lines()
    assert "it was asked for the edge's (run without --proxy" in line, line


def test_every_wrong_reference_of_a_table_is_named_at_its_field(cli: CLI, tmp_path: Path) -> None:  # noqa: F811
    """The trial's table: a mistyped client, a port the Service lacks, a mistyped
    namespace (twice) and Service: all in one run, each at the field that is wrong,
    with what was meant."""
    cases = CASES.replace("workload: batch}", "workload: bacth}", 1)
    cases = cases.replace("namespace: storefront, workload", "namespace: store-front, workload")
    first, second, *rest = cases.split("- name:")[1:]
    second = second.replace("port: 8080}", "port: 8081}")
    rest[0] = rest[0].replace("name: ledger, port", "name: ledgr, port")
    folder = write(tmp_path / "refs", "- name:" + "- name:".join([first, second, *rest]))
    lines = cli("check", str(folder)).error_lines()
    said = [line.split(": ", 1)[1] for line in lines]
    assert said == [
        "[0].from.workload: no Deployment, StatefulSet or DaemonSet payments/bacth in the "
        "input: did you mean payments/batch? [not-found]",
        "[1].service.port: Service payments/ledger has no port 8081 (ports: 8080) [not-found]",
        "[2].from.namespace: no Deployment, StatefulSet or DaemonSet store-front/web in the "
        "input: did you mean storefront/web? [not-found]",
        "[2].service.name: no Service payments/ledgr in the input: did you mean "
        "payments/ledger? [not-found]",
        "[3].from.namespace: no Deployment, StatefulSet or DaemonSet store-front/web in the "
        "input: did you mean storefront/web? [not-found]",
    ], lines


@pytest.mark.parametrize(
    ("wanted", "said"),
    [
        (("payments", "bacth"), ("name", "payments/batch")),
        (("store-front", "web"), ("namespace", "storefront/web")),
        (("payments", "web"), ("namespace", "storefront/web")),  # web is in another one
        (("storefrnt", "wbe"), ("namespace", "storefront/web")),
        (("payments", "zzz"), ("name", None)),  # not like batch: the parts compared alone
        (("zzz", "qqq"), ("namespace", None)),
    ],
)
def test_the_wrong_part_of_a_reference(wanted: tuple[str, str], said: tuple[str, object]) -> None:
    refs = {("payments", "batch"), ("payments", "ledger-v1"), ("storefront", "web")}
    assert wrong_part(*wanted, refs) == said


def test_one_lookup_names_a_client_everywhere(cli: CLI, tmp_path: Path) -> None:  # noqa: F811
    """explain --from, translate --proxy and a case's from: offer the same name."""
    folder = str(write(tmp_path / "mesh"))
    url = "GET http://ledger.payments.svc.cluster.local:8080/"
    (line,) = cli("explain", folder, "--from", "storefront/wbe", "--request", url).error_lines()
    assert line.startswith("--from: ") and "did you mean storefront/web?" in line
    (line,) = cli("translate", folder, "--proxy", "storefront/wbe").error_lines()
    assert line.startswith("--proxy: ") and "did you mean storefront/web?" in line
    # a client certificate is refused for a mesh request before its file is read
    no_file = str(tmp_path / "nowhere.pem")
    args = ("--from", "storefront/web", "--request", url, "--client-cert-issuer", no_file)
    (line,) = cli("explain", folder, *args).error_lines()
    assert line.startswith("--client-cert-issuer: a client certificate does not go with --from")


def test_a_service_without_a_cluster_ip_gets_one_every_command_uses(
    cli: CLI,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Real manifests leave spec.clusterIP out: the one assigned at load is where
    translate --proxy's chain matches, check and explain send, and a note says it."""
    folder = str(write(tmp_path / "noip", cluster_ips=False))
    res = load_resources([folder])
    ips = {k[1]: svc.cluster_ip for k, svc in res.services.items()}
    assert len(set(ips.values())) == 3
    assert all(
        ipaddress.ip_address(ip) in ipaddress.ip_network(SERVICE_CIDR) for ip in ips.values()
    )
    assert ips == {k[1]: s.cluster_ip for k, s in load_resources([folder]).services.items()}
    assert sum("has no spec.clusterIP: assigned" in w for w in res.warnings) == 3
    dump = cli("translate", folder, "--proxy", "storefront/web")
    chains = json.loads(dump.out)["configs"][2]["dynamic_listeners"][0]["active_state"]
    prefixes = {
        r["address_prefix"]
        for c in chains["listener"]["filter_chains"]
        for r in c["filter_chain_match"].get("prefix_ranges", [])
    }
    assert prefixes == set(ips.values())
    checked = cli("check", folder)
    assert checked.rc == 0 and "0 errors" in checked.out, checked.err
    table = cli("explain", folder, "--cases", f"{folder}/cases.yaml")
    assert table.out.count("case expectation: spec met, Envoy met") == 4, table.out
    assert f"to {ips['ledger']}:8080)" in table.out
    # an explicit one is kept
    given = load_resources([str(write(tmp_path / "given"))]).services
    assert given[("payments", "ledger")].cluster_ip == "10.96.10.10"


def test_a_headless_service_is_no_mesh_case_frontend(cli: CLI, tmp_path: Path) -> None:  # noqa: F811
    folder = write(tmp_path / "headless")
    text = (folder / "resources.yaml").read_text(encoding="utf-8")
    (folder / "resources.yaml").write_text(text.replace("10.96.10.10", "None"), "utf-8")
    lines = cli("check", str(folder)).error_lines()
    assert len(lines) == 4 and all("[no-cluster-ip]" in line for line in lines), lines
    assert "].service: Service payments/ledger is headless (clusterIP: None)" in lines[0]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("cases.yaml", ":1: this is a cases table (give it with --cases); a mesh registry"),
        ("list.yaml", ":1: a mesh registry file holds one mapping, services:"),
        ("resources.yaml", "this holds Kubernetes objects (kind Deployment, HTTPRoute,"),
    ],
)
def test_a_file_that_is_no_mesh_registry_says_what_one_holds(
    given: str,
    said: str,
    cli: CLI,  # noqa: F811
    tmp_path: Path,
) -> None:
    folder = write(tmp_path / "mesh")
    (tmp_path / "list.yaml").write_text("- payments/ledger\n", encoding="utf-8")
    path = tmp_path / given if given == "list.yaml" else folder / given
    (line,) = cli("check", str(folder), "--mesh-registry", str(path)).error_lines()
    assert line.startswith(str(path)) and said in line and "[not-registry]" in line


def test_a_consumer_route_case_tests_mesh_consumer_route_whatever_the_scenario_name(
    tmp_path: Path,
) -> None:
    """The trial's scenario is named after nothing; its storefront cases, from the
    namespace of a consumer route to payments/ledger, test MeshConsumerRoute, and the
    ConformanceReport says so (it listed it unsupported). batch's cases (the producer's
    namespace) do not."""
    folder = write(tmp_path / "trial")
    res = load_resources([str(folder)])
    cases, _lines = pipeline.load_cases(str(folder / "cases.yaml"))
    assert features.exercised(res, cases[:2]) == frozenset()
    assert features.exercised(res, cases[2:3]) == {"MeshConsumerRoute"}
    result = CaseResult("trial", "c", "case", True, 1, "GET /", {}, {}, True, True, "")
    for exercised, listed in (
        ((), "unsupportedFeatures"),
        (("MeshConsumerRoute",), "supportedFeatures"),
    ):
        run = ScenarioRun("trial", (result,), rewritten=False, mesh=True, features=exercised)
        (mesh,) = conformance_report(LiveReport([run]), Implementation())["profiles"]
        assert "MeshConsumerRoute" in mesh["extended"][listed]
