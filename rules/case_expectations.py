"""Every case of the cases tables given to `check` is met by both models.

Why it matters: a cases table is the scenario author's reading of the spec,
written independently of both models; a case one model misses is either a
model bug or a misreading, and either must be looked at before trusting a green
run. The same table drives the live pass, so a case that fails here will fail
there too.

Example: a case expects `GET /v2` with `Version: two` to reach
`infra-backend-v2`; the Envoy model sends it to `infra-backend-v1`.
"""

from __future__ import annotations

from collections.abc import Iterable

from verifier.check import Context
from verifier.findings import Finding, new
from verifier.registry import Rule
from verifier.semantics.cases import Case, unmet

NAME = "case-expectations"


def _located(ctx: Context, case: Case) -> tuple[str, int]:
    for gw_key, gw in ctx.res.gateways.items():
        if gw_key == (case.gateway.namespace, case.gateway.name):
            where = gw.meta.where()
            return where.file, where.line
    return "", 0


def check(ctx: Context) -> Iterable[Finding]:
    for case in ctx.cases:
        gateway = (case.gateway.namespace, case.gateway.name)
        evaluations = {
            "spec": ctx.spec(gateway, case.request),
            "Envoy": ctx.envoy.evaluate(case.request),
        }
        for model, ev in evaluations.items():
            problems = unmet(case.expect, ev.outcome, case.request)
            if not problems:
                continue
            file, line = ctx.case_locations.get(case.name, _located(ctx, case))
            yield new(
                "EV701",
                NAME,
                file=file,
                line=line,
                resource=f"case {case.name}",
                xds_path=ctx.xds_path_of(ev) if model == "Envoy" else "",
                request=case.request.to_json(),
                actual=ev.outcome.to_json(),
                case=case.name,
                model=model,
                problems="; ".join(problems),
            )


RULE = Rule(
    NAME,
    ("EV701",),
    ("HTTPRoute",),
    "fixtures/README.md",
    (__doc__ or "").strip(),
    check,
)
