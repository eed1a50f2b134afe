"""`check --xds DUMP --proxy NS/WORKLOAD`: a sidecar's xDS from elsewhere, judged.

The dump is what `translate --proxy` writes (the reference translator's), then broken
by hand the way docs/mesh.md says a sidecar translator goes wrong. Each mistake must be
one ERROR finding at the HTTPRoute it breaks (at the Service when no route is
involved), carrying a request from that client that shows it; the reference dump must
be clean. The mistakes: a route on the wrong Service, a consumer route leaking into
another namespace's client, a producer route left where the consumer route replaces
it, a parentRef.port ignored, a redirect's port left to the Host header, cleartext to
a mesh backend (no transport socket, or a frontend passed through), the wrong SAN.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, load_scenario
from test_check_cli import CLI, cli, scenario_args, section  # noqa: F401  (the fixture)

from verifier.cli import main
from verifier.findings import hint, new

Dump = dict[str, Any]


def sidecar_dump(out: Path, scenario: str, proxy: str) -> Dump:
    """``edge-verify translate base scenario --proxy PROXY -o out``, as JSON."""
    rc = main(["translate", *scenario_args(scenario), "--proxy", proxy, "-o", str(out)])
    assert rc == 0
    doc: Dump = json.loads(out.read_text(encoding="utf-8"))
    return doc


def route_table(doc: Dump, name: str) -> dict[str, Any]:
    """The routes of RouteConfiguration ``name``'s one virtual host."""
    configs = section(doc, "Routes")["dynamic_route_configs"]
    rc = next(c["route_config"] for c in configs if c["route_config"]["name"] == name)
    (vhost,) = rc["virtual_hosts"]
    found: dict[str, Any] = vhost
    return found


