"""What a live pass found, as data the reports render.

Kept apart from the runner so that ``verifier.report`` can render a live pass
without reaching the translator (the runner gets its xDS through the pipeline,
which may translate): a report renders what was found, whatever produced it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verifier.findings import Finding

CASE = "case"
WITNESS = "witness"

# Attribution.state: how a live answer's xDS route is known (from Envoy's access log).
ATTRIBUTED = "attributed"  # the log names the route that served it
NO_ROUTE = "no-route"  # the log has the request, and Envoy matched no route
UNATTRIBUTED = "unattributed"  # not in the log, or no log to read (``why`` says which)
# Attribution.verdict: the logged route against a model's choice for the same request.
AGREES = "agrees"
DISAGREES = "disagrees"  # live and the Envoy model chose different routes
# The answer is right, but the route that served it was made from another rule than
# the spec model chose (on the mesh also: no route, kube-proxy delivered it).
COINCIDENCE = "coincidence"


@dataclass(frozen=True)
class Attribution:
    """Which xDS route served a live answer, read from Envoy's access log (never a
    model's guess), and how that compares with the Envoy model's route.

    ``route``/``cluster``: Envoy's %ROUTE_NAME% and %UPSTREAM_CLUSTER% for the
    first logged answer (``routes``: every distinct route over a case's samples);
    ``model_route``: the Envoy model's route name for the same request ("" for
    none); ``spec_route``: the HTTPRoute rule the spec model chose ("" for none);
    ``verdict``: ``AGREES``, ``DISAGREES``, ``COINCIDENCE``, or "" when nothing
    could be judged (``why``).
    """

    state: str
    route: str = ""
    cluster: str = ""
    routes: tuple[str, ...] = ()
    model_route: str = ""
    spec_route: str = ""
    verdict: str = ""
    why: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "route": self.route or None,
            "cluster": self.cluster or None,
            "routes": list(self.routes),
            "model_route": self.model_route or None,
            "spec_route": self.spec_route or None,
            "verdict": self.verdict or None,
            "why": self.why or None,
        }


@dataclass(frozen=True)
class CaseResult:
    """One case (or witness request) of one scenario, after its last attempt.

    ``attempts`` counts sends (a batch of ``samples`` is one attempt);
    ``spec_agrees``/``envoy_model_agrees`` say whether the live answer agrees
    with that model, None when the model could not answer (an xDS the Envoy
    model cannot read; a mesh request no sidecar captures) or the request was not
    sent (``skipped``). ``attribution``: which route served the answer, from the
    proxy's access log (a mesh case: its client's sidecar route, or none).
    """

    scenario: str
    name: str
    kind: str
    passed: bool
    attempts: int
    request: str
    expected: dict[str, Any]
    observed: dict[str, Any]
    spec_agrees: bool | None
    envoy_model_agrees: bool | None
    xds_route: str
    problems: tuple[str, ...] = ()
    odd_one_out: str | None = None
    skipped: str = ""
    seconds: float = 0.0
    attribution: Attribution | None = None  # None: never sent

    @property
    def failure_kind(self) -> str:
        """What a report calls this failure: the odd one out, else an attribution
        verdict that fails the case, else an unmet expectation."""
        if self.odd_one_out:
            return self.odd_one_out
        if self.attribution is not None and self.attribution.verdict in (DISAGREES, COINCIDENCE):
            return f"attribution-{self.attribution.verdict}"
        return "unmet"

    @property
    def tries(self) -> str:
        """``1 attempt``, ``29 attempts``: how many, as a report says it."""
        return "1 attempt" if self.attempts == 1 else f"{self.attempts} attempts"

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "name": self.name,
            "kind": self.kind,
            "passed": self.passed,
            "skipped": self.skipped or None,
            "attempts": self.attempts,
            "request": self.request,
            "expected": self.expected,
            "observed": self.observed,
            "spec_agrees": self.spec_agrees,
            "envoy_model_agrees": self.envoy_model_agrees,
            "odd_one_out": self.odd_one_out,
            "xds_route": self.xds_route,
            "attribution": None if self.attribution is None else self.attribution.to_json(),
            "problems": list(self.problems),
        }


@dataclass(frozen=True)
class ScenarioRun:
    """One scenario's live pass: its cases and witnesses, and the feature it tests."""

    name: str
    results: tuple[CaseResult, ...]
    findings: tuple[Finding, ...] = ()
    rewritten: bool = True
    notes: tuple[str, ...] = ()
    # What the scenario's live mesh cost to start, in seconds (empty: no mesh ran).
    timings: dict[str, float] = field(default_factory=dict)
    # Every case is a mesh case: a test of the MESH-HTTP profile, not GATEWAY-HTTP's.
    mesh: bool = False
    additions: tuple[str, ...] = ()  # what was added to the served xDS (the access log)
    # Features its cases exercised by what they sent (``features.exercised``), besides
    # the one its name spells: counted as tested by the ConformanceReport.
    features: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results if not r.skipped)

    @property
    def unattributed(self) -> list[CaseResult]:
        """Sent cases whose answers are not all attributed to a route by Envoy's log."""
        return [
            r
            for r in self.results
            if r.attribution is not None and r.attribution.state == UNATTRIBUTED
        ]


@dataclass
class LiveReport:
    """Everything a live pass found, in scenario order."""

    scenarios: list[ScenarioRun] = field(default_factory=list)
    seconds: float = 0.0
    consistency: dict[str, Any] = field(default_factory=dict)

    @property
    def results(self) -> list[CaseResult]:
        return [r for s in self.scenarios for r in s.results]

    @property
    def findings(self) -> list[Finding]:
        return [f for s in self.scenarios for f in s.findings]

    @property
    def rewritten(self) -> bool:
        """The harness ran a rewritten copy of the xDS (loopback addresses, inlined
        routes) for at least one scenario; every report says so."""
        return any(s.rewritten for s in self.scenarios) or not self.scenarios

    @property
    def remote(self) -> str | None:
        """Where the answers came from when a cluster's Gateway gave them (a remote
        target's note, "remote: NS/NAME at IP"); None for our own data plane."""
        for s in self.scenarios:
            for note in s.notes:
                if note.startswith("remote: "):
                    return note.removeprefix("remote: ")
        return None

    @property
    def unattributed(self) -> list[CaseResult]:
        """Sent cases whose answers are not all attributed to a route by Envoy's log."""
        return [r for s in self.scenarios for r in s.unattributed]

    @property
    def additions(self) -> dict[str, list[str]]:
        """Scenario -> what was added to the xDS served to its Envoy (the access log)."""
        return {s.name: list(s.additions) for s in self.scenarios if s.additions}

    def summary(self) -> dict[str, Any]:
        results = self.results
        return {
            "remote": self.remote,
            "passed": sum(1 for r in results if r.passed and not r.skipped),
            "failed": sum(1 for r in results if not r.passed and not r.skipped),
            "skipped": sum(1 for r in results if r.skipped),
            "unattributed": len(self.unattributed),
            "seconds": round(self.seconds, 2),
            "rewritten": self.rewritten,
        }

    @property
    def ok(self) -> bool:
        return all(r.passed or r.skipped for r in self.results)
