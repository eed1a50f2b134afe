"""Damaged inputs end in a report or an input error, never a traceback.

Random damage to a translated config_dump (fields deleted, values of the wrong
type, unknown ``@type``s) once found four crashes in forty tries: a route match
without a path specifier made the Envoy model raise out of ``check``. These
tests keep that class of bug out, on xDS and on YAML, with Hypothesis drawing
the damage (derandomized, so a failure is the same failure on every machine;
Hypothesis prints the damage that shrank to it).
"""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import BASE, FIXTURES
from damage import WRONG, paths
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verifier.cli import main

SCENARIO = FIXTURES / "httproute-header-matching"
EXITS = (0, 1, 2)  # clean, findings, bad input

Damage = list[tuple[int, str, Any]]

FUZZ = settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


def _damaged(doc: Any, damage: Damage, min_depth: int) -> Any:
    """``doc`` with each (which path, what, value) applied: delete the field,
    duplicate a list item, or put ``value`` in its place."""
    doc = copy.deepcopy(doc)
    for pick, what, value in damage:
        found = [p for p in paths(doc) if len(p) >= min_depth]
        if not found:
            break
        path = found[pick % len(found)]
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        if what == "delete" and isinstance(parent, dict):
            del parent[key]
        elif what == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))
        else:
            parent[key] = copy.deepcopy(value)
    return doc


DAMAGE = st.lists(
    st.tuples(
        st.integers(0, 10**6),
        st.sampled_from(["delete", "duplicate", "replace"]),
        st.sampled_from(WRONG),
    ),
    min_size=1,
    max_size=5,
)


@pytest.fixture(scope="module")
def config_dump(tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("dump") / "xds.json"
    assert main(["translate", str(BASE), str(SCENARIO), "-o", str(out)]) == 0
    return json.loads(out.read_text(encoding="utf-8"))


@FUZZ
@given(damage=DAMAGE)
def test_a_damaged_config_dump_is_reported_not_crashed(config_dump: Any, damage: Damage) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        xds = Path(tmp) / "xds.json"
        xds.write_text(json.dumps(_damaged(config_dump, damage, min_depth=2)), encoding="utf-8")
        report = str(Path(tmp) / "report.txt")
        assert main(["check", str(BASE), str(SCENARIO), "--xds", str(xds), "-o", report]) in EXITS


@FUZZ
@given(damage=DAMAGE)
def test_damaged_resources_are_reported_not_crashed(damage: Damage) -> None:
    docs = [d for d in yaml.safe_load_all((SCENARIO / "resources.yaml").read_text()) if d]
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "scenario"
        scenario.mkdir()
        broken = _damaged(docs, damage, min_depth=3)  # below each object's top level
        with (scenario / "resources.yaml").open("w", encoding="utf-8") as f:
            yaml.safe_dump_all(broken, f)
        report = str(Path(tmp) / "report.txt")
        assert main(["check", str(BASE), str(scenario), "-o", report]) in EXITS
