"""A rule whose every backendRef has weight 0 answers 500 to every request it matches.

Why it matters: the configuration is valid, and its meaning is plain in the spec:
BackendRef.weight "If weight is set to 0, no traffic should be forwarded for this
entry", and with nothing left to forward to, "all traffic which matches this rule MUST
receive a 500 status code" (HTTPRouteRule.backendRefs; the conformance test
HTTPRouteAllBackendsWeightZero). A correct translation does exactly that, so the
models agree and no finding says so; but a rule meant to send traffic nowhere is rare,
and a canary set to 0 beside a primary set to 0 by the same hand (a rollback that
zeroed both, a template whose default is 0) takes down every request the rule
matches. Reported as a warning (EV925) at the rule's ``backendRefs``, for edge and mesh
routes alike; a rule that redirects sends nothing to its backends anyway and is not
judged. A scenario that relies on it deliberately (the weights fixture) declares it.

Example: ``backendRefs: [{name: cart, port: 8080, weight: 0}, {name: cart-canary,
port: 8080, weight: 0}]``: EV925 at ``backendRefs:``, "every request the rule matches
is answered 500".
"""

from __future__ import annotations

from collections.abc import Iterable

from verifier.rules.support.mistakes import at, with_mesh_routes

from verifier.check import Context
from verifier.findings import Finding
from verifier.registry import Rule

NAME = "httproute-all-weights-zero"
CODE = "EV925"


def check(ctx: Context) -> Iterable[Finding]:
    for route in with_mesh_routes(ctx.res, ctx.controller_name):
        for rule in route.rules:
            if not rule.backend_refs or any(b.weight > 0 for b in rule.backend_refs):
                continue
            if any(f.request_redirect is not None for f in rule.filters):
                continue  # a redirect answers without a backend
            count = len(rule.backend_refs)
            yield at(
                CODE,
                NAME,
                route.meta,
                f"{rule.path or f'spec.rules[{rule.index}]'}.backendRefs",
                actual={"weights": [b.weight for b in rule.backend_refs]},
                route_rule=f"{route.meta.namespace}/{route.meta.name} rule {rule.index}",
                count=count,
            )


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("HTTPRoute",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#backendref",
    doc=(__doc__ or "").strip(),
    check=check,
)
