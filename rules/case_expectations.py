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
from dataclasses import replace

from verifier.check import Context
from verifier.findings import Finding, new
from verifier.live.echo_model import echo_reply, spec_client_view
from verifier.registry import Rule
from verifier.semantics.cases import Case, unmet
from verifier.semantics.request import Outcome

NAME = "case-expectations"
REFUSED = Outcome(0)  # no HTTP response: the TLS handshake failed


def _located(ctx: Context, case: Case) -> tuple[str, int]:
    for gw_key, gw in ctx.res.gateways.items():
        if gw_key == (case.gateway.namespace, case.gateway.name):
            where = gw.meta.where()
            return where.file, where.line
    return "", 0


def check(ctx: Context) -> Iterable[Finding]:
    for case in ctx.cases:
        gateway = (case.gateway.namespace, case.gateway.name)
        # Cases describe what a client sees from the echo backend (?delay=,
        # X-Echo-Set-Header, WebSocket), so both outcomes meet echo first.
        spec = ctx.spec(gateway, case.request)
        spec = replace(spec, outcome=spec_client_view(ctx.res, case.request, spec.outcome))
        envoy = ctx.envoy.evaluate(case.request, echo_reply(case.request))
        for model, ev in (("spec", spec), ("Envoy", envoy)):
            problems = unmet(case.expect, ev.outcome, case.request)
            if problems and ev.outcome.may_refuse:
                # The CAs are not in the configuration, so whether the handshake
                # passes is not knowable: a case met by either answer is not missed.
                passed = replace(ev.outcome, may_refuse=False)
                if not unmet(case.expect, passed, case.request) or not unmet(
                    case.expect, REFUSED, case.request
                ):
                    problems = []
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
    "docs/check.md#cases",
    (__doc__ or "").strip(),
    check,
    reads_models=True,
)