def cluster(doc: Dump, name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(
        c["cluster"]
        for c in section(doc, "Clusters")["dynamic_active_clusters"]
        if c["cluster"]["name"] == name
    )
    return found


def _outbound(doc: Dump) -> dict[str, Any]:
    """The sidecar's outbound listener."""
    listeners = section(doc, "Listeners")["dynamic_listeners"]
    (found,) = [
        lst["active_state"]["listener"]
        for lst in listeners
        if lst["active_state"]["listener"]["name"] == "outbound"
    ]
    out: dict[str, Any] = found
    return out


def outbound_chain(doc: Dump, name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in _outbound(doc)["filter_chains"] if c["name"] == name)
    return found


def check(cli: CLI, scenario: str, dump: Path, proxy: str) -> tuple[int, dict[str, Any]]:  # noqa: F811
    r = cli(
        "check", *scenario_args(scenario), "--xds", str(dump), "--proxy", proxy,
        "--format", "json",
    )  # fmt: skip
    assert "Traceback" not in r.err and r.rc in (0, 1), r.err
    doc: dict[str, Any] = r.json()
    return r.rc, doc


CONSUMER = "mesh-consumer-route"
APPS, CLIENTS = "mesh-apps/client", "mesh-client/client"
ECHO_V1, ECHO_V2 = "10.96.41.1", "10.96.41.2"


def _wrong_service(doc: Dump, _other: Dump) -> None:
    """echo-v1:80's filter chain routes over echo-v2's route table."""
    hcm = outbound_chain(doc, "mesh-apps/echo-v1/80")["filters"][0]["typed_config"]
    hcm["rds"]["route_config_name"] = "outbound/mesh-apps/echo-v2/80"


def _consumer_leaks(doc: Dump, other: Dump) -> None:
    """mesh-client's route table for echo-v2:80 (its consumer route) in mesh-apps/client's."""
    table = "outbound/mesh-apps/echo-v2/80"
    route_table(doc, table)["routes"] = route_table(other, table)["routes"]


def _producer_kept(doc: Dump, other: Dump) -> None:
    """mesh-client/client keeps echo-v2's producer route beside its consumer route."""
    table = "outbound/mesh-apps/echo-v2/80"
    route_table(doc, table)["routes"] += route_table(other, table)["routes"]


def _port_ignored(doc: Dump, _other: Dump) -> None:
    """echo-v1's route for port 80 (parentRef.port: 80) also routes port 8080."""
    routes = route_table(doc, "outbound/mesh-apps/echo-v1/80")["routes"]
    route_table(doc, "outbound/mesh-apps/echo-v1/8080")["routes"] = routes


def _redirect_port_left_to_the_host(doc: Dump, _other: Dump) -> None:
    """echo:80's scheme redirect (rule 0) without port_redirect: Envoy keeps a port the
    Host names (a client calling echo:80 as echo...:8080 is sent to https :8080)."""
    (route,) = [
        r
        for r in route_table(doc, "outbound/mesh-apps/echo/80")["routes"]
        if r["name"] == "mesh-apps/echo-scheme-redirect/rule/0/match/0"
    ]
    assert route["redirect"].pop("port_redirect") == 443


def _cleartext(doc: Dump, _other: Dump) -> None:
    del cluster(doc, "mesh/mesh-apps/echo-v1/80")["transport_socket"]


def _passed_through(doc: Dump, _other: Dump) -> None:
    """echo-v1:80's chain matches another address: its traffic takes the passthrough."""
    match = outbound_chain(doc, "mesh-apps/echo-v1/80")["filter_chain_match"]
    match["prefix_ranges"][0]["address_prefix"] = "10.96.41.99"


def _tunnel_sni_of_another_service(doc: Dump, _other: Dump) -> None:
    """echo-v1's pods dialled with the SNI of echo-v2's port: their inbound refuses it
    (the Envoy model, which takes the pod's Service from the directory, does not show it)."""
    tls = cluster(doc, "mesh/mesh-apps/echo-v1/80")["transport_socket"]["typed_config"]
    tls["sni"] = "80.echo-v2.mesh-apps.svc.cluster.local"


def _wrong_san(doc: Dump, _other: Dump) -> None:
    found = cluster(doc, "mesh/mesh-apps/echo-v1/80")
    text = json.dumps(found).replace("/sa/echo-v1", "/sa/echo-v2")
    assert text != json.dumps(found)
    found.clear()
    found.update(json.loads(text))


@dataclass(frozen=True)
class Mistake:
    id: str
    scenario: str
    proxy: str
    other: str  # the proxy whose dump the edit may borrow from
    edit: Callable[[Dump, Dump], None]
    code: str
    route: tuple[str, str]  # the HTTPRoute the finding is at
    frontend: str  # the ClusterIP the finding's request is sent to
    # EV921: which it did (the catalogue's hint and its values), to which namespace
    effect: tuple[str, dict[str, str]] | None = None


MISTAKES = (
    Mistake("route-on-the-wrong-service", CONSUMER, APPS, CLIENTS, _wrong_service, "EV922",
            ("mesh-apps", "echo-v2-producer"), ECHO_V1),
    Mistake("consumer-route-leaks", CONSUMER, APPS, CLIENTS, _consumer_leaks, "EV921",
            ("mesh-client", "echo-v2-consumer"), ECHO_V2,
            ("consumer-route-leaked", {"route": "HTTPRoute mesh-client/echo-v2-consumer",
                                       "namespace": "mesh-client"})),
    Mistake("producer-route-kept", CONSUMER, CLIENTS, APPS, _producer_kept, "EV921",
            ("mesh-client", "echo-v2-consumer"), ECHO_V2,
            ("consumer-route-outranked", {"route": "HTTPRoute mesh-client/echo-v2-consumer",
                                          "producer": "HTTPRoute mesh-apps/echo-v2-producer"})),
    Mistake("parent-ref-port-ignored", "mesh-ports", APPS, CLIENTS, _port_ignored, "EV220",
            ("mesh-apps", "echo-v1-port-80"), ECHO_V1),
    Mistake("redirect-port-left-to-the-host", "mesh-scheme-redirect", APPS, CLIENTS,
            _redirect_port_left_to_the_host, "EV211", ("mesh-apps", "echo-scheme-redirect"),
            "10.96.41.3"),
    Mistake("cleartext-to-a-mesh-backend", CONSUMER, APPS, CLIENTS, _cleartext, "EV919",
            ("mesh-apps", "echo-v1-producer"), ECHO_V1),
    Mistake("frontend-passed-through-in-cleartext", CONSUMER, APPS, CLIENTS, _passed_through,
            "EV919", ("mesh-apps", "echo-v1-producer"), ECHO_V1),
    Mistake("tunnel-sni-of-another-service", CONSUMER, APPS, CLIENTS,
            _tunnel_sni_of_another_service, "EV919", ("mesh-apps", "echo-v1-producer"), ECHO_V1),
    Mistake("wrong-san", CONSUMER, APPS, CLIENTS, _wrong_san, "EV920",
            ("mesh-apps", "echo-v1-producer"), ECHO_V1),
)  # fmt: skip


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """The reference translator's sidecar dump of each (scenario, proxy) the tests use."""
    folder = tmp_path_factory.mktemp("sidecars")
    out = {}
    wanted = {(m.scenario, p) for m in MISTAKES for p in (m.proxy, m.other)}
    for key in sorted(wanted | {(CONSUMER, "mesh-apps/echo-v1")}):
        path = folder / f"{key[0]}.{key[1].replace('/', '.')}.json"
        sidecar_dump(path, *key)
        out[key] = path
    return out


def _route_lines(scenario: str, key: tuple[str, str]) -> tuple[str, set[int]]:
    """The file of HTTPRoute ``key`` and the lines a finding about it may name: the
    route, each rule, each match and each filter (what a filter does)."""
    res, _graph = load_scenario(FIXTURES / scenario)
    route = res.httproutes[key]
    paths = [""]
    for i, rule in enumerate(route.rules):
        paths += [f"spec.rules[{i}]"]
        paths += [f"spec.rules[{i}].matches[{j}]" for j in range(len(rule.matches))]
        paths += [f"spec.rules[{i}].filters[{j}]" for j in range(len(rule.filters))]
    wheres = [route.meta.where(p) for p in paths]
    return wheres[0].file, {w.line for w in wheres}


@pytest.mark.parametrize("proxy", [APPS, CLIENTS, "mesh-apps/echo-v1"])
def test_the_reference_sidecar_dump_is_clean(
    proxy: str,
    dumps: dict[tuple[str, str], Path],
    cli: CLI,  # noqa: F811
) -> None:
    rc, doc = check(cli, CONSUMER, dumps[(CONSUMER, proxy)], proxy)
    assert (rc, doc["findings"]) == (0, [])
    summary = doc["summary"]
    assert summary["errors"] == 0 and summary["mesh_requests"] > 0
    # The other clients' requests are said to be unjudged, never passed silently.
    assert summary["mesh_unjudged"] > 0


@pytest.mark.parametrize("mistake", MISTAKES, ids=lambda m: m.id)
def test_a_sidecar_mistake_is_an_error_at_the_httproute_with_a_request(
    mistake: Mistake,
    dumps: dict[tuple[str, str], Path],
    tmp_path: Path,
    cli: CLI,  # noqa: F811
) -> None:
    doc = json.loads(dumps[(mistake.scenario, mistake.proxy)].read_text(encoding="utf-8"))
    other = json.loads(dumps[(mistake.scenario, mistake.other)].read_text(encoding="utf-8"))
    mistake.edit(doc, other)
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(doc), encoding="utf-8")
    rc, report = check(cli, mistake.scenario, broken, mistake.proxy)
    assert rc == 1
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert [(f["code"], f["resource"]) for f in errors] == [
        (mistake.code, "HTTPRoute {}/{}".format(*mistake.route))
    ], report["findings"]
    (found,) = errors
    file, lines = _route_lines(mistake.scenario, mistake.route)
    where, _colon, line = found["location"].rpartition(":")
    assert where == file and int(line) in lines
    request = found["request"]
    namespace, workload = mistake.proxy.split("/")
    assert request["source"] == {"namespace": namespace, "workload": workload}
    assert request["address"] == mistake.frontend
    if "expected" in found:  # the request shows it: the models answer it differently
        assert found["expected"] != found["actual"]
    if mistake.effect is not None:  # which of the consumer route's mistakes, and to whom
        key, values = mistake.effect
        effect = hint(key, **values)
        said = new(found["code"], "", effect=effect, client_namespace=namespace, diff="")
        assert found["message"].startswith(said.message.removesuffix(": "))


