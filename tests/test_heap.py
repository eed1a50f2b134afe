"""The collector settings of a run are scoped to it: the CLI runs in-process in tests."""

from __future__ import annotations

import gc

from verifier import cli
from verifier.heap import YOUNG_THRESHOLD, fewer_collections, loaded_objects_frozen


def test_thresholds_are_raised_during_a_run_and_restored_after() -> None:
    before = gc.get_threshold()
    with fewer_collections():
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
    assert gc.get_threshold() == before


def test_loaded_objects_are_unfrozen_after_the_checks() -> None:
    assert gc.get_freeze_count() == 0
    with loaded_objects_frozen():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_a_check_leaves_the_collector_as_it_found_it(repo_cwd: object) -> None:
    before = gc.get_threshold()
    code = cli.main(["check", "fixtures/base", "fixtures/httproute-header-matching"])
    assert code == 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_cycles_are_still_collected_while_loaded_objects_are_frozen() -> None:
    class Node:
        def __init__(self) -> None:
            self.me = self

    with fewer_collections(), loaded_objects_frozen():
        Node()
        assert gc.collect() >= 1
