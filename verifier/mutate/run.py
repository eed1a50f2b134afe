"""`edge-verify mutate`: how many plausible translator mistakes `check` catches.

Every mutant of every scenario's xDS is checked with the same rules and cases
as `check`; a mutant is killed when any finding appears (the unmutated xDS
must have none, or the score means nothing). Mutants proven equivalent (no
request can tell them apart) are set aside, so score = killed / (total -
equivalent). The spec side does not change between mutants, so its answers
are computed once per scenario and shared.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from verifier import expected, pipeline
from verifier.check import Context
from verifier.errors import InputError, InputErrors
from verifier.findings import Finding
from verifier.forked import map_forked
from verifier.mutate.catalog import equivalent, mutants
from verifier.registry import Rule, run
from verifier.semantics.directory import backend_directory_from

# Mutants are valid xDS by construction (Envoy accepts them all), and running
# Envoy per mutant would dominate the run: that rule is judged on the
# unmutated config only.
SKIPPED_RULES = frozenset({"envoy-accepts-config"})


@dataclass
class MutationReport:
    total: int = 0
    killed: int = 0
    equivalent: int = 0
    survived: list[dict[str, str]] = field(default_factory=list)
    baseline_findings: list[str] = field(default_factory=list)
    # rule name -> mutants it reported: the evidence that each rule can fire
    fired: dict[str, int] = field(default_factory=dict)

    @property
    def score(self) -> float:
        judged = self.total - self.equivalent
        return self.killed / judged if judged else 1.0

    def add(self, other: MutationReport) -> None:
        """Fold in another scenario's report (scenarios are mutated independently)."""
        self.total += other.total
        self.killed += other.killed
        self.equivalent += other.equivalent
        self.survived += other.survived
        self.baseline_findings += other.baseline_findings
        for rule, count in other.fired.items():
            self.fired[rule] = self.fired.get(rule, 0) + count

    def to_json(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "killed": self.killed,
            "equivalent": self.equivalent,
            "survived": self.survived,
            "score": round(self.score, 4),
            "baseline_findings": self.baseline_findings,
            "fired": dict(sorted(self.fired.items())),
        }


def mutate_scenario(
    scn: pipeline.Scenario,
    opts: pipeline.CheckOptions,
    rules: Sequence[Rule],
    report: MutationReport,
) -> None:
    # Every mutant asks the spec the same questions: share the answers.
    base, result = pipeline.prepare(scn, opts, spec_cache={})
    if base is None:
        if result.input_errors:
            raise InputErrors(result.input_errors)
        return  # a negative scenario: no xDS to mutate
    active = [r for r in rules if r.name not in SKIPPED_RULES]
    # The declared findings of rules the profile does not run cannot be reported.
    not_run = frozenset(c for r in rules if not r.claimed_by(opts.profile) for c in r.codes)
    baseline = _undeclared(scn, run(rules, base).findings, not_run)
    report.baseline_findings += [f"{scn.name}: {f.code} {f.message}" for f in baseline]
    spec_cache = base.spec_cache
    hostless = backend_directory_from(base.res).unready_names()
    for mutant in mutants(base.snapshot):
        report.total += 1
        if equivalent(base.snapshot, mutant, hostless):
            report.equivalent += 1
            continue
        ctx = Context(
            base.res,
            mutant.snapshot,
            base.profile,
            base.controller_name,
            cases=base.cases,
            case_locations=base.case_locations,
            mesh_registry=base.mesh_registry,
            trust_domain=base.trust_domain,
            spec_cache=spec_cache,
        )
        findings = _undeclared(scn, run(active, ctx).findings, not_run)
        for rule in {f.rule for f in findings}:
            report.fired[rule] = report.fired.get(rule, 0) + 1
        if findings:
            report.killed += 1
        else:
            report.survived.append(
                {
                    "scenario": scn.name,
                    "operator": mutant.operator,
                    "xds_path": mutant.xds_path,
                    "detail": mutant.detail,
                }
            )


def _undeclared(
    scn: pipeline.Scenario, findings: list[Finding], not_run: frozenset[str]
) -> list[Finding]:
    """``findings`` less those the scenario declares (expected-findings.yaml): a
    configuration mistake made on purpose is found on every mutant alike, so it kills
    none. A declaration the unmutated config does not meet is bad input, as for check."""
    if not scn.expected_findings:
        return findings
    judged = expected.judge(scn.expected_findings, findings, not_run)
    if judged.missing:
        raise InputErrors(judged.missing)
    return judged.unexpected


def mutate_all(
    paths: Sequence[str],
    opts: pipeline.CheckOptions,
    rules: Sequence[Rule],
    progress: Callable[[int, int, str], None] | None = None,
) -> MutationReport:
    scenarios = pipeline.discover(paths, opts)

    def one(scn: pipeline.Scenario) -> tuple[MutationReport, list[InputError]]:
        part = MutationReport()
        try:
            mutate_scenario(scn, opts, rules, part)
        except InputErrors as exc:
            return part, exc.errors
        return part, []

    report = MutationReport()
    errors: list[InputError] = []
    # Scenarios are independent: spread over the cores, folded in scenario order.
    for i, (part, bad) in enumerate(map_forked(one, scenarios)):
        report.add(part)
        errors += bad
        if progress is not None:
            progress(i + 1, len(scenarios), scenarios[i].name)
    if errors:
        raise InputErrors(errors)
    return report
