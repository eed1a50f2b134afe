"""The rule evaluation both kinds of parent feed: from the (route, rule, match)
candidates that accept a request to the outcome.

A Gateway listener (``spec.model``) and a Service frontend (``spec.mesh``) differ
in which Routes apply to a request; once those Routes' matching matches are
known, the spec reads them alike: "Across all rules specified on applicable
Routes, precedence must be given to ..." (HTTPRouteRule.matches; ``spec.match``),
then the winning rule's filters and backends (``spec.action``). ``port`` is the
parent's port the request arrived on: the Gateway Listener's, or the Service's
(a redirect with no scheme and no port keeps it).
"""

from __future__ import annotations

from dataclasses import dataclass

from verifier.gatewayapi.resources import Resources
from verifier.semantics.request import Evaluation, Outcome, Request
from verifier.semantics.spec.action import act
from verifier.semantics.spec.filters import HeaderPlan
from verifier.semantics.spec.match import Candidate, deciding_criterion, precedence_key

# HTTPRouteRule.matches: "When no rules matching a request have been
# successfully attached to the parent a request is coming from, a HTTP 404
# status code MUST be returned."
NO_MATCH_STATUS = 404


@dataclass(frozen=True)
class Decision:
    evaluation: Evaluation
    response_plan: HeaderPlan


def answer(status: int, trace: list[str]) -> Decision:
    """An outcome that is only a status (no response, 404, ...) and the trace to it."""
    return Decision(Evaluation(Outcome(status), tuple(trace)), HeaderPlan())


def decide_rule(
    res: Resources,
    candidates: list[Candidate],
    request: Request,
    port: int,
    trace: list[str],
    tracing: bool = True,
) -> Decision:
    """The winning candidate's outcome, or 404 when no candidate accepts the request."""
    if not candidates:
        trace.append(f"no attached rule matches: {NO_MATCH_STATUS}")
        return answer(NO_MATCH_STATUS, trace)
    ranked = sorted(candidates, key=precedence_key)
    winner = ranked[0]
    if tracing and len(ranked) > 1:
        trace.append(
            f"winner {winner.describe()}; beats {ranked[1].describe()} "
            f"on {deciding_criterion(winner, ranked[1])}"
        )
    elif tracing:
        trace.append(f"winner {winner.describe()} (only candidate)")
    action = act(res, port, winner, request)
    trace.extend(action.trace)
    trace.append(f"status {action.outcome.status}")
    return Decision(Evaluation(action.outcome, tuple(trace)), action.response_plan)
