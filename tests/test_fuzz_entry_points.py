"""Every entry point of the CLI, fed damaged copies of valid inputs, ends in a report
or an input error: exit 0, 1 or 2, no traceback, in bounded time and memory, and an
exit 2 names the damaged file (or option). Issue 12, item 3.

test_fuzz_inputs.py damages two inputs of one command; bad input reaches the tool
through every command and every file it reads (cases tables, mesh registries,
per-type xDS directories, CA certificates, standard input, option values), and
each reader had its own crash in issue 12's list. Here each entry point gets a
share of a few thousand examples by its cost (tests/entry_points.py has the list
and the counts, printed at the end of the session). Derandomized when CI=true, so a
CI failure is the same failure everywhere; elsewhere each run draws anew and keeps
failures in .hypothesis/ to replay first. benchmarks/fuzz_inputs.py runs the same
property for longer.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from entry_points import ENTRY_POINTS, survives_damage, warm, workspace


@pytest.fixture(scope="module")
def valid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The valid inputs, every entry point run once on them (warm for the forks)."""
    ws = workspace(tmp_path_factory.mktemp("valid"))
    warm(ws)
    return ws


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_damaged_input_ends_in_a_report_or_an_input_error(name: str, valid: Path) -> None:
    examples = ENTRY_POINTS[name].examples
    survives_damage(name, valid, examples, derandomize=os.environ.get("CI") == "true")()
