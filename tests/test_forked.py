"""map_forked and ForkedCall: the same answers as in-process, and no child left behind.

multiprocessing.Pool, used before, ended idle workers with SIGTERM while they
waited on the task queue's shared lock; about one pool in 300 then hung for
ever in join (a CI run stood still for 15 minutes). The children here each
have their own pipe and are ended by letting them finish.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from verifier.forked import ForkedCall, map_forked, on_stop


def _double(x: int) -> int:
    return 2 * x


def test_many_maps_in_a_row_all_end() -> None:
    """600 small maps, in a child interpreter with a deadline: the old pool
    hung within the first few hundred."""
    code = (
        "from verifier.forked import map_forked\n"
        "for _ in range(600):\n"
        "    assert list(map_forked(lambda x: 2 * x, list(range(8)), min_items=2))"
        " == [2 * x for x in range(8)]\n"
    )
    done = subprocess.run([sys.executable, "-c", code], timeout=120, check=False)
    assert done.returncode == 0


def test_results_come_in_order_and_children_end() -> None:
    items = list(range(37))
    assert list(map_forked(_double, items, min_items=2)) == [2 * x for x in items]
    assert multiprocessing.active_children() == []


def _five_fails(x: int) -> int:
    if x == 5:
        raise ValueError("five")
    return x


def test_an_item_that_fails_raises_here_as_in_a_serial_map() -> None:
    with pytest.raises(ValueError, match="five"):
        list(map_forked(_five_fails, list(range(12)), min_items=2))
    assert multiprocessing.active_children() == []


def test_stopping_early_ends_the_children_at_once() -> None:
    def slow(x: int) -> int:
        time.sleep(0.05)
        return x

    started = time.monotonic()
    answers = map_forked(slow, list(range(200)), min_items=2)
    assert next(answers) == 0
    answers.close()
    assert multiprocessing.active_children() == []
    assert time.monotonic() - started < 5  # not the 10 s grace of a child that ignores SIGTERM


def test_a_stopped_child_runs_its_on_stop_cleanups(tmp_path: Path) -> None:
    """close() while the child works: what it registered with on_stop is undone."""
    made = tmp_path / "made"

    def work() -> None:
        scratch = tempfile.mkdtemp(dir=tmp_path)
        made.write_text(scratch, encoding="utf-8")
        with on_stop(lambda: os.rmdir(scratch)):
            time.sleep(60)

    call = ForkedCall(work)
    for _ in range(200):
        if made.exists() and made.read_text(encoding="utf-8"):
            break
        time.sleep(0.02)
    scratch = Path(made.read_text(encoding="utf-8"))
    assert scratch.is_dir()
    call.close()
    assert not scratch.exists()
    assert multiprocessing.active_children() == []
