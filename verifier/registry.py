"""The Rule type and the run loop.

Rules are listed explicitly in ``rules/__init__.py`` (no registration by
import side effect), sorted by name, so what runs is visible in one place and
meta-tests can check every rule's code, docs, features and fixtures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from verifier.features import PROFILES
from verifier.findings import Finding

if TYPE_CHECKING:
    from verifier.check import Context


@dataclass(frozen=True)
class Rule:
    """A small, self-describing check; ``doc`` says what, why, and an example."""

    name: str
    codes: tuple[str, ...]
    features: tuple[str, ...]
    spec_ref: str
    doc: str
    check: Callable[[Context], Iterable[Finding]] = field(compare=False)
    # Slow work ``check`` will need, started before the first rule runs so that it
    # overlaps with the others (e.g. in a child process); the run leaves the context
    # after the last rule, also on errors, so nothing outlives it.
    background: Callable[[Context], AbstractContextManager[object]] | None = field(
        default=None, compare=False
    )

    def claimed_by(self, profile: str) -> bool:
        return all(f in PROFILES[profile] for f in self.features)


@dataclass
class RunResult:
    findings: list[Finding]
    rules_run: list[str]
    rules_skipped: list[tuple[str, str]]  # (rule, reason)


def run(rules: Iterable[Rule], ctx: Context) -> RunResult:
    claimed: list[Rule] = []
    skipped: list[tuple[str, str]] = []
    for rule in sorted(rules, key=lambda r: r.name):
        if not rule.claimed_by(ctx.profile):
            missing = [f for f in rule.features if f not in PROFILES[ctx.profile]]
            skipped.append(
                (rule.name, f"profile {ctx.profile} does not claim {', '.join(missing)}")
            )
            continue
        claimed.append(rule)
    findings: list[Finding] = []
    with ExitStack() as started:
        for rule in claimed:
            if rule.background is not None:
                started.enter_context(rule.background(ctx))
        for rule in claimed:
            findings.extend(rule.check(ctx))
    return RunResult(sorted(set(findings)), [r.name for r in claimed], skipped)
