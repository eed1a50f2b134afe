"""A case judged by both models, and the configuration mistake its failure rests on.

Shared by the `case-expectations` rule and the live pass, so that both say the
same thing about a case: what each model misses of it (``model_unmet``: every
expectation a model's Outcome can show, split ratios included), and, when the
spec model's answer rests on a configuration mistake it can name (a backendRef
to a Service that does not exist, an HTTPRoute no listener accepts:
``verifier.semantics.spec.mistakes``), where that mistake is. A case *both*
models miss for such a reason fails because of the configuration, not because
of the xDS: check reports it at the mistake's line, and live sends it once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from verifier.check import Context
from verifier.findings import Finding, Related, new
from verifier.live.echo_model import echo_reply, spec_client_view
from verifier.semantics.cases import Case, model_unmet
from verifier.semantics.request import Evaluation, Outcome
from verifier.semantics.shares import Shares, share_problems
from verifier.semantics.spec.mistakes import (
    Mistake,
    answering_rule,
    mistakes,
    refused_mesh_parents,
    rule_mistakes,
    unready_backends,
)

REFUSED = Outcome(0)  # no HTTP response: the TLS handshake failed

# The status reason of a mistake -> the check code that reports that mistake at its
# line, whether or not a case exercises it (same meaning, so a message can name it).
STATIC_CODES = {
    "NoMatchingParent": "EV901",
    "NotAllowedByListeners": "EV902",
    "NoMatchingListenerHostname": "EV903",
    "UnsupportedValue": "EV904",
    "BackendNotFound": "EV905",
    "InvalidKind": "EV907",
    "RefNotPermitted": "EV908",
    "UnsupportedProtocol": "EV909",
}
MISSING_PORT_CODE = "EV906"
# A mesh route's refused Service parentRef, by the field at fault -> mesh-route-accepted's code.
MESH_PARENT_CODES = {"name": "EV916", "port": "EV917", "sectionName": "EV917", "kind": "EV918"}


@dataclass(frozen=True)
class Judged:
    """Both models' answers to a case (as the echo backend completes them), what each
    misses of it, and the mistakes the spec model's answer rests on (asked only when
    the spec model misses the case)."""

    case: Case
    spec: Evaluation
    envoy: Evaluation
    spec_problems: tuple[str, ...]
    envoy_problems: tuple[str, ...]
    mistakes: tuple[Mistake, ...]

    @property
    def both_miss(self) -> bool:
        """Both models predict the case fails."""
        return bool(self.spec_problems and self.envoy_problems)

    @property
    def doomed(self) -> bool:
        """Both models predict the case fails, and the spec model names why."""
        return self.both_miss and bool(self.mistakes)

    @property
    def same_miss(self) -> bool:
        """Both models predict the case fails, and for the same reasons."""
        return self.both_miss and set(self.spec_problems) == set(self.envoy_problems)


def judge(ctx: Context, case: Case) -> Judged:
    gateway = case.gateway.key
    # Cases describe what a client sees from the echo backend (?delay=,
    # X-Echo-Set-Header, WebSocket), so both outcomes meet echo first.
    raw = ctx.spec(gateway, case.request)
    spec = replace(raw, outcome=spec_client_view(ctx.res, case.request, raw.outcome))
    envoy = ctx.envoy.evaluate(case.request, echo_reply(case.request))
    spec_problems = _missed(case, spec.outcome)
    found = mistakes(ctx.res, gateway, case.request, raw.outcome) if spec_problems else ()
    # An Envoy answer that rests on an assumption (Outcome.caveats) neither meets nor
    # misses the case: check counts it unjudged (EV110), as for any other request.
    envoy_problems = () if envoy.outcome.unjudged else _missed(case, envoy.outcome)
    return Judged(case, spec, envoy, spec_problems, envoy_problems, found)


def judge_mesh(ctx: Context, case: Case, raw: Evaluation, other: Evaluation) -> Judged:
    """A mesh case judged by the spec model's answer ``raw`` (before the echo meets it)
    and ``other``, its client's sidecar's (the Envoy model) or kube-proxy's: the same
    judgement for check and for live, so a mistake is reported at the mistake by both.
    A mesh answer rests on the rule that gave it (no listener answers it), and on the
    refused parentRefs of the mesh routes written for it (EV916-EV918, folded as EV905)."""
    spec = replace(raw, outcome=spec_client_view(ctx.res, case.request, raw.outcome))
    spec_problems = tuple(model_unmet(case.expect, spec.outcome, case.request))
    missed = () if other.outcome.unjudged else model_unmet(case.expect, other.outcome, case.request)
    found: tuple[Mistake, ...] = ()
    if spec_problems:
        refused = refused_mesh_parents(ctx.res, case.request, raw.outcome)
        found = (*rule_mistakes(ctx.res, raw.outcome), *refused)
    return Judged(case, spec, other, spec_problems, tuple(missed), found)


def _missed(case: Case, outcome: Outcome) -> tuple[str, ...]:
    problems = model_unmet(case.expect, outcome, case.request)
    if problems and outcome.may_refuse:
        # The CAs are not in the configuration, so whether the handshake passes is
        # not knowable: a case met by either answer is not missed.
        passed = replace(outcome, may_refuse=False)
        if not model_unmet(case.expect, passed, case.request) or not model_unmet(
            case.expect, REFUSED, case.request
        ):
            return ()
    return tuple(problems)


def case_location(ctx: Context, case: Case) -> tuple[str, int]:
    """The case's line in its table; else its Gateway's."""
    found = ctx.case_locations.get(case.name)
    if found is not None:
        return found
    gw = ctx.res.gateways.get(case.gateway.key)
    if gw is None:
        return "", 0
    where = gw.meta.where()
    return where.file, where.line


def mistake_location(ctx: Context, m: Mistake) -> tuple[str, int]:
    route = ctx.res.httproutes.get((m.namespace, m.name))
    if route is None:
        return "", 0
    where = route.meta.where(m.field)
    return where.file, where.line


def reason(m: Mistake) -> str:
    """``BackendNotFound, EV905``: the status reason and the code check reports it as."""
    if m.mesh_parent:
        code = MESH_PARENT_CODES.get(m.field.rsplit(".", 1)[-1], "")
    else:
        code = MISSING_PORT_CODE if m.missing_port else STATIC_CODES.get(m.reason, "")
    return f"{m.reason}, {code}" if code else m.reason


def related(ctx: Context, found: tuple[Mistake, ...]) -> tuple[Related, ...]:
    """Each mistake as a related location of a finding placed elsewhere."""
    return tuple(Related(*mistake_location(ctx, m), m.describe()) for m in found)


def rule_related(ctx: Context, judged: Judged) -> tuple[Related, ...]:
    """Where the answer the models agree on comes from: each backendRef of the rule the
    spec model chose whose share is answered 503 for want of a ready endpoint, after
    that rule; else, for a split the case states otherwise, the weight of each of its
    backendRefs (where a user changes a split); else that rule (its matches, filters)."""
    outcome = judged.spec.outcome
    found = answering_rule(ctx.res, outcome)
    if found is None:
        return ()
    route, rule = found
    meta = route.meta
    named = f"HTTPRoute {meta.namespace}/{meta.name} rule {rule.index}"
    unready = related(ctx, unready_backends(ctx.res, outcome))
    if not unready and len(rule.backend_refs) > 1 and _split_missed(judged):
        weights = []
        for i, b in enumerate(rule.backend_refs):
            where = meta.where(f"{b.path or f'{rule.path}.backendRefs[{i}]'}.weight")
            what = f"weight {b.weight} of backendRef {b.ref.name} ({named})"
            weights.append(Related(where.file, where.line, what))
        return tuple(weights)
    where = meta.where(rule.path or f"spec.rules[{rule.index}]")
    return (Related(where.file, where.line, f"{named}, chosen by the spec model"), *unready)


def _split_missed(judged: Judged) -> bool:
    """The case states a share of statuses or backends the models' split does not give."""
    expect = judged.case.expect
    stated = Shares(expect.status_ratio, expect.backend_ratio)
    return bool(share_problems(stated, judged.spec.outcome))


def case_related(ctx: Context, case: Case, problems: str = "") -> Related:
    """The case as a related place; with ``problems``, what the models predict of it."""
    what = f"case {case.name}" + (f" fails because of it: {problems}" if problems else "")
    return Related(*case_location(ctx, case), what)


def mistake_finding(ctx: Context, judged: Judged, code: str, rule: str, problems: str) -> Finding:
    """A finding about a case that fails because of a configuration mistake: at the
    mistake's line (the backendRef, the hostnames, the parentRef), the case and any
    further mistakes as related locations, so both are one click away."""
    case, first = judged.case, judged.mistakes[0]
    file, line = mistake_location(ctx, first)
    return new(
        code,
        rule,
        file=file,
        line=line,
        resource=f"{first.kind} {first.namespace}/{first.name}",
        xds_path=ctx.xds_path_of(judged.envoy),
        request=case.request.to_json(),
        expected=judged.spec.outcome.to_json(),
        actual=judged.envoy.outcome.to_json(),
        related=(case_related(ctx, case, problems), *related(ctx, judged.mistakes[1:])),
        case=case.name,
        reason=reason(first),
        mistake=first.describe(),
        problems=problems,
    )
