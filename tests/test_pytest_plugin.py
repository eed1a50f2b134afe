"""The pytest plugin, run by pytest itself (``pytester``) on a small copy of fixtures/.

A suite becomes one collector per scenario, a ``check`` item and one item per
case; a wrong case is exactly one failure, reported with the finding's text;
without ``--edge-fixtures`` the plugin must not change what pytest collects,
since it is loaded into every pytest run of an environment that installs us.

Each run is a subprocess, as a user's is: an in-process run would drop the
modules it imported on the way out, and envoy-data-plane's pydantic classes
do not survive being imported twice into one interpreter.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import FIXTURES
from small_suite import BROKEN, CLEAN, INVALID, WRONG_CASE, WRONG_LINE, small_suite
from user_scenario import MISTAKES, SPLIT_CASE, write

pytest_plugins = ["pytester"]

QUIET = ("-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning")


def _case_names(scenario: str) -> list[str]:
    return [c["name"] for c in yaml.safe_load((FIXTURES / scenario / "cases.yaml").read_text())]


def test_every_scenario_and_case_is_an_item(pytester: pytest.Pytester) -> None:
    small_suite(pytester.path / "suite")
    result = pytester.runpytest_subprocess(
        "--edge-fixtures", "suite", "--collect-only", "-q", *QUIET
    )
    ids = [line for line in result.outlines if line.startswith("suite::")]
    want = [f"suite::{CLEAN}::check"] + [f"suite::{CLEAN}::{n}" for n in _case_names(CLEAN)]
    want += [f"suite::{BROKEN}::check"] + [f"suite::{BROKEN}::{n}" for n in _case_names(BROKEN)]
    want += [f"suite::{INVALID}::check"]
    assert ids == want


def test_one_wrong_case_is_one_failure_with_the_finding(pytester: pytest.Pytester) -> None:
    small_suite(pytester.path / "suite")
    result = pytester.runpytest_subprocess("--edge-fixtures", "suite", *QUIET)
    passed = 3 + len(_case_names(CLEAN)) + len(_case_names(BROKEN)) - 1
    result.assert_outcomes(passed=passed, failed=1)
    # On a wide terminal the summary line goes on with " - <message>".
    result.stdout.fnmatch_lines([f"FAILED suite::{BROKEN}::{WRONG_CASE}*"])
    finding = (
        f"/{BROKEN}/cases.yaml:{WRONG_LINE}: error EV703 [case-expectations] case "
        f"{WRONG_CASE}: neither model meets the expectation, and both predict the same "
        "answer: backends ['infra-backend-v2'], expected ['infra-backend-v1']"
    )
    assert any(line.endswith(finding) for line in result.outlines), result.stdout.str()
    assert "Traceback" not in result.stdout.str()


def test_a_clean_suite_passes(pytester: pytest.Pytester) -> None:
    small_suite(pytester.path / "suite", wrong_case=False)
    result = pytester.runpytest_subprocess("--edge-fixtures", "suite", *QUIET)
    result.assert_outcomes(passed=3 + len(_case_names(CLEAN)) + len(_case_names(BROKEN)))


def test_an_invalid_scenario_must_be_rejected(pytester: pytest.Pytester) -> None:
    """An invalid-* scenario whose YAML became valid fails: its expected errors are missing."""
    suite = small_suite(pytester.path / "suite", wrong_case=False)
    for scenario in (CLEAN, BROKEN):
        for f in (suite / scenario).iterdir():
            f.unlink()
        (suite / scenario).rmdir()
    resources = suite / INVALID / "resources.yaml"
    resources.write_text(resources.read_text().replace("*.", "x."))
    result = pytester.runpytest_subprocess("--edge-fixtures", "suite", *QUIET)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*expected-errors.yaml*expected error not reported*"])


def test_inert_without_the_option(pytester: pytest.Pytester) -> None:
    """The same node ids with and without the plugin, a suite folder lying around included."""
    small_suite(pytester.path / "fixtures")
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    on = pytester.runpytest_subprocess("--collect-only", "-q", *QUIET)
    off = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:edge-verifier", *QUIET)
    ids = [line for line in on.outlines if "::" in line]
    assert ids == [line for line in off.outlines if "::" in line]
    assert ids == ["test_one.py::test_one"]


def test_not_a_directory_is_a_usage_error(pytester: pytest.Pytester, tmp_path: Path) -> None:
    result = pytester.runpytest_subprocess("--edge-fixtures", str(tmp_path / "missing"), *QUIET)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--edge-fixtures*missing: not a directory*"])


@pytest.mark.live
def test_edge_live_sends_each_case_through_envoy(pytester: pytest.Pytester) -> None:
    from verifier.live.envoy_process import envoy_available

    if not envoy_available():
        pytest.skip("no envoy binary")
    suite = small_suite(pytester.path / "suite", wrong_case=False)
    for scenario in (BROKEN, INVALID):
        for f in (suite / scenario).iterdir():
            f.unlink()
        (suite / scenario).rmdir()
    result = pytester.runpytest_subprocess("--edge-fixtures", "suite", "--edge-live", *QUIET)
    result.assert_outcomes(passed=1 + len(_case_names(CLEAN)))


def test_a_case_failing_on_a_configuration_mistake_fails_its_own_item(
    pytester: pytest.Pytester,
) -> None:
    """The mistake's finding (EV905, the case folded in) is placed at the backendRef,
    not at the case; the case's item still fails with it, since the finding names the
    case as related."""
    suite = pytester.path / "suite"
    (suite / "base").mkdir(parents=True)
    write(suite / "shop", SPLIT_CASE, **MISTAKES["service-does-not-exist"].values)
    result = pytester.runpytest_subprocess("--edge-fixtures", "suite", *QUIET)
    result.stdout.fnmatch_lines(["FAILED suite::shop::beta-split*"])
    finding = "error EV905 [httproute-backend-refs] backendRef names Service shop/cart-canry"
    assert any("/shop/resources.yaml:" in line and finding in line for line in result.outlines), (
        result.stdout.str()
    )