def test_no_route_table_for_an_unrouted_service_is_reported_at_the_service(
    dumps: dict[tuple[str, str], Path],
    tmp_path: Path,
    cli: CLI,  # noqa: F811
) -> None:
    """The route to the Service itself gone: 404 where kube-proxy reaches the Service."""
    doc = json.loads(dumps[(CONSUMER, APPS)].read_text(encoding="utf-8"))
    route_table(doc, "outbound/mesh-apps/echo/80")["routes"] = []
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(doc), encoding="utf-8")
    rc, report = check(cli, CONSUMER, broken, APPS)
    assert rc == 1
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert [(f["code"], f["resource"]) for f in errors] == [("EV923", "Service mesh-apps/echo")]
    assert errors[0]["request"]["address"] == "10.96.41.3"
    assert errors[0]["actual"]["status"] == 404 and errors[0]["expected"]["status"] == 200


def test_a_sidecar_dump_without_proxy_and_proxy_without_xds_are_bad_input(
    dumps: dict[tuple[str, str], Path],
    cli: CLI,  # noqa: F811
) -> None:
    dump = str(dumps[(CONSUMER, APPS)])
    r = cli("check", *scenario_args(CONSUMER), "--xds", dump)
    assert r.rc == 2 and "--proxy" in r.err and "Traceback" not in r.err, r.err
    r = cli("check", *scenario_args(CONSUMER), "--proxy", APPS)
    assert r.rc == 2 and r.err.startswith("--proxy:") and "Traceback" not in r.err, r.err
    r = cli("check", *scenario_args(CONSUMER), "--xds", dump, "--proxy", "mesh-apps/nobody")
    assert r.rc == 2 and "Traceback" not in r.err, r.err


