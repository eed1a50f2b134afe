"""An answer that rests on an assumption says so, and check leaves it unjudged.

Another implementation's xDS may route on what the Envoy model does not know: a
dynamic-metadata condition, a runtime key, the client's address. The answer it gives
for such a request carries a caveat (explain shows it, text and JSON), check counts
the request unjudged (neither agreeing nor disagreeing; the summary says how many,
EV110 names the assumption), and a check where every answer is unjudged checked
nothing and fails (EV111). A request the assumption does not decide is judged as
before, and a runtime_fraction share (every answer given) is judged too.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, translate_scenario
from conftest import load_scenario as load_fixture
from test_check_cli import CLI, Run, cli, scenario_args, section, translated, xds_route  # noqa: F401

from verifier.semantics.directory import backend_directory_from
from verifier.semantics.envoy.model import EnvoyModel
from verifier.semantics.request import Request, normalize_headers

SCENARIO = "httproute-header-matching"
HOST = "header-matching.example.com"
ROUTE = "edge-infra/header-matching/rule/1/match/0"  # /hdr with version: two
METADATA = {"filter": "envoy.filters.http.jwt_authn", "path": [{"key": "sub"}]}
METADATA["value"] = {"string_match": {"exact": "alice"}}


def _with_metadata_condition(tmp_path: Path) -> tuple[Path, str]:
    doc = translated(tmp_path / "ours.json", SCENARIO)
    route, path = xds_route(doc, ROUTE)
    route["match"]["dynamic_metadata"] = [METADATA]
    out = tmp_path / "metadata.json"
    out.write_text(json.dumps(doc), encoding="utf-8")
    return out, path


def _explain(cli: CLI, xds: Path, *request: str) -> Run:  # noqa: F811
    return cli("explain", *scenario_args(SCENARIO), "--xds", str(xds), "--request", *request)


def test_explain_shows_the_assumption_and_does_not_judge(cli: CLI, tmp_path: Path) -> None:  # noqa: F811
    xds, _path = _with_metadata_condition(tmp_path)
    text = _explain(cli, xds, f"GET http://{HOST}/hdr", "-H", "Version: two")
    assert text.rc == 0, text.err
    caveat = "assumes: route #5 'edge-infra/header-matching/rule/1/match/0': route match on "
    assert f"  {caveat}dynamic_metadata: not modelled: taken to match" in text.out
    assert "NOT JUDGED: the Envoy answer rests on an assumption" in text.out
    assert "\nagree\n" not in text.out
    doc = _explain(cli, xds, f"GET http://{HOST}/hdr", "-H", "Version: two", "--format", "json")
    found = doc.json()
    assert (found["judged"], found["agree"]) == (False, None)
    assert found["caveats"] == [
        {
            "subject": f"route #5 '{ROUTE}': route match on dynamic_metadata",
            "assumption": "not modelled: taken to match",
            "decides": True,
        }
    ]
    # A request the condition does not decide (the route's header misses first).
    other = _explain(cli, xds, f"GET http://{HOST}/hdr", "-H", "Version: one", "--format", "json")
    assert (other.json()["judged"], other.json()["agree"], other.json()["caveats"]) == (
        True,
        True,
        [],
    )


def test_check_counts_the_answers_unjudged(cli: CLI, tmp_path: Path) -> None:  # noqa: F811
    xds, path = _with_metadata_condition(tmp_path)
    r = cli("check", *scenario_args(SCENARIO), "--xds", str(xds), "--format", "json")
    assert r.rc == 0, r.err  # warnings only
    doc = r.json()
    named = [f for f in doc["findings"] if f["code"] == "EV110"]
    assert [(f["xds_path"], f["severity"]) for f in named] == [(path, "warning")]
    count = doc["summary"]["unjudged"]
    assert count > 0 and named[0]["message"].startswith(f"{count} requests were not judged")
    # Nothing else: the requests it decides neither agree nor disagree.
    assert {f["code"] for f in doc["findings"]} == {"EV109", "EV110"}
    text = cli("check", *scenario_args(SCENARIO), "--xds", str(xds))
    assert f"{count} requests not judged: the Envoy answer rests on an assumption" in text.out
    assert text.rc == 0
    fails = cli("check", *scenario_args(SCENARIO), "--xds", str(xds), "--fail-on", "warning")
    assert fails.rc == 1


def test_a_check_where_nothing_is_judged_fails(cli: CLI, tmp_path: Path) -> None:  # noqa: F811
    """Every request whose answer depends on whether the client is internal: the
    Gateway's listener requires TLS of external requests, with ranges of internal
    addresses and use_remote_address, and the request does not say where the client
    is. Nothing was checked: EV111, exit 1."""
    doc = translated(tmp_path / "ours.json", SCENARIO)
    for entry in section(doc, "Listeners")["dynamic_listeners"]:
        for chain in entry["active_state"]["listener"]["filter_chains"]:
            hcm = chain["filters"][0]["typed_config"]
            hcm["use_remote_address"] = True
            hcm["internal_address_config"] = {
                "cidr_ranges": [{"address_prefix": "10.0.0.0", "prefix_len": 8}]
            }
    for entry in section(doc, "Routes")["dynamic_route_configs"]:
        vhosts = entry["route_config"].setdefault("virtual_hosts", [])
        for vh in vhosts:
            vh["require_tls"] = "EXTERNAL_ONLY"
        catch_all = {"name": "rest", "domains": ["*"], "require_tls": "EXTERNAL_ONLY"}
        vhosts.append(
            {
                **catch_all,
                "routes": [{"match": {"prefix": "/"}, "direct_response": {"status": 404}}],
            }
        )
    xds = tmp_path / "internal.json"
    xds.write_text(json.dumps(doc), encoding="utf-8")
    r = cli("check", *scenario_args(SCENARIO), "--xds", str(xds), "--format", "json")
    found = r.json()
    codes = {f["code"] for f in found["findings"]}
    assert "EV111" in codes and r.rc == 1, found["findings"]
    assert found["summary"]["unjudged"] > 0
    # The scenario's cases are requests like any other: unjudged, not missed.
    assert not codes & {"EV701", "EV703"}, found["findings"]


def _model(mutate: Any) -> tuple[EnvoyModel, Request]:
    res, _ = load_fixture(FIXTURES / SCENARIO)
    snap = copy.deepcopy(translate_scenario(FIXTURES / SCENARIO))
    for rc in snap.routes:
        for vh in rc.virtual_hosts:
            for route in vh.routes:
                if route.name == ROUTE:
                    mutate(route)
    request = Request(
        host=HOST,
        path="/hdr",
        address="192.0.2.244",
        headers=normalize_headers([("version", "two")]),
    )
    return EnvoyModel(snap, backend_directory_from(res)), request


@pytest.mark.parametrize(
    ("numerator", "key", "unjudged"),
    [(50, "k", False), (50, "", False), (0, "k", True), (100, "k", True), (100, "", False)],
)
def test_a_runtime_fraction_is_unjudged_only_where_a_runtime_layer_changes_the_answer(
    numerator: int, key: str, unjudged: bool
) -> None:
    """Between 0 and 100% the model gives every answer, each judged; at 0% or 100% a
    runtime layer holding the key would change the answer, which the model cannot see."""
    from envoy_data_plane.envoy.config.core.v3 import RuntimeFractionalPercent
    from envoy_data_plane.envoy.type.v3 import FractionalPercent

    def fractional(route: Any) -> None:
        route.match.runtime_fraction = RuntimeFractionalPercent(
            default_value=FractionalPercent(numerator=numerator), runtime_key=key
        )

    model, request = _model(fractional)
    outcome = model.evaluate(request).outcome
    assert outcome.unjudged is unjudged
    assert bool(outcome.all_caveats()) is bool(key)
