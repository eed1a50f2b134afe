"""Each Gateway its own address (the aether edge's default), and the shared mode.

The conformance suite's base shape, several Gateways on port 80 without hostnames,
is served per Gateway: both models and real Envoy (tests/test_live_fixtures.py on
fixtures/gateway-multiple-gateways-same-port) see each Gateway answer only its own
routes. Here: the address assignment, the Envoy model choosing listeners by
destination, the Host a client sends, shared-mode conflicts in status, and xDS whose
listeners cannot be attributed to Gateways.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import BASE, FIXTURES, load_scenario, rel, translate_scenario
from live_suite import SuiteRun
from test_check_cli import CLI, cli  # noqa: F401  (the fixture)

from verifier.check import Context
from verifier.gatewayapi.addresses import (
    DEFAULT_CIDR,
    SHARED,
    AddressError,
    Addressing,
    assign,
    gateway_addresses,
    parse_fixed,
)
from verifier.live.envoy_process import envoy_available
from verifier.semantics.directory import backend_directory_from
from verifier.semantics.envoy.model import NO_RESPONSE, EnvoyModel
from verifier.semantics.request import Backend, Request, sent_to

CONTROLLER = "gateway.aether.io/edge"
SAME_PORT = FIXTURES / "gateway-multiple-gateways-same-port"
CONFLICT = FIXTURES / "gateway-shared-address-conflict"


# ---------------------------------------------------------------- assignment


def _keys(n: int) -> list[tuple[tuple[str, str], tuple[tuple[str, str], ...]]]:
    return [((f"ns{i % 7}", f"gw-{i}"), ()) for i in range(n)]


def test_assigned_addresses_are_unique_stable_and_in_the_cidr() -> None:
    gateways = _keys(120)
    first = assign(gateways)
    assert len(set(first.values())) == 120
    net = ipaddress.ip_network(DEFAULT_CIDR)
    assert all(ipaddress.ip_address(ip) in net for ip in first.values())
    assert all(not ip.endswith((".0", ".255")) for ip in first.values())
    assert assign(list(reversed(gateways))) == first  # order of input does not matter
    # Adding a Gateway moves no other one unless it takes a colliding slot.
    few = assign(_keys(5))
    more = assign(_keys(6))
    assert {k: more[k] for k in few} == few


def test_requested_and_fixed_addresses_win_and_shared_mode_is_one_address() -> None:
    gateways = [(("a", "one"), (("IPAddress", "10.0.0.7"),)), (("a", "two"), ())]
    found = assign(gateways)
    assert found[("a", "one")] == "10.0.0.7"
    fixed = assign(gateways, fixed={("a", "two"): "10.0.0.9"})
    assert fixed[("a", "two")] == "10.0.0.9"
    shared = assign(gateways, mode=SHARED)
    assert set(shared.values()) == {"192.0.2.1"}
    with pytest.raises(AddressError):
        assign(gateways, cidr="10.0.0.0/31")
    with pytest.raises(AddressError):
        parse_fixed("no-slash=1.2.3.4")
    assert parse_fixed("ns/gw=2001:db8::1") == (("ns", "gw"), "2001:db8::1", ())
    assert parse_fixed("ns/gw=2001:db8::1:80>10080,443>10443") == (
        ("ns", "gw"),
        "2001:db8::1",
        ((80, 10080), (443, 10443)),
    )
    with pytest.raises(AddressError):
        parse_fixed("ns/gw=10.0.0.1:80>0")


# ---------------------------------------------------------------- the Envoy model


def _model(scenario: Path) -> tuple[EnvoyModel, dict[tuple[str, str], str], Any]:
    res, _ = load_scenario(scenario)
    snap = translate_scenario(scenario)
    where = gateway_addresses(res, CONTROLLER, Addressing())
    return EnvoyModel(snap, backend_directory_from(res)), where, snap


def test_the_envoy_model_picks_the_listener_by_destination(repo_cwd: Path) -> None:
    model, where, snap = _model(SAME_PORT)
    b = where[("edge-infra", "gateway-b")]
    a = where[("edge-infra", "same-namespace")]
    to_b = Request(host="any.example", path="/gateway-b", address=b)
    assert model.evaluate(to_b).outcome.backends == (Backend("edge-web", "web-backend", 8080),)
    assert model.evaluate(dataclasses.replace(to_b, address=a)).outcome.status == 404
    nowhere = dataclasses.replace(to_b, address="192.0.2.250")
    assert model.evaluate(nowhere).outcome.status == NO_RESPONSE
    # A wildcard listener takes what no exact address claims, and only that.
    wild = [li for li in snap.listeners if li.name.endswith("gateway-b-80")]
    wild[0].address.socket_address.address = "0.0.0.0"
    rebound = EnvoyModel(snap, backend_directory_from(load_scenario(SAME_PORT)[0]))
    assert rebound.evaluate(nowhere).outcome.status == 200
    assert rebound.evaluate(dataclasses.replace(to_b, address=a)).outcome.status == 404


def test_a_case_without_host_is_sent_with_the_gateway_address(repo_cwd: Path) -> None:
    res, _ = load_scenario(SAME_PORT)
    ctx = Context(res, translate_scenario(SAME_PORT))
    a = ctx.addresses[("edge-infra", "same-namespace")]
    sent = ctx.sent(("edge-infra", "same-namespace"), Request(port=80, path="/gateway-a"))
    assert (sent.address, sent.host) == (a, a)
    on_8080 = ctx.sent(("edge-infra", "all-namespaces"), Request(port=8080))
    assert on_8080.host == f"{ctx.addresses[('edge-infra', 'all-namespaces')]}:8080"
    assert sent_to(Request(host="x.example", port=80), "2001:db8::5").host == "x.example"
    assert sent_to(Request(port=443, scheme="https"), "2001:db8::5").host == "[2001:db8::5]"


# ---------------------------------------------------------------- one way to send a case


def _answer(outcome: dict[str, Any]) -> tuple[int, list[str]]:
    """What a case is answered: the status and the Services that served it."""
    return outcome["status"], sorted(f"{b['namespace']}/{b['name']}" for b in outcome["backends"])


def _without_host() -> list[dict[str, Any]]:
    """The same-port fixture's cases that give no Host: four Gateways on port 80, as in
    the upstream conformance base, so only the address says which Gateway answers."""
    items = yaml.safe_load((SAME_PORT / "cases.yaml").read_text(encoding="utf-8"))
    found = [c for c in items if "host" not in c["request"]]
    assert {c["gateway"]["name"] for c in found} == {
        "same-namespace",
        "gateway-b",
        "gateway-c",
        "gateway-d",
    }
    return found


def _explained(run: CLI) -> dict[str, dict[str, Any]]:
    r = run(
        "explain",
        rel(BASE),
        rel(SAME_PORT),
        "--cases",
        rel(SAME_PORT / "cases.yaml"),
        "--format",
        "json",
    )
    assert r.rc == 0, r.err
    return {e["name"]: e for e in r.json()}


def _sent(request: dict[str, Any]) -> str:
    keys = ("method", "scheme", "host", "port", "address", "path")
    return Request(**{k: request[k] for k in keys}).line()


def test_explain_and_check_send_a_case_alike(cli: CLI, tmp_path: Path) -> None:  # noqa: F811
    """`explain --cases` replayed each case on whichever listener took the port, with an
    empty Host, and answered 404 where check answers 200. Both now aim through one
    function (verifier/destinations.py): for each case, check's two models (shown by
    EV703 when the expectation is one no answer meets) answer as explain's do."""
    bare = _without_host()
    unmet = [{**c, "name": f"unmet-{c['name']}", "expect": {"status": 418}} for c in bare]
    table = tmp_path / "unmet.yaml"
    table.write_text(yaml.safe_dump(unmet), encoding="utf-8")
    checked = cli("check", rel(BASE), rel(SAME_PORT), "--cases", str(table), "--format", "json")
    assert checked.rc == 1, checked.err
    explained = _explained(cli)
    where = gateway_addresses(load_scenario(SAME_PORT)[0], CONTROLLER, Addressing())
    for case in bare:
        ex = explained[case["name"]]
        assert ex["spec_meets_expectation"] and ex["envoy_meets_expectation"], ex["differs_in"]
        address = where[(case["gateway"]["namespace"], case["gateway"]["name"])]
        assert (ex["request"]["address"], ex["request"]["host"]) == (address, address)
        answers = [
            _answer(outcome)
            for f in checked.json()["findings"]
            if f["resource"] == f"case unmet-{case['name']}"
            for outcome in (
                (f["expected"], f["actual"]) if f["code"] == "EV703" else (f["actual"],)
            )
        ]
        assert answers == [_answer(ex["spec"])] * 2 == [_answer(ex["envoy"])] * 2, case["name"]


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
def test_a_case_without_host_gets_one_answer_from_explain_check_and_live(
    cli: CLI,  # noqa: F811
    fixtures_run: SuiteRun,
) -> None:
    """Done when (issue 31): the same upstream-style multi-Gateway case gives the same
    answer in `explain --cases`, `check --cases` and `live`. Live is the session's one
    `run fixtures/` (tests/live_suite.py), which also checked the scenario: its cases
    passed both ways, and real Envoy was sent the request explain shows."""
    explained = _explained(cli)
    for case in _without_host():
        ex = explained[case["name"]]
        live = fixtures_run.case(SAME_PORT.name, case["name"])
        assert live["passed"] and live["spec_agrees"] and live["envoy_model_agrees"], live
        assert live["request"] == _sent(ex["request"])
        assert _answer(live["observed"]) == _answer(ex["spec"]) == _answer(ex["envoy"])