WSS_SERVICE = """\
apiVersion: v1
kind: Service
metadata:
  name: echo-tunnel
  namespace: mesh-apps
spec:
  clusterIP: 10.96.41.9
  selector: {app: echo, version: v1}
  ports:
  - {name: http, protocol: TCP, port: 80, targetPort: 3000}
  - {name: wss, protocol: TCP, port: 443, targetPort: 3000, appProtocol: kubernetes.io/wss}
"""


def test_a_frontend_passed_through_is_cleartext_unless_the_sidecar_cannot_speak_http_to_it(
    tmp_path: Path,
    cli: CLI,  # noqa: F811
) -> None:
    """The reference sidecar passes a wss port through (it does not speak HTTP there:
    docs/mesh.md) and check accepts that; an HTTP port of the same mesh Service passed
    through is cleartext between mesh workloads (EV919, at the Service: no route)."""
    scenario = tmp_path / "mesh-tunnel"
    scenario.mkdir()
    (scenario / "resources.yaml").write_text(WSS_SERVICE, encoding="utf-8")
    args = [*scenario_args("mesh-basic")[:1], str(scenario)]
    dump = tmp_path / "sidecar.json"
    assert main(["translate", *args, "--proxy", APPS, "-o", str(dump)]) == 0
    doc = json.loads(dump.read_text(encoding="utf-8"))
    chains = {c["name"] for c in _outbound(doc)["filter_chains"]}
    assert "mesh-apps/echo-tunnel/80" in chains and "mesh-apps/echo-tunnel/443" not in chains
    r = cli("check", *args, "--format", "json")
    assert (r.rc, r.json()["findings"]) == (0, [])
    r = cli("check", *args, "--xds", str(dump), "--proxy", APPS, "--format", "json")
    assert (r.rc, r.json()["findings"]) == (0, [])
    _outbound(doc)["filter_chains"] = [
        c for c in _outbound(doc)["filter_chains"] if c["name"] != "mesh-apps/echo-tunnel/80"
    ]
    dump.write_text(json.dumps(doc), encoding="utf-8")
    r = cli("check", *args, "--xds", str(dump), "--proxy", APPS, "--format", "json")
    errors = [f for f in r.json()["findings"] if f["severity"] == "error"]
    assert r.rc == 1
    assert [(f["code"], f["resource"]) for f in errors] == [
        ("EV919", "Service mesh-apps/echo-tunnel")
    ]
    assert errors[0]["request"]["address"] == "10.96.41.9" and errors[0]["request"]["port"] == 80


def _inbound_chain(doc: Dump, name: str) -> dict[str, Any]:
    listeners = section(doc, "Listeners")["dynamic_listeners"]
    (inbound,) = [
        lst["active_state"]["listener"]
        for lst in listeners
        if lst["active_state"]["listener"]["name"] == "inbound"
    ]
    found: dict[str, Any] = next(c for c in inbound["filter_chains"] if c["name"] == name)
    return found


def _san(chain: dict[str, Any]) -> dict[str, Any]:
    tls = chain["transport_socket"]["typed_config"]["common_tls_context"]
    found: dict[str, Any] = tls["combined_validation_context"]["default_validation_context"]
    return found["match_typed_subject_alt_names"][0]["matcher"]


