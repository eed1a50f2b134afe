"""`edge-verify mutate`: how many plausible translator mistakes `check` catches.

Every mutant of every scenario's xDS is checked with the same rules and cases
as `check`; a mutant is killed when any finding appears (the unmutated xDS
must have none, or the score means nothing). Mutants proven equivalent (no
request can tell them apart) are set aside, so score = killed / (total -
equivalent). The spec side does not change between mutants, so its answers
are computed once per scenario and shared.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from verifier import expected, pipeline
from verifier.check import Context
from verifier.errors import InputError, InputErrors
from verifier.findings import Finding
from verifier.forked import map_forked
from verifier.gatewayapi import mesh_attach, workloads
from verifier.mesh_compare import SidecarXds
from verifier.mutate.catalog import Operator, equivalent, mutants, with_peers
from verifier.registry import Rule, run
from verifier.semantics.directory import backend_directory_from
from verifier.semantics.request import Source
from verifier.xds.snapshot import Snapshot

# Mutants are valid xDS by construction (Envoy accepts them all), and running
# Envoy per mutant would dominate the run: that rule is judged on the
# unmutated config only.
SKIPPED_RULES = frozenset({"envoy-accepts-config"})


@dataclass
class Tally:
    """The counts of one kind of xDS mutated: the edge's, or the sidecars'."""

    total: int = 0
    killed: int = 0
    equivalent: int = 0

    @property
    def score(self) -> float:
        judged = self.total - self.equivalent
        return self.killed / judged if judged else 1.0

    def add(self, other: Tally) -> None:
        self.total += other.total
        self.killed += other.killed
        self.equivalent += other.equivalent

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dataclasses.asdict(self)
        out["score"] = round(self.score, 4)
        return out


EDGE = "edge"
SIDECARS = "sidecars"


@dataclass
class MutationReport:
    total: int = 0
    killed: int = 0
    equivalent: int = 0
    survived: list[dict[str, str]] = field(default_factory=list)
    baseline_findings: list[str] = field(default_factory=list)
    # rule name -> mutants it reported: the evidence that each rule can fire
    fired: dict[str, int] = field(default_factory=dict)
    # The same counts per kind of xDS (EDGE, SIDECARS): each is held to the score bar
    # on its own, so the sidecars' mutants never hide an edge survivor, nor the reverse.
    by_xds: dict[str, Tally] = field(default_factory=dict)

    @property
    def score(self) -> float:
        judged = self.total - self.equivalent
        return self.killed / judged if judged else 1.0

    def tally(self, xds: str) -> Tally:
        return self.by_xds.setdefault(xds, Tally())

    def count(self, xds: str, *, equivalent: bool = False, killed: bool = False) -> None:
        """One mutant of ``xds`` (EDGE or SIDECARS): equivalent, killed, or neither."""
        for t in (self, self.tally(xds)):
            t.total += 1
            t.equivalent += equivalent
            t.killed += killed

    def add(self, other: MutationReport) -> None:
        """Fold in another scenario's report (scenarios are mutated independently)."""
        self.total += other.total
        self.killed += other.killed
        self.equivalent += other.equivalent
        self.survived += other.survived
        self.baseline_findings += other.baseline_findings
        for rule, count in other.fired.items():
            self.fired[rule] = self.fired.get(rule, 0) + count
        for xds, t in other.by_xds.items():
            self.tally(xds).add(t)

    def to_json(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "killed": self.killed,
            "equivalent": self.equivalent,
            "survived": self.survived,
            "score": round(self.score, 4),
            "baseline_findings": self.baseline_findings,
            "fired": dict(sorted(self.fired.items())),
            "by_xds": {k: t.to_json() for k, t in sorted(self.by_xds.items())},
        }


def mutate_scenario(
    scn: pipeline.Scenario,
    opts: pipeline.CheckOptions,
    rules: Sequence[Rule],
    report: MutationReport,
    *,
    sidecars: bool = True,
) -> None:
    """Mutate the scenario's edge xDS and, with ``sidecars``, each sidecar's
    (``opts.proxy``: that one's only, and not the edge's)."""
    # --proxy without --xds names the sidecar to mutate among the reference
    # translator's; check's reading of it (whose sidecar --xds is) needs --xds.
    prep = opts if opts.xds else dataclasses.replace(opts, proxy=None)
    # Every mutant asks the spec the same questions: share the answers.
    base, result = pipeline.prepare(scn, prep, spec_cache={})
    if base is None:
        if result.input_errors:
            raise InputErrors(result.input_errors)
        return  # a negative scenario: no xDS to mutate
    # The declared findings of rules the profile does not run cannot be reported.
    not_run = frozenset(c for r in rules if not r.claimed_by(opts.profile) for c in r.codes)
    judge = _Judge(scn, rules, not_run, report)
    if base.edge_xds and not opts.proxy:
        judge.xds(base, "", partial(_edge_context, base))
    if not sidecars:
        return
    found, every = mutated_sidecars(base, opts.proxy)
    for source, snap in found:
        # The other sidecars' route tables: a consumer route leaking from one to another.
        peers = {s.line(): other for s, other in every.items() if s != source}
        judge.xds(
            sidecar_context(base, source, snap),
            source.line(),
            partial(sidecar_context, base, source),
            with_peers(peers),
        )