# ---------------------------------------------------------------- shared addressing


def _status(run: CLI, scenario: Path, *extra: str) -> list[dict[str, Any]]:
    r = run("status", rel(BASE), rel(scenario), "--format", "yaml", *extra)
    assert r.rc == 0, r.err
    return list(yaml.safe_load_all(r.out))


def _listener(docs: list[dict[str, Any]], ns: str, name: str) -> dict[str, str]:
    (gw,) = [
        d
        for d in docs
        if d["kind"] == "Gateway"
        and (d["metadata"]["namespace"], d["metadata"]["name"]) == (ns, name)
    ]
    (lst,) = [x for x in gw["status"]["listeners"] if x["name"] == "http"]
    return {c["type"]: f"{c['status']}/{c['reason']}" for c in lst["conditions"]}


def test_shared_mode_reports_the_conflict_and_check_agrees(cli: CLI, tmp_path: Path) -> None:  # noqa: F811
    docs = _status(cli, CONFLICT, "--addressing", "shared")
    for gateway in ("same-namespace", "conflict-b"):
        conds = _listener(docs, "edge-infra", gateway)
        assert conds["Conflicted"] == "True/HostnameConflict"
        assert conds["Programmed"] == "False/Invalid"
    # Per-Gateway addressing: no conflict, and each Gateway has its own address.
    docs = _status(cli, CONFLICT)
    assert _listener(docs, "edge-infra", "conflict-b")["Conflicted"] == "False/NoConflicts"
    addresses = {
        d["metadata"]["name"]: d["status"]["addresses"][0]["value"]
        for d in docs
        if d["kind"] == "Gateway"
    }
    assert len(set(addresses.values())) == len(addresses) == 3
    # The conflicted port is not programmed, and the xDS does what the spec says of it:
    # check's only findings are the conflict itself, a configuration mistake, on each
    # side (EV910, at each listener).
    r = cli("translate", rel(BASE), rel(CONFLICT), "--addressing", "shared")
    listeners = json.loads(r.out)["configs"][2]["dynamic_listeners"]
    assert [li["name"] for li in listeners] == ["edge-8080"]
    # Without the scenario's cases: they say what per-Gateway addressing serves.
    alone = tmp_path / CONFLICT.name
    alone.mkdir()
    shutil.copy(CONFLICT / "resources.yaml", alone)
    r = cli("check", rel(BASE), str(alone), "--addressing", "shared", "--format", "json")
    found = sorted((f["code"], f["resource"]) for f in r.json()["findings"])
    sides = ("edge-infra/conflict-b", "edge-infra/same-namespace")
    assert (r.rc, found) == (1, [("EV910", f"Gateway {gw}") for gw in sides])


