"""Golden files: the whole xDS and status output of every scenario, checked in.

A change to the translator or to attachment shows up as a reviewable diff of
the goldens. They are written only by ``pytest --update-goldens`` (never by
hand), compared as whole documents (never by substring), and a golden that no
scenario produces any more is an orphan: reported, and deleted by the update.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    FIXTURES,
    edge_scenarios,
    load_scenario,
    mesh_proxies,
    proxy_params,
    rel,
    scenario_params,
    translate_proxy,
    translate_scenario,
    valid_scenarios,
)

from verifier.gatewayapi.addresses import Addressing, gateway_addresses
from verifier.gatewayapi.attach import DEFAULT_CONTROLLER
from verifier.report.status import format_yaml, status_documents

XDS_GOLDEN = re.compile(r"^xds\.(?P<type>[A-Za-z0-9_-]+)\.golden\.json$")
# A sidecar's: xds.<namespace>.<workload>.<type>.golden.json, beside its mesh scenario.
SIDECAR_GOLDEN = re.compile(
    r"^xds\.(?P<ns>[a-z0-9-]+)\.(?P<workload>[a-z0-9.-]+)\.(?P<type>[A-Za-z0-9_-]+)\.golden\.json$"
)
STATUS_GOLDEN = "status.golden.yaml"
UPDATE_HINT = "run `pytest --update-goldens` and review the diff"
MAX_DIFF_LINES = 200


def golden_json(value: Any) -> str:
    """The one serialisation of a golden, so a diff shows content changes only."""
    return json.dumps(value, indent=2, sort_keys=True) + "\n"


def _diff(expected: str, actual: str, name: str) -> str:
    lines = list(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            actual.splitlines(keepends=True),
            f"{name} (golden)",
            f"{name} (current output)",
        )
    )
    if len(lines) > MAX_DIFF_LINES:
        lines = [*lines[:MAX_DIFF_LINES], f"... {len(lines) - MAX_DIFF_LINES} more diff lines\n"]
    return "".join(lines)


def check_golden(path: Path, actual: str, update: bool) -> str | None:
    """Compare (or with ``update`` rewrite) one golden; return the problem, if any."""
    if update:
        if not path.is_file() or path.read_text(encoding="utf-8") != actual:
            path.write_text(actual, encoding="utf-8")
        return None
    if not path.is_file():
        return f"{rel(path)}: no golden yet; run `pytest --update-goldens` to create it"
    expected = path.read_text(encoding="utf-8")
    if expected == actual:
        return None
    return (
        f"{rel(path)} differs from the current output; if the change is intended, "
        f"{UPDATE_HINT}:\n{_diff(expected, actual, rel(path))}"
    )


def _xds_goldens(folder: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(folder.glob("xds.*.golden.json")):
        match = XDS_GOLDEN.match(path.name)
        if match:
            found[match["type"]] = path
    return found


@pytest.mark.parametrize("scenario", scenario_params(edge_scenarios()))
def test_xds_goldens(scenario: Path, update_goldens: bool, repo_cwd: Path) -> None:
    from verifier.xds.snapshot import split_by_type

    by_type = split_by_type(translate_scenario(scenario))
    problems = [
        check_golden(scenario / f"xds.{xds_type}.golden.json", golden_json(value), update_goldens)
        for xds_type, value in sorted(by_type.items())
    ]
    for xds_type, path in _xds_goldens(scenario).items():
        if xds_type in by_type:
            continue
        if update_goldens:
            path.unlink()
        else:
            problems.append(
                f"{rel(path)}: orphan golden, the scenario no longer produces {xds_type}; "
                "run `pytest --update-goldens` to delete it"
            )
    found = [p for p in problems if p]
    if found:
        pytest.fail("\n\n".join(found), pytrace=False)


def sidecar_golden(scenario: Path, namespace: str, workload: str, xds_type: str) -> Path:
    return scenario / f"xds.{namespace}.{workload}.{xds_type}.golden.json"


@pytest.mark.parametrize(("scenario", "namespace", "workload"), proxy_params())
def test_sidecar_goldens(
    scenario: Path, namespace: str, workload: str, update_goldens: bool, repo_cwd: Path
) -> None:
    """Each sidecar of a mesh scenario (``translate --proxy NS/WORKLOAD``), split per
    xDS type as the edge's; a type it no longer produces is an orphan."""
    from verifier.xds.snapshot import split_by_type

    by_type = split_by_type(translate_proxy(scenario, namespace, workload))
    problems = [
        check_golden(
            sidecar_golden(scenario, namespace, workload, t), golden_json(v), update_goldens
        )
        for t, v in sorted(by_type.items())
    ]
    for path in sorted(scenario.glob(f"xds.{namespace}.{workload}.*.golden.json")):
        found = SIDECAR_GOLDEN.match(path.name)
        if found is None or found["workload"] != workload or found["type"] in by_type:
            continue
        if update_goldens:
            path.unlink()
        else:
            problems.append(f"{rel(path)}: orphan golden, the sidecar no longer produces it")
    found_problems = [p for p in problems if p]
    if found_problems:
        pytest.fail("\n\n".join(found_problems), pytrace=False)


@pytest.mark.parametrize("scenario", scenario_params(valid_scenarios()))
def test_status_golden(scenario: Path, update_goldens: bool, repo_cwd: Path) -> None:
    res, graph = load_scenario(scenario)
    where = gateway_addresses(res, DEFAULT_CONTROLLER, Addressing())
    actual = format_yaml(status_documents(res, graph, where))
    problem = check_golden(scenario / STATUS_GOLDEN, actual, update_goldens)
    if problem:
        pytest.fail(problem, pytrace=False)


def test_no_orphan_goldens(update_goldens: bool) -> None:
    """Goldens left in folders that are no longer (valid) scenarios must go."""
    live = set(valid_scenarios())
    proxies = {(s, ns, n) for s, ns, n in mesh_proxies()}
    orphans = sorted(
        path
        for path in FIXTURES.rglob("*.golden.*")
        if ((XDS_GOLDEN.match(path.name) or path.name == STATUS_GOLDEN) and path.parent not in live)
        or _orphan_sidecar_golden(path, proxies)
    )
    if update_goldens:
        for path in orphans:
            path.unlink()
        return
    if orphans:
        pytest.fail(
            "goldens outside any valid scenario (run `pytest --update-goldens` to delete them):\n"
            + "\n".join(rel(p) for p in orphans),
            pytrace=False,
        )


def _orphan_sidecar_golden(path: Path, proxies: set[tuple[Path, str, str]]) -> bool:
    """A sidecar's golden whose scenario has no such sidecar (any more)."""
    found = SIDECAR_GOLDEN.match(path.name)
    return found is not None and (path.parent, found["ns"], found["workload"]) not in proxies
