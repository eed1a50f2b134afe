"""Every case of the cases tables given to `check` is met by both models.

Why it matters: a cases table is the scenario author's reading of the spec,
written independently of both models; a case one model misses is either a
model bug or a misreading, and either must be looked at before trusting a green
run. The same table drives the live pass, so a case that fails here will fail
there too.

Every expectation a model's answer can show is judged, split ratios included
(`backend_ratio`, `status_ratio`, `mirrored_ratio`: the shares the weights give,
against the ratio and tolerance). A case both models miss because of a
configuration mistake the spec model names (a backendRef to a missing Service,
an HTTPRoute no listener accepts) is one EV702 at the mistake's line, the case
as a related location (a mesh case too, for a mistake in the rule that answers it,
or a refused Service parentRef of a mesh route written for it: EV916-EV918).
A case both models miss the same way otherwise is one
EV703 at the case, with related locations where the answer comes from: for a mesh
case whose client's sidecar does not capture it, the parentRef of the mesh route
written for that client which a missing mesh label keeps from it (EV926, EV927); the rule
the spec model chose and any backendRef of it without a ready endpoint; or, for a
split the case states otherwise, the weight of each of the rule's backendRefs
(where a user changes a split). The case and the rule disagree, whatever the xDS.
Models that miss it differently give an EV701 each.

A mesh case (sent from a client workload to a Service, docs/mesh.md) is judged
the same way, the Envoy model answering on its client's sidecar xDS (or kube-proxy,
when no sidecar captures the connection: EV701 names it as the model that misses).
Where that sidecar's xDS is not there (`check --xds` without `--proxy`, or another
workload's) or the profile does not claim the mesh, the spec model alone judges it
(an EV701, model spec, when it misses), and check says how many it judged so.

Example: a case expects `GET /v2` with `Version: two` to reach
`infra-backend-v2`; the Envoy model sends it to `infra-backend-v1`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from verifier.rules.support.case_judge import (
    Judged,
    case_location,
    judge,
    judge_mesh,
    mistake_finding,
    related,
    rule_related,
)
from verifier.rules.support.mesh_clients import causes

from verifier.check import Context
from verifier.findings import Finding, Related, new
from verifier.live.echo_model import echo_reply, spec_client_view
from verifier.mesh_compare import KUBE_PROXY
from verifier.registry import Rule
from verifier.semantics.cases import Case, model_unmet
from verifier.semantics.request import Evaluation

NAME = "case-expectations"


def check(ctx: Context) -> Iterable[Finding]:
    for case in ctx.mesh_cases:
        yield from _mesh_case(ctx, case)
    for case in ctx.cases:
        judged = judge(ctx, case)
        if judged.doomed:
            # Both models miss it for one reason the spec model names: one finding at
            # the mistake's line, not two at the case's.
            yield mistake_finding(ctx, judged, "EV702", NAME, _problems(judged))
            continue
        yield from _judged(ctx, judged)


def _problems(judged: Judged) -> str:
    return "; ".join(dict.fromkeys(judged.spec_problems + judged.envoy_problems))


def _judged(
    ctx: Context, judged: Judged, envoy: str = "Envoy", causes: tuple[Related, ...] = ()
) -> Iterable[Finding]:
    """A case both models answered: one EV703 when they miss it alike, else an EV701
    for each model that misses it (``envoy``: who answered in the Envoy model's place;
    ``causes``: a mesh route a missing mesh label keeps from the case's client, the
    first place to look when both miss it)."""
    if judged.same_miss:
        # Both models miss it alike: the case and the configuration disagree,
        # whatever the xDS, so one finding with the rule they follow.
        yield _at_case(
            ctx,
            judged,
            "EV703",
            judged.envoy,
            expected=judged.spec.outcome.to_json(),
            related=(*causes, *rule_related(ctx, judged)),
            problems="; ".join(judged.spec_problems),
        )
        return
    for model, ev, problems in (
        ("spec", judged.spec, judged.spec_problems),
        (envoy, judged.envoy, judged.envoy_problems),
    ):
        if problems:
            yield _at_case(
                ctx,
                judged,
                "EV701",
                ev if model != "spec" else None,
                actual_of=ev,
                related=related(ctx, judged.mistakes) if model == "spec" else (),
                model=model,
                problems="; ".join(problems),
            )


def _mesh_case(ctx: Context, case: Case) -> Iterable[Finding]:
    """A mesh case, as both answers meet the echo backend: the spec model's, and its
    client's sidecar's (the Envoy model on that sidecar's xDS) or kube-proxy's; the
    spec model's alone when check has neither (docs/mesh.md)."""
    raw = ctx.mesh_spec(case.request)
    answered = (
        ctx.mesh_answer(case.request, echo_reply(case.request), trace=False)
        if ctx.mesh_judges(case.request)
        else None
    )
    if answered is not None and answered.evaluation is not None:
        envoy = "kube-proxy" if answered.by == KUBE_PROXY else "Envoy"
        judged = judge_mesh(ctx, case, raw, answered.evaluation)
        if judged.doomed:  # as an edge case's: one finding at the mistake's line
            yield mistake_finding(ctx, judged, "EV702", NAME, _problems(judged))
            return
        yield from _judged(ctx, judged, envoy, causes(ctx, case.request))
        return
    spec = replace(raw, outcome=spec_client_view(ctx.res, case.request, raw.outcome))
    spec_problems = tuple(model_unmet(case.expect, spec.outcome, case.request))
    if spec_problems:
        judged = Judged(case, spec, spec, spec_problems, (), ())
        yield _at_case(
            ctx,
            judged,
            "EV701",
            None,
            actual_of=spec,
            model="spec",
            problems="; ".join(spec_problems),
        )


def _at_case(
    ctx: Context,
    judged: Judged,
    code: str,
    xds_of: Evaluation | None,
    *,
    actual_of: Evaluation | None = None,
    expected: dict[str, Any] | None = None,
    related: tuple[Related, ...] = (),
    **params: str,
) -> Finding:
    """A finding at the case's line; ``xds_of``: the Envoy answer whose route it names."""
    case = judged.case
    file, line = case_location(ctx, case)
    return new(
        code,
        NAME,
        file=file,
        line=line,
        resource=f"case {case.name}",
        xds_path=ctx.xds_path_of(xds_of) if xds_of is not None else "",
        request=case.request.to_json(),
        expected=expected,
        actual=(actual_of or judged.envoy).outcome.to_json(),
        related=related,
        case=case.name,
        **params,
    )


RULE = Rule(
    NAME,
    ("EV701", "EV702", "EV703"),
    ("HTTPRoute",),
    "docs/check.md#cases",
    (__doc__ or "").strip(),
    check,
    reads_models=True,
)
