"""Which xDS route served each live answer, from Envoy's access log, against the Envoy model.

An answer alone cannot tell the route a case meant from another route that
reaches the same backend: a 200 from the right pod proves the backend, not the
route. The served xDS carries one addition, an access log naming the route
(``served.with_access_log``), and each answer is matched to its line by our
request id (``NamespaceHarness.attribute``). The reported ``xds_route`` is that
logged route, never the model's guess; an answer with no line is
``unattributed``, with the reason, and judged on nothing.

The logged route is then held to the Envoy model's route for the same request
(their xDS route names). Where they differ, live and the model chose different
routes: **attribution disagrees** (``EV810``), a failure even when the answer
itself is right, because the model's account of why it is right is wrong (the
served xDS is not the one the model read, or the model mispicks among routes
that lead to the same place).

The mesh needs one more verdict, **passed by coincidence**: the expected backend
answered, but not through the route the spec model chose (no route at all, the
request delivered by kube-proxy; or another one). On the edge every answer from a
backend comes through some route of the served xDS, and which HTTPRoute rule the
spec model chose is compared with the xDS by ``check``; the shape is here
(``Attribution.spec_route``, ``results.COINCIDENCE``) for the mesh's sidecars to
fill in ``judge``.
"""

from __future__ import annotations

from collections.abc import Sequence

from verifier.check import Context
from verifier.live.client import LiveResponse
from verifier.live.results import (
    AGREES,
    ATTRIBUTED,
    DISAGREES,
    NO_ROUTE,
    UNATTRIBUTED,
    Attribution,
)
from verifier.semantics.request import Evaluation, RouteRef

CODE = "EV810"  # attribution disagrees
# A target that logs nothing for us (a rewritten copy, a cluster's Gateway).
NO_LOG = "this data plane has no access log of ours"
NO_HTTP = "no HTTP exchange (the connection or its TLS handshake failed): no route ran"


def judge(responses: Sequence[LiveResponse], envoy: Evaluation, *, logged: bool) -> Attribution:
    """The answers' logged routes and the verdict against the Envoy model's route.

    ``logged``: whether the target writes our access log at all. Answers that
    never reached Envoy's HTTP layer (status 0) have no line to look for: no route
    served them, which the log cannot say and need not."""
    ref = envoy.outcome.route
    model = (ref.xds_name or "") if ref is not None else ""
    http = [r for r in responses if r.status]
    if not http:  # the router never ran: that is known without a log line
        verdict = AGREES if not model else DISAGREES
        return Attribution(NO_ROUTE, model_route=model, verdict=verdict, why=NO_HTTP)
    if not logged:
        return Attribution(UNATTRIBUTED, model_route=model, why=NO_LOG)
    entries = [r.access for r in http if r.access is not None]
    routes = tuple(dict.fromkeys(e.route for e in entries))
    odd = [e for e in entries if e.route != model]
    first = odd[0] if odd else entries[0] if entries else None  # the one to show
    missing = len(http) - len(entries)
    verdict = DISAGREES if odd else AGREES if not missing else ""
    why = f"{missing} of {len(http)} answers not in Envoy's access log" if missing else ""
    state = UNATTRIBUTED if first is None or missing else ATTRIBUTED if any(routes) else NO_ROUTE
    return Attribution(
        state,
        route=first.route if first else "",
        cluster=first.cluster if first else "",
        routes=tuple(r for r in routes if r),
        model_route=model,
        verdict=verdict,
        why=why,
    )


def xds_route(ctx: Context, attribution: Attribution) -> str:
    """The xDS path of the route Envoy logged (its name where the snapshot has no
    route of that name); "" when no route is known to have served the answer."""
    if not attribution.route:
        return ""
    name = attribution.route
    return ctx.xds_path_of_route(RouteRef(xds_name=name)) or name


def problem(attribution: Attribution) -> str:
    """The line a failed case's report gives an attribution that fails it."""
    served = attribution.route or "no route"
    model = attribution.model_route or "no route"
    return f"attribution disagrees: Envoy served route {served}, the Envoy model chose {model}"
