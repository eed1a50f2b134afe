"""A run that would check nothing is bad input, never a green run.

Each of these exited 0 before: a typo in a cases table became a default request or
expectation, and a check with no Gateway of the controller (base forgotten, an empty
directory, a mistyped --controller-name) ran its rules on nothing and passed.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import BASE, FIXTURES, rel
from test_check_cli import CLI, cli  # noqa: F401  (the fixture)

SCENARIO = FIXTURES / "httproute-exact-path-matching"
NOT_FOUND = FIXTURES / "httproute-status-backend-not-found"
CASE = """\
- name: typo
  gateway: {namespace: edge-infra, name: same-namespace, port: 80}
  request: {path: /x}
  expect: {status: 404}
"""


@pytest.mark.parametrize(
    ("broken", "field"),
    [
        (CASE.replace("  request:", "  requesst:"), "requesst"),
        (CASE.replace("{status: 404}", "{statuss: 404}"), "statuss"),
        (CASE.replace("{path: /x}", "{path: /x, hots: a.example}"), "hots"),
        (CASE.replace("{status: 404}", "{status: 404, redirectt: {}}"), "redirectt"),
    ],
)
def test_an_unknown_key_in_a_cases_table_is_an_error(
    broken: str,
    field: str,
    tmp_path: Path,
    cli: CLI,  # noqa: F811
) -> None:
    path = tmp_path / "cases.yaml"
    path.write_text(broken, encoding="utf-8")
    r = cli("check", rel(BASE), rel(SCENARIO), "--cases", str(path))
    (line,) = r.error_lines()
    # at the line of the unknown key itself
    at = next(i for i, text in enumerate(broken.splitlines(), 1) if field in text)
    assert line.startswith(f"{path}:{at}: ") and f".{field}: unknown key" in line, line


@pytest.mark.parametrize(
    "args",
    [
        ["check", rel(FIXTURES / "httproute-cors")],  # the base forgotten
        ["check", rel(BASE), rel(SCENARIO), "--controller-name", "example.com/typo"],
        ["mutate", rel(FIXTURES / "httproute-cors")],
        ["explain", rel(FIXTURES / "httproute-cors"), "--request", "GET http://a/"],
    ],
)
def test_no_gateway_of_the_controller_is_bad_input(args: list[str], cli: CLI) -> None:  # noqa: F811
    r = cli(*args)
    (line,) = r.error_lines()
    assert "[nothing-to-check]" in line, line
    if "--controller-name" in args:
        assert "GatewayClasses here name gateway.aether.io/edge" in line


def test_an_empty_directory_checks_nothing_and_says_so(tmp_path: Path, cli: CLI) -> None:  # noqa: F811
    for command in ("check", "mutate"):
        r = cli(command, str(tmp_path))
        (line,) = r.error_lines()
        assert "[nothing-to-check]" in line


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["check", "fixtures/", "--cases", rel(SCENARIO / "cases.yaml")], "not-applicable"),
        (["check", "fixtures/", "--mesh-registry", "x.yaml"], "not-applicable"),
        (
            [
                *["explain", rel(BASE), rel(SCENARIO), "--request", "GET http://a/"],
                *["--cases", rel(SCENARIO / "cases.yaml")],
            ],
            "not-applicable",
        ),
        (
            ["check", rel(BASE), rel(SCENARIO), "--xds", "ftp://127.0.0.1/dump.json"],
            "not-a-file",
        ),
    ],
)
def test_an_option_that_cannot_apply_is_refused_not_ignored(
    args: list[str],
    code: str,
    cli: CLI,  # noqa: F811
) -> None:
    r = cli(*args)
    (line,) = r.error_lines()
    assert f"[{code}]" in line, line


@pytest.mark.parametrize(
    ("api_version", "got"),
    [("", "got none"), ("apiVersion: networking.x-k8s.io/v1alpha1\n", "networking.x-k8s.io")],
)
def test_a_known_kind_with_a_missing_or_wrong_api_version_is_an_error(
    api_version: str,
    got: str,
    tmp_path: Path,
    cli: CLI,  # noqa: F811
) -> None:
    """It used to be skipped with a warning ("not read by the edge") and check passed."""
    route = tmp_path / "route.yaml"
    route.write_text(
        api_version + "kind: HTTPRoute\nmetadata: {name: r, namespace: edge-infra}\n",
        encoding="utf-8",
    )
    r = cli("check", rel(BASE), rel(SCENARIO), str(route))
    (line,) = r.error_lines()
    assert line.startswith(f"{route}:1: apiVersion: ") and got in line, line
    assert "[api-version]" in line


def test_a_kind_of_the_same_name_in_another_api_is_still_skipped(
    tmp_path: Path,
    cli: CLI,  # noqa: F811
) -> None:
    knative = tmp_path / "ksvc.yaml"
    knative.write_text(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata: {name: k, namespace: a}\n",
        encoding="utf-8",
    )
    r = cli("check", rel(BASE), rel(SCENARIO), str(knative))
    assert r.rc == 0 and "not read by the edge" in r.err


def _edited_xds_finds_nothing(
    cli: CLI,  # noqa: F811
    tmp_path: Path,
    scenario: Path,
    edit: Callable[[dict[str, Any]], int],
) -> None:
    """Translate ``scenario``, let ``edit`` rewrite each route configuration (it counts
    what it changed, which must be something), and require check to find nothing."""
    out = tmp_path / "xds.json"
    assert cli("translate", rel(BASE), rel(scenario), "-o", str(out)).rc == 0
    doc = json.loads(out.read_text(encoding="utf-8"))
    configs = [
        rc["route_config"] for c in doc["configs"] for rc in c.get("dynamic_route_configs", [])
    ]
    assert sum(edit(rc) for rc in configs)
    out.write_text(json.dumps(doc), encoding="utf-8")
    r = cli("check", rel(BASE), rel(scenario), "--xds", str(out), "--format", "json")
    assert (r.rc, r.json()["findings"]) == (0, [])


def _single_cluster(rc: dict[str, Any]) -> int:
    """Single-entry weighted_clusters written as ``cluster:``."""
    changed = 0
    for vh in rc.get("virtual_hosts", []):
        for route in vh["routes"]:
            clusters = route.get("route", {}).get("weighted_clusters", {}).get("clusters")
            if clusters and len(clusters) == 1:
                route["route"].pop("weighted_clusters")
                route["route"]["cluster"] = clusters[0]["name"]
                changed += 1
    return changed


def _rds_default(rc: dict[str, Any]) -> int:
    """validate_clusters left to its default, as most implementations do."""
    assert rc.pop("validate_clusters") is False  # the default, over RDS
    return 1


def test_a_missing_cluster_answered_500_is_an_invalid_share(tmp_path: Path, cli: CLI) -> None:  # noqa: F811
    """Issue 12 (false positives on other implementations' xDS): a route to a cluster
    that does not exist with cluster_not_found_response_code INTERNAL_SERVER_ERROR is
    how some implementations write an invalid backendRef. Both models answer 500; the
    Envoy model used to count no invalid share there, and check reported a difference."""
    _edited_xds_finds_nothing(
        cli, tmp_path, FIXTURES / "httproute-status-backend-not-found", _single_cluster
    )


def test_a_route_to_a_missing_cluster_over_rds_is_not_predicted_a_nack(
    tmp_path: Path,
    cli: CLI,  # noqa: F811
) -> None:
    """Issue 12: validate mode reads the route tables inlined, where validate_clusters
    defaults to true; over RDS (how they are served) it defaults to false and Envoy
    accepts a route to a missing cluster. envoy-accepts-config must judge them as served."""
    _edited_xds_finds_nothing(
        cli, tmp_path, FIXTURES / "httproute-status-backend-not-found", _rds_default
    )


def test_status_o_names_a_file_and_the_old_meaning_is_refused(
    tmp_path: Path,
    cli: CLI,  # noqa: F811
) -> None:
    """-o is an output file everywhere; status's format is --format. `status -o yaml`
    (its old meaning) is refused rather than written to a file named 'yaml'."""
    r = cli("status", rel(BASE), "-o", "yaml")
    (line,) = r.error_lines()
    assert "--format yaml" in line and not Path("yaml").exists()
    out = tmp_path / "status.yaml"
    r = cli("status", rel(BASE), "--format", "yaml", "-o", str(out))
    assert (r.rc, r.out) == (0, "") and "kind: Gateway" in out.read_text(encoding="utf-8")


def test_every_bad_file_of_an_xds_directory_is_reported(tmp_path: Path, cli: CLI) -> None:  # noqa: F811
    """Issue 12: only the first bad file of a per-type directory used to be reported."""
    import shutil

    for golden in SCENARIO.glob("xds.*.golden.json"):
        shutil.copy(golden, tmp_path / golden.name)
    (tmp_path / "xds.routes.golden.json").write_text("{bad", encoding="utf-8")
    (tmp_path / "xds.clusters.golden.json").write_text("[1,", encoding="utf-8")
    r = cli("check", rel(BASE), rel(SCENARIO), "--xds", str(tmp_path))
    lines = r.error_lines()
    assert sorted(Path(line.split(":", 1)[0]).name for line in lines) == [
        "xds.clusters.golden.json",
        "xds.routes.golden.json",
    ]


def test_explain_on_a_port_no_gateway_has_says_which_ports_there_are(cli: CLI) -> None:  # noqa: F811
    """Issue 12: it said "0 Gateways listen on port 443 (none): name one with --gateway",
    when the fix is the port."""
    r = cli("explain", rel(BASE), rel(SCENARIO), "--request", "GET https://a.example/")
    (line,) = r.error_lines()
    assert "[no-gateway-on-port]" in line and "ports: 80, 8080" in line, line


def test_a_scenario_folder_brings_its_own_cases(tmp_path: Path, cli: CLI) -> None:  # noqa: F811
    """``check base SCENARIO`` replays SCENARIO/cases.yaml as the suite does: a case
    no model meets fails the check whether or not ``--cases`` names the file."""
    scenario = tmp_path / SCENARIO.name
    shutil.copytree(SCENARIO, scenario)
    cases = yaml.safe_load((scenario / "cases.yaml").read_text(encoding="utf-8"))
    cases[0]["expect"]["status"] = 418  # nobody answers that
    (scenario / "cases.yaml").write_text(yaml.safe_dump(cases), encoding="utf-8")
    for extra in ([], ["--cases", str(scenario / "cases.yaml")]):
        r = cli("check", rel(BASE), str(scenario), "--format", "json", *extra)
        assert r.rc == 1, r.err
        rules = {f["code"] for f in r.json()["findings"]}
        assert rules == {"EV703"}, rules  # both models miss it alike
    assert cli("check", rel(BASE), rel(SCENARIO)).rc == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("servicess:\n- a/b\n", "/reg.yaml:1: servicess: unknown field (expected services)"),
        (
            "services:\n- {namespace: a, name: b, nmae: c}\n",
            "/reg.yaml:2: services[0].nmae: unknown field (expected namespace and name)",
        ),
    ],
)
def test_an_unknown_key_in_a_mesh_registry_is_an_error(
    text: str,
    expected: str,
    tmp_path: Path,
    cli: CLI,  # noqa: F811
) -> None:
    registry = tmp_path / "reg.yaml"
    registry.write_text(text, encoding="utf-8")
    lines = cli(
        "check", *[rel(BASE), rel(SCENARIO)], "--mesh-registry", str(registry)
    ).error_lines()
    assert any(expected in ln and "[unknown-field]" in ln for ln in lines), lines


def test_without_an_envoy_binary_its_rule_is_skipped_and_says_why(
    cli: CLI,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """EV101 asks a real Envoy; with none installed it used to report nothing, as if
    Envoy had accepted the xDS. It is now a skipped rule with the reason."""
    import importlib

    rule = importlib.import_module("verifier.rules.envoy_accepts_config")
    monkeypatch.setattr(rule, "find_envoy", lambda: None)
    r = cli("check", rel(BASE), rel(SCENARIO), "--format", "json")
    assert r.rc == 0, r.err
    summary = r.json()["summary"]
    assert summary["rules_skipped"] == 1, summary
    text = cli("check", rel(BASE), rel(SCENARIO))
    assert "no envoy binary" in text.out + text.err, text.out
