"""A route that rewrites the Host does not also add, set or remove the Host header.

Why it matters: a URLRewrite ``hostname`` becomes a RouteAction host rewrite
(``host_rewrite_literal``, ``auto_host_rewrite``, ``host_rewrite_header``,
``host_rewrite_path_regex``); a RequestHeaderModifier on ``Host`` in the same rule
would become ``request_headers_to_add``/``_remove`` entries for ``host`` or
``:authority``. Envoy refuses every such entry, rewrite or not (checked with
``envoy --mode validate`` 1.40: ":-prefixed or host headers may not be modified",
"... may not be removed"), so the whole route configuration is NACKed. The right
translation is the host rewrite alone.

Reported once per route, for entries on the route or its weighted clusters; other
refused ``:``/``host`` header mutations are envoy-invalid-values'.

Example: ``host_rewrite_literal: backend.internal`` plus
``request_headers_to_add: [{header: {key: host, value: other}}]``.
"""

from __future__ import annotations

from collections.abc import Iterable

from verifier.rules.support import headers as hdr
from verifier.rules.support import walk

from verifier.check import Context
from verifier.findings import Finding, new
from verifier.registry import Rule

NAME = "host-rewrite-with-host-header"
CODE = "EV602"


def check(ctx: Context) -> Iterable[Finding]:
    seen: set[str] = set()
    for mutation in hdr.mutations(ctx.snapshot):
        ref = mutation.route
        if ref is None or ref.path in seen or not hdr.rewrite_conflict(mutation):
            continue
        seen.add(ref.path)
        yield new(
            CODE,
            NAME,
            **walk.route_where(ctx, ref),
            xds_path=mutation.path,
            expected={"host_rewrite": hdr.host_rewrite(ref), "host_header_mutation": None},
            actual={"host_rewrite": hdr.host_rewrite(ref), "host_header_mutation": mutation.name},
            route=ref.label,
        )


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("HTTPRouteHostRewrite",),
    spec_ref="https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/config/route/v3/route_components.proto",
    doc=(__doc__ or "").strip(),
    check=check,
)
