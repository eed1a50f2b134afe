"""A scenario has a name and its cases, whichever way its files are given (issue 31).

A new user wrote ``shop/resources.yaml`` and ``shop/cases.yaml`` and ran
``edge-verify check shop/resources.yaml``: every report named the scenario
"input", and the cases beside the file were not run, although docs/live.md says a
folder's cases.yaml always runs. Now a file stands for its folder's scenario: its
cases.yaml runs, as for ``check shop/``, the text report says which tables ran,
and each report (text, JSON, JUnit, SARIF, the live pass's JSON and
ConformanceReport, the pytest plugin's items) names the scenario ``shop``.
Explicit paths are named after the last of them (docs/check.md).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from conftest import BASE, FIXTURES, rel
from test_check_cli import CLI, cli  # noqa: F401  (the fixture)
from user_scenario import write

from verifier.gatewayapi.cluster import ClusterSource
from verifier.live.envoy_process import envoy_available
from verifier.pipeline import CheckOptions, discover, scenario_name

pytest_plugins = ["pytester"]

# One request of tests/user_scenario.py's newcomer, whichever backend of the split answers.
CASES = """\
- name: cart-is-served
  gateway: {namespace: shop, name: web}
  request: {host: cart.shop.example.com, path: /cart/1, headers: {x-beta: "yes"}}
  expect: {status: 200, backends: [cart, cart-canary], namespace: shop}
"""


def shop(root: Path, *, wrong: bool = False) -> Path:
    """``root/shop`` with its cases table; ``wrong``: the case expects an answer
    nobody gives, so only a run that replays the table fails."""
    return write(root / "shop", CASES.replace("status: 200", "status: 418") if wrong else CASES)


def test_explicit_paths_are_named_after_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = shop(tmp_path)
    (tmp_path / "routes").mkdir()
    (tmp_path / "routes" / "checkout.yaml").write_text("", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert scenario_name(["shop/resources.yaml"]) == "shop"  # a scenario's file: its folder
    assert scenario_name(["shop/"]) == scenario_name(["shop"]) == "shop"
    assert scenario_name(["shop", "routes/checkout.yaml"]) == "checkout"  # another file: stem
    assert scenario_name([rel(BASE), rel(FIXTURES / "httproute-cors")]) == "httproute-cors"
    assert scenario_name(["shop", "-"]) == "stdin"
    monkeypatch.chdir(folder)
    assert scenario_name(["."]) == scenario_name(["resources.yaml"]) == "shop"
    (found,) = discover(["resources.yaml"], CheckOptions())
    assert (found.name, found.cases, found.suite) == ("shop", ("cases.yaml",), False)
    cluster = CheckOptions(cluster=ClusterSource("kubeconfig", context="kind-edge"))
    assert [s.name for s in discover([], cluster)] == ["kind-edge"]
    cluster = CheckOptions(cluster=ClusterSource("kubeconfig"))
    assert [s.name for s in discover([], cluster)] == ["cluster"]


def test_files_of_one_folder_bring_its_tables_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two files of one folder are one folder: its cases.yaml once, and its mesh registry
    is not "brought by two folders"."""
    folder = shop(tmp_path)
    (folder / "more.yaml").write_text("", encoding="utf-8")
    (folder / "mesh-registry.yaml").write_text("services: []\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    (found,) = discover(["shop/resources.yaml", "shop/more.yaml"], CheckOptions())
    assert (found.name, found.cases) == ("more", ("shop/cases.yaml",))
    assert found.mesh_registry == "shop/mesh-registry.yaml"


def test_a_scenario_file_runs_its_cases_and_every_report_names_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cli: CLI,  # noqa: F811
) -> None:
    shop(tmp_path, wrong=True)
    monkeypatch.chdir(tmp_path)
    args = ("check", "shop/resources.yaml")
    text = cli(*args)
    assert text.rc == 1, text.err  # the case beside the file ran, and failed
    lines = text.out.splitlines()
    assert lines[0].startswith("shop/cases.yaml:1: error EV703 ")  # still a finding first
    assert lines[-2] == "scenario shop: cases shop/cases.yaml (1 case)"

    doc = cli(*args, "--format", "json").json()
    assert doc["scenarios"] == [
        {"name": "shop", "cases": [{"file": "shop/cases.yaml", "cases": 1}]}
    ]
    assert {(f["scenario"], f["code"], f["location"]) for f in doc["findings"]} == {
        ("shop", "EV703", "shop/cases.yaml:1")
    }
    assert cli("check", "shop/", "--format", "json").json() == doc  # as the folder

    junit = ET.fromstring(cli(*args, "--format", "junit").out)
    (suite,) = junit.iter("testsuite")
    assert suite.get("name") == "shop"
    assert [(p.get("name"), p.get("value")) for p in suite.iter("property")] == [
        ("cases", "shop/cases.yaml")
    ]
    assert {c.get("classname") for c in suite.iter("testcase")} == {"shop"}

    sarif = json.loads(cli(*args, "--format", "sarif").out)
    (run,) = sarif["runs"]
    assert {r["properties"]["scenario"] for r in run["results"]} == {"shop"}
    assert run["properties"]["scenarios"] == doc["scenarios"]


def test_a_run_without_a_table_says_so(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cli: CLI,  # noqa: F811
) -> None:
    (shop(tmp_path) / "cases.yaml").unlink()
    monkeypatch.chdir(tmp_path)
    r = cli("check", "shop/resources.yaml")
    assert r.rc == 0, r.err
    assert r.out.splitlines()[-2].startswith("scenario shop: no cases table ")


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
def test_the_live_pass_runs_and_names_a_scenario_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cli: CLI,  # noqa: F811
) -> None:
    """One Envoy, one attempt (the budget is one second): the failing case beside the
    file is run, and the ConformanceReport's failed test is the scenario's name."""
    shop(tmp_path, wrong=True)
    monkeypatch.chdir(tmp_path)
    args = ("live", "shop/resources.yaml", "--consistency-budget", "1", "--successes", "1")
    r = cli(*args, "--format", "conformance")
    assert r.rc == 1, r.err
    (profile,) = yaml.safe_load(r.out)["profiles"]
    assert profile["core"]["failedTests"] == ["Shop"]


def test_the_pytest_plugin_names_a_scenario_folder_after_it(pytester: pytest.Pytester) -> None:
    """``--edge-fixtures DIR`` on one scenario (not a suite): its collector is DIR's name."""
    shop(pytester.path)
    quiet = ("-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning")
    result = pytester.runpytest_subprocess(
        "--edge-fixtures", "shop", "--collect-only", "-q", *quiet
    )
    ids = [line for line in result.outlines if line.startswith("shop::")]
    assert ids == ["shop::shop::check", "shop::shop::cart-is-served"]