@dataclass
class _Judge:
    """Mutates one xDS (the edge's, or one sidecar's) and judges each mutant as
    ``check`` would, with a context ``made`` for the mutant."""

    scn: pipeline.Scenario
    rules: Sequence[Rule]
    not_run: frozenset[str]
    report: MutationReport

    def xds(
        self,
        base: Context,
        proxy: str,
        made: Callable[[Snapshot], Context],
        operators: tuple[Operator, ...] | None = None,
    ) -> None:
        """``base``'s snapshot mutated (with ``operators``, else every operator);
        ``proxy``: "" for the edge, else the sidecar's workload (NS/NAME), which its
        survivors name."""
        scn, report = self.scn, self.report
        active = [r for r in self.rules if r.name not in SKIPPED_RULES]
        baseline = _undeclared(scn, run(self.rules, base).findings, self.not_run)
        where = f"{scn.name} (sidecar {proxy})" if proxy else scn.name
        report.baseline_findings += [f"{where}: {f.code} {f.message}" for f in baseline]
        kind = SIDECARS if proxy else EDGE
        hostless = backend_directory_from(base.res).unready_names()
        # ``mutants`` with no operators given: tests may narrow it to some operators.
        found = (
            mutants(base.snapshot)
            if operators is None
            else mutants(base.snapshot, operators=operators)
        )
        for mutant in found:
            if equivalent(base.snapshot, mutant, hostless):
                report.count(kind, equivalent=True)
                continue
            findings = _undeclared(scn, run(active, made(mutant.snapshot)).findings, self.not_run)
            for rule in {f.rule for f in findings}:
                report.fired[rule] = report.fired.get(rule, 0) + 1
            report.count(kind, killed=bool(findings))
            if not findings:
                survivor = {
                    "scenario": scn.name,
                    "operator": mutant.operator,
                    "xds_path": mutant.xds_path,
                    "detail": mutant.detail,
                }
                if proxy:
                    survivor["proxy"] = proxy
                report.survived.append(survivor)


def _edge_context(base: Context, snapshot: Snapshot) -> Context:
    """The edge's context with ``snapshot`` as its xDS (the spec's answers shared)."""
    return Context(
        base.res,
        snapshot,
        base.profile,
        base.controller_name,
        cases=base.cases,
        case_locations=base.case_locations,
        mesh_registry=base.mesh_registry,
        trust_domain=base.trust_domain,
        spec_cache=base.spec_cache,
    )


def sidecar_context(base: Context, source: Source, snapshot: Snapshot) -> Context:
    """What ``check --xds SNAPSHOT --proxy SOURCE`` judges: ``snapshot`` as that
    workload's sidecar xDS, the mesh requests and cases, no edge request."""
    return Context(
        base.res,
        snapshot,
        base.profile,
        base.controller_name,
        mesh_cases=base.mesh_cases,
        case_locations=base.case_locations,
        mesh_registry=base.mesh_registry,
        trust_domain=base.trust_domain,
        spec_cache=base.spec_cache,
        sidecars=SidecarXds(given={source: snapshot}),
        edge_xds=False,
    )


def mutated_sidecars(
    base: Context, proxy: str | None
) -> tuple[list[tuple[Source, Snapshot]], dict[Source, Snapshot]]:
    """The sidecars whose xDS is mutated, with that xDS, and every sidecar's xDS known
    (the peers whose route tables foreign-route-table borrows): the one ``--xds FILE
    --proxy`` gives; else the reference translator's, for ``--proxy NS/WORKLOAD`` or,
    without it, for every workload with a sidecar when the input has mesh routes or
    mesh cases (without them, every sidecar's xDS is the same default routes, mutated
    once per mesh scenario already). None when the profile does not claim the mesh."""
    sidecars = base.sidecars
    if sidecars is None:
        return [], {}  # --xds is the edge's
    if sidecars.given:
        return sorted(sidecars.given.items()), dict(sidecars.given)
    if not proxy and not (base.mesh_witnesses or base.mesh_cases):
        return [], {}
    if not base.mesh_claimed:
        if proxy:
            why = f"profile {base.profile} does not claim the mesh: no sidecar is judged"
            raise InputErrors([InputError("--proxy", 0, "", "not-applicable", why)])
        return [], {}
    every: dict[Source, Snapshot] = {}
    for (_kind, ns, name), wl in sorted(base.res.workloads.items()):
        if workloads.has_sidecar(base.res, wl):
            snap = sidecars.of(Source(ns, name))
            assert snap is not None  # translated
            every[Source(ns, name)] = snap
    if not proxy:
        return sorted(every.items()), every
    found = mesh_attach.sidecar_workload(base.res, proxy)
    source = Source(found.meta.namespace, found.meta.name)
    return [(source, every[source])], every


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
    *,
    sidecars: bool = True,
) -> MutationReport:
    """Every scenario of ``paths`` mutated (``sidecars``: their sidecars' xDS too)."""
    scenarios = pipeline.discover(paths, opts)

    def one(scn: pipeline.Scenario) -> tuple[MutationReport, list[InputError]]:
        part = MutationReport()
        try:
            mutate_scenario(scn, opts, rules, part, sidecars=sidecars)
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
