"""Garbage-collector settings for runs over a large, long-lived heap.

A check at 10,000 rules holds millions of objects (the loaded resources, the
xDS messages, both models' indexes) that live until the process exits, and
then allocates ~140,000 witnesses and their answers. With CPython's default
thresholds the cyclic collector re-scans that heap again and again: measured
at 10,000 rules, 5 full and 139 middle collections took ~7 s of a ~19 s run
(CPU time). Nothing here turns collection off: cycles are still found, only
less often, and objects loaded before the checks start are left out of the
scans while the checks run.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# Young-generation threshold: the default (700) collects every few hundred
# allocations; at 100,000 a run at 10,000 rules does ~10 young collections.
YOUNG_THRESHOLD = 100_000


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Collect less often for the duration (restored afterwards: tests call the CLI in-process)."""
    old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*old)


@contextmanager
def loaded_objects_frozen() -> Iterator[None]:
    """Everything alive now is skipped by collections until the block ends
    (``gc.freeze``): the loaded inputs are not garbage while they are checked.
    They are unfrozen afterwards, so a process checking many scenarios (tests,
    ``mutate``) can still reclaim their cycles."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
