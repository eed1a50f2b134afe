"""A three-scenario copy of fixtures/ for tests that run a whole suite quickly.

base, one clean scenario, one whose cases table has one deliberately wrong
case (``WRONG_CASE`` expects infra-backend-v1 where the route sends to v2),
and one invalid-* scenario that must be rejected with its expected errors.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import FIXTURES

CLEAN = "httproute-exact-path-matching"
BROKEN = "httproute-simple-same-namespace"
INVALID = "invalid-hostname"
WRONG_CASE = "numeric-target-port-default-replicas"
WRONG_LINE = 10  # where the case starts in BROKEN's cases.yaml (findings point there)


def small_suite(root: Path, *, wrong_case: bool = True) -> Path:
    """The suite under ``root``; goldens are left out (nothing here compares them)."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("base", CLEAN, BROKEN, INVALID):
        (root / name).mkdir()
        for f in (FIXTURES / name).glob("*.yaml"):
            if not f.name.endswith(".golden.yaml"):
                shutil.copy(f, root / name / f.name)
    if wrong_case:
        cases = root / BROKEN / "cases.yaml"
        text = cases.read_text()
        assert text.splitlines()[WRONG_LINE - 1] == f"- name: {WRONG_CASE}"
        wrong = text.replace("backend: infra-backend-v2", "backend: infra-backend-v1", 1)
        assert wrong != text
        cases.write_text(wrong)
    return root
