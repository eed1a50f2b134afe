"""The Rule type and the run loop.

Rules are listed explicitly in ``rules/__init__.py`` (no registration by
import side effect), sorted by name, so what runs is visible in one place and
meta-tests can check every rule's code, docs, features and fixtures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from verifier.features import PROFILES
from verifier.findings import Finding
from verifier.forked import ForkedCall, can_fork

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
    # True when ``check`` asks the models about requests (witnesses, cases): such
    # rules run in the parent, which owns the comparison workers; the others may
    # run beside them in a child (see ``run``).
    reads_models: bool = field(default=False, compare=False)
    # Why the rule cannot run on this machine (a tool it needs is missing), or None.
    # Such a rule is reported skipped with that reason: a run must not look as if
    # it checked what it could not.
    unavailable: Callable[[], str | None] | None = field(default=None, compare=False)
    # True when the rule judges an edge's xDS (a listener per Gateway port, virtual
    # hosts per hostname, the edge's mesh clusters): skipped when the xDS checked is a
    # sidecar's (check --xds FILE --proxy NS/WORKLOAD), which the mesh rules judge.
    edge_xds: bool = field(default=False, compare=False)

    def claimed_by(self, profile: str) -> bool:
        return all(f in PROFILES[profile] for f in self.features)


SIDECAR_ONLY = "the xDS is a sidecar's (--proxy), and this rule judges an edge's"


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
        why = rule.unavailable() if rule.unavailable is not None else None
        if why is None and rule.edge_xds and not ctx.edge_xds:
            why = SIDECAR_ONLY
        if why is not None:
            skipped.append((rule.name, why))
            continue
        claimed.append(rule)
    problem = ctx.models_problem if any(r.reads_models for r in claimed) else None
    if problem is not None:
        why = f"the Envoy model cannot read this xDS: {problem}"
        skipped += [(r.name, why) for r in claimed if r.reads_models]
        claimed = [r for r in claimed if not r.reads_models]
    findings: list[Finding] = []
    with ExitStack() as started:
        for rule in claimed:
            if rule.background is not None:
                started.enter_context(rule.background(ctx))
        here = [r for r in claimed if r.reads_models or r.background is not None]
        aside = [r for r in claimed if r not in here]
        child = _beside(aside, ctx)
        if child is None:
            here = claimed
        else:
            started.callback(child.close)
        # A rule that started work in the background is asked last, so its child
        # (Envoy's validate) works while the others run, not while the parent waits.
        for rule in sorted(here, key=lambda r: r.background is not None):
            findings.extend(rule.check(ctx))
        if child is not None:
            answered, found = child.result()
            findings.extend(found if answered and found is not None else _checked(aside, ctx))
    found = _folded(_unrestated(findings))
    return RunResult(sorted(set(found)), [r.name for r in claimed], skipped)


def _unrestated(findings: list[Finding]) -> list[Finding]:
    """Without the EV701s that restate other findings: a case the Envoy model misses,
    when the models' answers already gave a finding (with a request that shows it,
    and the feature it breaks), is the same mistake seen from the cases table. The
    case is itself a witness, so its request was judged by the feature rules. A case
    the *spec* model misses is always kept: the spec model, not the xDS, is in doubt."""
    if not any(
        f.code not in ("EV701", "EV702", "EV703") and f.request is not None for f in findings
    ):
        return findings
    return [f for f in findings if not (f.code == "EV701" and "the Envoy model" in f.message)]


def _folded(findings: list[Finding]) -> list[Finding]:
    """One mistake, one finding: a case that fails because of a configuration mistake
    (EV702, at the mistake's line) when the configuration rules already report that
    mistake there (EV9xx, with its fix) is told on that finding, as a related place
    with what the models predict of the case, and its request; the EV702 goes. Where no
    configuration finding stands at that line (its rule skipped, say), the EV702 stays."""
    cases = [f for f in findings if f.code == "EV702"]
    if not cases:
        return findings
    static = {(f.file, f.line): f for f in findings if f.code.startswith("EV9") and f.file}
    out = [f for f in findings if f.code != "EV702" and f not in static.values()]
    for c in cases:
        host = static.get((c.file, c.line))
        if host is None:
            out.append(c)
            continue
        static[(c.file, c.line)] = replace(
            host,
            related=(*host.related, *c.related),
            request=host.request or c.request,
            expected=host.expected or c.expected,
            actual=host.actual or c.actual,
            xds_path=host.xds_path or c.xds_path,
        )
    return out + list(static.values())


# Below this many xDS routes the rules that only read the config take less time
# than a child costs to start and answer.
PARALLEL_MIN_ROUTES = 2_000


def _checked(rules: Iterable[Rule], ctx: Context) -> list[Finding]:
    return [f for rule in rules for f in rule.check(ctx)]


def _beside(rules: list[Rule], ctx: Context) -> ForkedCall[list[Finding]] | None:
    """The rules that only read the config, in a child while the parent answers
    witnesses (about 0.7 s of 6 at 10,000 rules, otherwise spent after them).
    Findings are sorted at the end, so where a rule ran does not show. A child that
    fails is answered by running the rules here, which raises what they raise."""
    routes = sum(len(vh.routes) for rc in ctx.snapshot.routes for vh in rc.virtual_hosts)
    if not rules or routes < PARALLEL_MIN_ROUTES or not can_fork():
        return None
    return ForkedCall(lambda: _checked(rules, ctx))
