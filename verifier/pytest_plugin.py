"""A pytest plugin for teams whose CI is pytest: a suite of scenarios as test items.

``pytest --edge-fixtures DIR`` collects DIR (laid out like ``fixtures/``: a
``base/`` plus scenario folders) scenario by scenario, as ``edge-verify check
DIR`` reads it. A scenario is a collector, since pytest items cannot have
children: its ``check`` item is the scenario's check (no finding, or for a
scenario with ``expected-errors.yaml`` exactly those errors), and each case of
its ``cases.yaml`` is an item of its own, so one wrong case is one failure named
after it, with the finding's text. ``--edge-live`` also sends each case through
a real Envoy (the live pass), and a case item then needs both.

The plugin is registered for every pytest run of an environment edge-verifier
is installed in (entry point ``pytest11``), so without ``--edge-fixtures`` it
does nothing at all, and it imports nothing of the verifier until it is asked
to: a team's unrelated test run must not pay for, or be changed by, it.

Each scenario is checked once, when its first item runs, and the result is
shared by its items; the live pass likewise.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from verifier.findings import Finding
    from verifier.live.results import CaseResult
    from verifier.pipeline import Scenario, ScenarioResult

OPTION = "--edge-fixtures"
# case-expectations: reported by the case's own item. A finding at a configuration
# mistake a case fails on (EV702, or the EV9xx finding it was folded into) names the
# case among its related locations, and fails the case's item too.
CASE_CODES = ("EV701", "EV702", "EV703")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("edge-verifier")
    group.addoption(
        OPTION,
        metavar="DIR",
        default=None,
        help="collect every scenario of this suite (base/ plus scenario folders) as tests",
    )
    group.addoption(
        "--edge-live",
        action="store_true",
        default=False,
        help="with --edge-fixtures: also send every case through a real Envoy",
    )


def _suite(config: pytest.Config) -> Path | None:
    value = config.getoption(OPTION)
    return Path(value).resolve() if value else None


def pytest_configure(config: pytest.Config) -> None:
    """Add DIR to what pytest collects, unless an argument already contains it
    (collecting it twice would run every scenario twice)."""
    suite = _suite(config)
    if suite is None:
        return
    if not suite.is_dir():
        raise pytest.UsageError(f"{OPTION} {suite}: not a directory")
    given = [Path(str(a).split("::")[0]).resolve() for a in config.args]
    if not any(suite == g or g in suite.parents for g in given):
        config.args.append(str(suite))


def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    suite = _suite(parent.config)
    if suite is None or path.resolve() != suite:
        return None
    return EdgeSuite.from_parent(parent, path=path)


class EdgeFailure(Exception):
    """A scenario or case that does not hold; its text is the report."""


class EdgeSuite(pytest.Directory):
    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        from verifier import pipeline

        for scn in pipeline.discover([str(self.path)], pipeline.CheckOptions()):
            yield EdgeScenario.from_parent(self, name=scn.name, scenario=scn)


class EdgeScenario(pytest.Collector):
    def __init__(self, *, scenario: Scenario, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scenario = scenario
        self._checked: ScenarioResult | None = None
        self._live: dict[str, CaseResult] | None = None

    def collect(self) -> Iterator[pytest.Item]:
        from verifier import pipeline

        yield CheckItem.from_parent(self, name="check")
        for path in self.scenario.cases:
            cases, _ = pipeline.load_cases(path)
            for case in cases:
                yield CaseItem.from_parent(self, name=case.name)

    def checked(self) -> ScenarioResult:
        if self._checked is None:
            from verifier import pipeline
            from verifier.rules import RULES

            self._checked = pipeline.check_scenario(self.scenario, pipeline.CheckOptions(), RULES)
        return self._checked

    def live(self) -> dict[str, CaseResult]:
        """Each case's live result, by name; bad input fails every case with its text."""
        if self._live is None:
            from verifier import pipeline
            from verifier.errors import InputErrors
            from verifier.live.results import CASE
            from verifier.live.runner import LiveOptions, run_live

            try:
                report = run_live(list(self.scenario.paths), pipeline.CheckOptions(), LiveOptions())
            except InputErrors as exc:
                raise EdgeFailure("\n".join(str(e) for e in exc.errors)) from None
            self._live = {r.name: r for r in report.results if r.kind == CASE}
        return self._live


def _lines(findings: list[Finding]) -> list[str]:
    from verifier.report.text import finding_lines

    return [line for f in findings for line in finding_lines(f)]


class _EdgeItem(pytest.Item):
    @property
    def owner(self) -> EdgeScenario:
        assert isinstance(self.parent, EdgeScenario)
        return self.parent

    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: Any = None,
    ) -> str:
        """The finding's own words, not a traceback into the plugin."""
        if isinstance(excinfo.value, EdgeFailure):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.owner.path, 0, f"{self.owner.name}::{self.name}"


class CheckItem(_EdgeItem):
    def runtest(self) -> None:
        result = self.owner.checked()
        lines = [str(e) for e in result.input_errors]
        lines += _lines([f for f in result.findings if f.code not in CASE_CODES])
        if lines:
            raise EdgeFailure("\n".join(lines))


class CaseItem(_EdgeItem):
    def runtest(self) -> None:
        result = self.owner.checked()
        if result.input_errors:
            raise EdgeFailure("the scenario did not load; see its check item")
        me = f"case {self.name}"
        mine = [
            f
            for f in result.findings
            if (f.code in CASE_CODES and f.resource == me)
            or any(r.what == me or r.what.startswith(f"{me} ") for r in f.related)
        ]
        lines = _lines(mine)
        if self.config.getoption("--edge-live"):
            live = self.owner.live().get(self.name)
            if live is None:
                lines.append(f"live: case {self.name} was not run")
            elif not live.passed:
                lines.append(f"live: case {self.name} failed after {live.tries}")
                lines += [f"    {p}" for p in live.problems]
        if lines:
            raise EdgeFailure("\n".join(lines))
