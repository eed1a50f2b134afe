"""The Rule type and the run loop.

Rules are listed explicitly in ``rules/__init__.py`` (no registration by
import side effect), sorted by name, so what runs is visible in one place and
meta-tests can check every rule's code, docs, features and fixtures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
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

    def claimed_by(self, profile: str) -> bool:
        return all(f in PROFILES[profile] for f in self.features)


@dataclass
class RunResult:
    findings: list[Finding]
    rules_run: list[str]
    rules_skipped: list[tuple[str, str]]  # (rule, reason)


def run(rules: Iterable[Rule], ctx: Context) -> RunResult:
    findings: list[Finding] = []
    ran: list[str] = []
    skipped: list[tuple[str, str]] = []
    for rule in sorted(rules, key=lambda r: r.name):
        if not rule.claimed_by(ctx.profile):
            missing = [f for f in rule.features if f not in PROFILES[ctx.profile]]
            skipped.append(
                (rule.name, f"profile {ctx.profile} does not claim {', '.join(missing)}")
            )
            continue
        ran.append(rule.name)
        findings.extend(rule.check(ctx))
    return RunResult(sorted(set(findings)), ran, skipped)
