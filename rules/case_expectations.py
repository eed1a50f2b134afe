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
as a related location.

Example: a case expects `GET /v2` with `Version: two` to reach
`infra-backend-v2`; the Envoy model sends it to `infra-backend-v1`.
"""

from __future__ import annotations

from collections.abc import Iterable

from verifier.rules.support.case_judge import case_location, judge, mistake_finding, related

from verifier.check import Context
from verifier.findings import Finding, new
from verifier.registry import Rule

NAME = "case-expectations"


def check(ctx: Context) -> Iterable[Finding]:
    for case in ctx.cases:
        judged = judge(ctx, case)
        if judged.doomed:
            # Both models miss it for one reason the spec model names: one finding at
            # the mistake's line, not two at the case's.
            problems = "; ".join(dict.fromkeys(judged.spec_problems + judged.envoy_problems))
            yield mistake_finding(ctx, judged, "EV702", NAME, problems)
            continue
        for model, ev, problems in (
            ("spec", judged.spec, judged.spec_problems),
            ("Envoy", judged.envoy, judged.envoy_problems),
        ):
            if not problems:
                continue
            file, line = case_location(ctx, case)
            yield new(
                "EV701",
                NAME,
                file=file,
                line=line,
                resource=f"case {case.name}",
                xds_path=ctx.xds_path_of(ev) if model == "Envoy" else "",
                request=case.request.to_json(),
                actual=ev.outcome.to_json(),
                related=related(ctx, judged.mistakes) if model == "spec" else (),
                case=case.name,
                model=model,
                problems="; ".join(problems),
            )


RULE = Rule(
    NAME,
    ("EV701", "EV702"),
    ("HTTPRoute",),
    "docs/check.md#cases",
    (__doc__ or "").strip(),
    check,
    reads_models=True,
)