def test_the_conformance_shape_in_shared_mode_is_conflicted_not_silently_lost(
    cli: CLI,  # noqa: F811
) -> None:
    docs = _status(cli, SAME_PORT, "--addressing", "shared")
    for ns, name in [
        ("edge-infra", "same-namespace"),
        ("edge-infra", "gateway-b"),
        ("edge-infra", "gateway-c"),
        ("edge-apps", "gateway-d"),
    ]:
        assert _listener(docs, ns, name)["Programmed"] == "False/Invalid", (ns, name)


# ---------------------------------------------------------------- xDS from elsewhere


def test_listeners_on_unknown_addresses_are_bad_input_until_attributed(
    tmp_path: Path,
    cli: CLI,  # noqa: F811
) -> None:
    """Another implementation binds its own addresses: without being told which
    Gateway each serves, check refuses to guess (exit 2, one error); told, it judges."""
    r = cli("translate", rel(BASE), rel(SAME_PORT), "-o", str(tmp_path / "x.json"))
    assert r.rc == 0
    doc = json.loads((tmp_path / "x.json").read_text(encoding="utf-8"))
    moved: list[str] = []
    for entry in doc["configs"][2]["dynamic_listeners"]:
        # One Envoy per Gateway on its own IP, privileged ports served 10000 higher
        # (as Envoy Gateway deploys them).
        li = entry["active_state"]["listener"]
        sock = li["address"]["socket_address"]
        new = "10.20.0." + sock["address"].rsplit(".", 1)[1]
        port = sock["port_value"]
        sock["address"] = new
        sock["port_value"] = port + 10000 if port < 1024 else port
        li.pop("metadata", None)
        ports = f":{port}>{port + 10000}" if port < 1024 else ""
        moved.append(f"{li['name'].split('-', 1)[1].rsplit('-', 1)[0]}={new}{ports}")
    (tmp_path / "y.json").write_text(json.dumps(doc), encoding="utf-8")
    base = ["check", rel(BASE), rel(SAME_PORT), "--xds", str(tmp_path / "y.json")]
    r = cli(*base)
    assert r.rc == 2 and "[unattributed]" in r.err and "--gateway-address" in r.err, r.err
    assert r.err.count("\n") == 2  # one error, then the count
    fixed = []
    for name_ip in moved:
        name, ip = name_ip.split("=")
        ns = "edge-apps" if name.startswith("edge-apps") else "edge-infra"
        fixed += ["--gateway-address", f"{ns}/{name[len(ns) + 1 :]}={ip}"]
    r = cli(*base, *fixed)
    assert r.rc == 0, r.out + r.err
    # Without the port map, the Gateways' port 80 is refused: findings, not silence.
    unmapped = [f.split(":")[0] if ">" in f else f for f in fixed]
    assert cli(*base, *unmapped).rc == 1
    r = cli(*base, "--gateway-address", "edge-infra/nope=10.0.0.1")
    assert r.rc == 2 and "[not-found]" in r.err
