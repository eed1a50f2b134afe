"""A fuzzing campaign: each property searched under a time budget, failures shrunk
and written as fixtures.

Hypothesis drives the search (its example database under ``.edge-verify/`` replays
earlier failures first); a failure stops its property's search and is shrunk.
The budget is split evenly between the properties; shrinking gets its own
allowance (``shrink_seconds``) so a found bug is always reported small.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir, storage_directory
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase
from hypothesis.errors import Flaky

from verifier.errors import InputErrors

from .coverage import world_coverage
from .properties import PROPERTIES, Env, Failure, LivePlane, needs_plane
from .worlds import World, worlds


class _BudgetSpent(BaseException):
    """Ends a search: a BaseException, so Hypothesis does not take it for a failure."""


class _Found(Exception):
    """A property failed on the drawn world: Hypothesis shrinks it."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.summary)
        self.failure = failure


@dataclass
class Found:
    failure: Failure
    examples: int  # examples drawn when it was first found
    seconds: float  # seconds from the property's start to first finding it
    shrink_steps: int = 0
    fixture: str | None = None


@dataclass
class PropertyRun:
    name: str
    examples: int = 0
    requests: int = 0
    # Requests drawn but not sent to real Envoy, by reason (envoy-agrees' mesh requests
    # no sidecar decides, or whose answer rests on an assumption).
    not_sent: dict[str, int] = field(default_factory=dict)
    mesh_sent: int = 0  # mesh requests sent through real sidecars
    seconds: float = 0.0
    found: Found | None = None


@dataclass
class Campaign:
    properties: list[PropertyRun] = field(default_factory=list)
    coverage: Counter[str] = field(default_factory=Counter)
    features: dict[str, int] = field(default_factory=dict)

    @property
    def examples(self) -> int:
        return sum(p.examples for p in self.properties)

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.properties)

    @property
    def failures(self) -> list[Found]:
        return [p.found for p in self.properties if p.found is not None]


Progress = Callable[[PropertyRun], None]
T = TypeVar("T")
# Runs ``work`` with a live plane up and returns its value (``plane.in_plane``).
PlaneRunner = Callable[[Callable[[LivePlane], T]], T]


def run_property(
    name: str,
    env: Env,
    *,
    budget: float,
    seed_value: int,
    database: ExampleDatabase | None,
    shrink_seconds: float = 60.0,
    max_examples: int = 1_000_000,
    shrink_steps: int | None = None,
    campaign: Campaign,
    progress: Progress | None = None,
) -> PropertyRun:
    """Search one property until it fails (then shrink) or ``budget`` is spent."""
    prop = PROPERTIES[name]
    run = PropertyRun(name)
    start = time.monotonic()
    smallest: list[tuple[int, Failure]] = []

    spent = [False]

    def search(data: Any) -> None:
        now = time.monotonic()
        if run.found is None and now - start > budget:
            spent[0] = True
            raise _BudgetSpent
        if run.found is not None and (
            now - start - run.found.seconds > shrink_seconds
            or (shrink_steps is not None and run.found.shrink_steps >= shrink_steps)
        ):  # seconds bound a user's wait; steps give the same result however loaded
            spent[0] = True
            raise _BudgetSpent
        world: World = data.draw(worlds(mesh=env.mesh), label="world")
        if run.found is None:
            run.examples += 1
            campaign.coverage.update(world_coverage(world))
        else:
            run.found.shrink_steps += 1
        try:
            failure = prop(env, world, data)
        except InputErrors:
            # A world the tool refuses is a strategy bug: show it, never pass over it.
            raise
        if run.found is None:
            run.requests = sum(env.seen.values())
            run.not_sent = dict(env.not_sent)
            run.mesh_sent = env.mesh_sent
        if progress is not None:
            progress(run)
        if failure is None:
            return
        size = len(failure.world.yaml())
        if not smallest or size <= smallest[0][0]:
            smallest[:] = [(size, failure)]
        if run.found is None:
            run.found = Found(failure, run.examples, time.monotonic() - start)
        raise _Found(failure)

    search.__name__ = search.__qualname__ = f"edge_verify_fuzz_{name.replace('-', '_')}"
    test = given(st.data())(search)
    test = settings(
        database=database,
        max_examples=max_examples,
        deadline=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
        report_multiple_bugs=False,
        print_blob=False,
    )(test)
    test = seed(seed_value)(test)
    # Hypothesis drops the database of a seeded test (``seed`` resets the setting)
    # and keys it by the test function's source. Both are put back here, through
    # the attributes ``seed`` and ``given`` themselves use: --seed makes a run
    # reproducible, earlier failures are still replayed first, and the key is
    # the property's and translator's. tests/test_fuzz_command.py holds the replay.
    used = test._hypothesis_internal_use_settings  # type: ignore[attr-defined]
    test._hypothesis_internal_use_settings = settings(used, database=database)  # type: ignore[attr-defined]
    test._hypothesis_internal_database_key = database_key(name, env)  # type: ignore[attr-defined]
    try:
        test()
    except _Found:
        pass
    except (_BudgetSpent, Flaky):
        # Hypothesis may report the example cut short by the budget as a strategy
        # that stopped drawing early: only a stop of ours is taken for one.
        if not spent[0]:
            raise
    run.seconds = time.monotonic() - start
    if run.found is not None and smallest:
        run.found.failure = smallest[0][1]
    return run