ECHO_V1_IN = "inbound/mesh-apps/echo-v1/80"
INBOUND_MISTAKES = {
    "no-client-certificate-required": (
        lambda c: c["transport_socket"]["typed_config"].pop("require_client_certificate"),
        "admits a connection without a client certificate",
    ),
    "any-trust-domain": (
        lambda c: _san(c).update(prefix="spiffe://"),
        "admits a client certificate of another trust domain",
    ),
    "another-trust-domain-only": (
        lambda c: _san(c).update(prefix="spiffe://other.example/"),
        "refuses a mesh peer's connection",
    ),
    "another-services-sni": (
        lambda c: c["filter_chain_match"].update(
            server_names=["80.echo-v2.mesh-apps.svc.cluster.local"]
        ),
        "refuses a mesh peer's connection",
    ),
}


@pytest.mark.parametrize("mistake", sorted(INBOUND_MISTAKES))
def test_an_inbound_mistake_is_an_error_at_the_service_port(
    mistake: str,
    tmp_path: Path,
    cli: CLI,  # noqa: F811
) -> None:
    """A sidecar's :15008 (the reference's on echo-v1, then broken): admits exactly mutual
    TLS from the trust domain, for the SNI of each Service port, to its targetPort."""
    proxy = "mesh-apps/echo-v1"
    dump = tmp_path / "echo-v1.json"
    doc = sidecar_dump(dump, "mesh-basic", proxy)
    edit, problem = INBOUND_MISTAKES[mistake]
    edit(_inbound_chain(doc, ECHO_V1_IN))
    dump.write_text(json.dumps(doc), encoding="utf-8")
    rc, report = check(cli, "mesh-basic", dump, proxy)
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert rc == 1
    assert [(f["code"], f["resource"]) for f in errors] == [("EV924", "Service mesh-apps/echo-v1")]
    assert problem in errors[0]["message"]
    res, _graph = load_scenario(FIXTURES / "mesh-basic")
    port = res.services[("mesh-apps", "echo-v1")].meta.where("spec.ports[0]")
    assert errors[0]["location"] == f"{port.file}:{port.line}"
    assert errors[0]["request"]["port"] == 15008


def _foreign(doc: Dump) -> Dump:
    """``doc`` as another implementation might write it: every name of ours replaced
    (clusters, route tables, chains, routes) and no route metadata (which HTTPRoute a
    route was made from)."""

    def strip(value: object) -> None:
        if isinstance(value, dict):
            value.pop("metadata", None)
            for v in value.values():
                strip(v)
        elif isinstance(value, list):
            for v in value:
                strip(v)

    strip(doc)
    text = json.dumps(doc)
    ours = set(re.findall(r'": "((?:mesh|k8s|outbound|inbound)/[^"]+)"', text))
    for i, name in enumerate(sorted(ours, key=len, reverse=True)):
        text = text.replace(f'"{name}"', f'"other-{i}"')
    found: Dump = json.loads(text)
    return found


@pytest.mark.parametrize("proxy", [APPS, CLIENTS])
def test_a_sidecar_dump_named_otherwise_is_judged_on_what_it_does(
    proxy: str,
    dumps: dict[tuple[str, str], Path],
    tmp_path: Path,
    cli: CLI,  # noqa: F811
) -> None:
    """No decision rests on our names or route metadata: renamed and stripped, the
    reference dump is clean, and a consumer route leaking into it is still an error."""
    doc = json.loads(dumps[(CONSUMER, proxy)].read_text(encoding="utf-8"))
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps(_foreign(doc)), encoding="utf-8")
    rc, report = check(cli, CONSUMER, foreign, proxy)
    assert (rc, report["findings"]) == (0, [])
    other = APPS if proxy == CLIENTS else CLIENTS
    other_doc = json.loads(dumps[(CONSUMER, other)].read_text(encoding="utf-8"))
    table = "outbound/mesh-apps/echo-v2/80"
    route_table(doc, table)["routes"] = route_table(other_doc, table)["routes"]
    foreign.write_text(json.dumps(_foreign(doc)), encoding="utf-8")
    rc, report = check(cli, CONSUMER, foreign, proxy)
    assert rc == 1 and any(f["severity"] == "error" for f in report["findings"])
