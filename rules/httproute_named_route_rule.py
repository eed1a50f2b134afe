"""xDS routes that say which HTTPRoute rule they implement carry that rule's name.

Why it matters: GEP-995 names route rules so that "implementations can use the name
... in status, logs, metrics and policy attachment". The aether edge stamps each xDS
route with ``metadata.filter_metadata["aether.io/route"]``: ``httproute``
(``namespace/name``), ``rule`` (index) and ``rule_name``; access logs and stats read
``rule_name``, so a stale or missing one mislabels traffic.

Checked only for routes carrying that metadata (silent for xDS from a translator that
does not), and only when the HTTPRoute rule has a ``name``.

Example: rule 0 of ``edge-infra/named-rules`` is named ``first-rule`` but its xDS route
says ``rule_name: rule-0``.
"""

from __future__ import annotations

from collections.abc import Iterable

from verifier.rules.support import walk

from verifier.check import Context
from verifier.findings import Finding, new
from verifier.gatewayapi import model as m
from verifier.registry import Rule
from verifier.xds import read

NAME = "httproute-named-route-rule"
CODE = "EV222"


def _named_rule(ctx: Context, fields: dict[str, object]) -> tuple[m.HTTPRoute, m.RouteRule] | None:
    key = str(fields.get("httproute", "")).split("/")
    route = ctx.res.httproutes.get((key[0], key[1])) if len(key) == 2 else None
    index = fields.get("rule")
    if route is None or not isinstance(index, int | float) or not 0 <= index < len(route.rules):
        return None
    rule = route.rules[int(index)]
    return (route, rule) if rule.name else None


def check(ctx: Context) -> Iterable[Finding]:
    for ref in walk.routes(ctx.snapshot):
        meta = ref.route.metadata
        struct = meta.filter_metadata.get(walk.ROUTE_METADATA) if meta else None
        if struct is None:
            continue
        fields = read.struct_json(struct)
        found = _named_rule(ctx, fields)
        if found is None:
            continue
        route, rule = found
        actual = fields.get("rule_name")
        if actual == rule.name:
            continue
        where = route.meta.where(f"{rule.path}.name")
        yield new(
            CODE,
            NAME,
            route=ref.label,
            xds_rule_name=actual or "<none>",
            rule_name=rule.name,
            file=where.file,
            line=where.line,
            resource=f"HTTPRoute {route.meta.namespace}/{route.meta.name}",
            xds_path=f"{ref.path}.metadata",
            expected={"rule_name": rule.name},
            actual={"rule_name": actual},
        )


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("HTTPRouteNamedRouteRule",),
    spec_ref="https://gateway-api.sigs.k8s.io/geps/gep-995/",
    doc=(__doc__ or "").strip(),
    check=check,
)