def run_campaign(
    env: Env,
    names: Sequence[str],
    *,
    budget: float,
    seed_value: int,
    database_dir: Path | None,
    shrink_seconds: float = 60.0,
    max_examples: int = 1_000_000,
    shrink_steps: int | None = None,
    progress: Progress | None = None,
    plane: PlaneRunner[Any] | None = None,
) -> Campaign:
    """Each property in turn, the budget split evenly. The properties that need a
    real Envoy (``needs_plane``) run together inside ``plane`` (one Envoy for all of
    them, in a process of its own), the others here."""
    with _hypothesis_home():
        return _campaign(
            env,
            names,
            budget=budget,
            seed_value=seed_value,
            database=DirectoryBasedExampleDatabase(str(database_dir)) if database_dir else None,
            shrink_seconds=shrink_seconds,
            max_examples=max_examples,
            shrink_steps=shrink_steps,
            progress=progress,
            plane=plane,
        )


@contextmanager
def _hypothesis_home() -> Iterator[None]:
    """Hypothesis keeps caches (the constants it reads from the source, its charmap)
    in its home directory, ``.hypothesis/`` in the working directory by default: a
    clean run left that in the user's directory. What is worth keeping, the example
    database, has its own place (``--database``, made once a failure is kept), so the
    caches live in a temporary home for the run; a ``HYPOTHESIS_STORAGE_DIRECTORY``
    the user set is theirs and kept."""
    if os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        yield
        return
    before = storage_directory(intent_to_write=False).home_directory
    with tempfile.TemporaryDirectory(prefix="edge-verify-hypothesis-") as home:
        set_hypothesis_home_dir(home)
        try:
            yield
        finally:
            set_hypothesis_home_dir(before)


def _campaign(
    env: Env,
    names: Sequence[str],
    *,
    budget: float,
    seed_value: int,
    database: ExampleDatabase | None,
    shrink_seconds: float,
    max_examples: int,
    shrink_steps: int | None,
    progress: Progress | None,
    plane: PlaneRunner[Any] | None,
) -> Campaign:
    share = budget / max(1, len(names))

    def one(name: str) -> tuple[PropertyRun, Counter[str], dict[str, int]]:
        env.seen.clear()
        env.not_sent.clear()
        env.mesh_sent = 0
        part = Campaign()
        run = run_property(
            name,
            env,
            budget=share,
            seed_value=seed_value,
            database=database,
            shrink_seconds=shrink_seconds,
            max_examples=max_examples,
            shrink_steps=shrink_steps,
            campaign=part,
            progress=progress,
        )
        return run, part.coverage, dict(env.seen)

    live = [n for n in names if needs_plane(n, env)]
    done: dict[str, tuple[PropertyRun, Counter[str], dict[str, int]]] = {}
    if live:
        if plane is None:
            raise ValueError(f"{', '.join(live)} need a live plane")

        def inside(p: LivePlane) -> list[tuple[PropertyRun, Counter[str], dict[str, int]]]:
            env.plane = p
            return [one(n) for n in live]

        done.update(zip(live, plane(inside), strict=True))
    campaign = Campaign()
    for name in names:
        run, coverage, seen = done[name] if name in done else one(name)
        campaign.coverage.update(coverage)
        for feature, count in seen.items():
            campaign.features[feature] = campaign.features.get(feature, 0) + count
        campaign.properties.append(run)
    return campaign


def database_key(name: str, env: Env) -> bytes:
    """One key per property and translator: what failed for one is replayed for it."""
    return hashlib.sha256(f"edge-verify fuzz\0{name}\0{env.translator.name}".encode()).digest()


def fixture_name(failure: Failure) -> str:
    digest = hashlib.sha256(failure.world.yaml().encode()).hexdigest()[:8]
    return f"fuzz-{failure.property}-{digest}"
