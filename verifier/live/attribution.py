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

**Passed by coincidence** (``EV811``): the answer is the one the case expects
and the spec model predicts, but the route Envoy served it through was made
from another HTTPRoute rule than the one the spec model chose (a broader rule
placed first that happens to reach the same backend). ``check`` compares
answers, so it cannot see this; the route's rule is the one its metadata names
(``aether.io/route``, which the Envoy model reads into its ``RouteRef``), and
xDS without it is not judged. On the mesh an answer may also come through no
route at all (kube-proxy delivered it): ``Attribution.spec_route`` and
``COINCIDENCE`` are the same verdict's shape there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from verifier.check import Context
from verifier.live.client import LiveResponse
from verifier.live.results import (
    AGREES,
    ATTRIBUTED,
    COINCIDENCE,
    DISAGREES,
    NO_ROUTE,
    UNATTRIBUTED,
    Attribution,
)
from verifier.semantics.request import Evaluation, RouteRef

CODE = "EV810"  # attribution disagrees
COINCIDENCE_CODE = "EV811"  # passed by coincidence
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


def rule_of(ref: RouteRef | None) -> str:
    """``ns/name rule N``: the HTTPRoute rule a route stands for; "" when unknown."""
    if ref is None or not ref.httproute or ref.rule is None:
        return ""
    return f"{ref.httproute} rule {ref.rule}"


def by_coincidence(
    found: Attribution,
    spec: Evaluation,
    envoy: Evaluation,
    *,
    met: bool,
    ruleless: bool = False,
) -> Attribution:
    """``found`` with the rule the spec model chose (``spec_route``); its verdict is
    ``COINCIDENCE`` when the answer is right (``met``) but the route Envoy logged,
    the Envoy model's, was made from another rule, or no route served it while the
    spec model chose a rule (what the mesh's kube-proxy does, ``why`` saying so; on
    the edge a right answer that no route gave is not known to happen).
    ``ruleless``: a route without a rule in its metadata was made from none (a
    sidecar's route to the Service itself, in our translator's xDS), not unknown."""
    chosen = rule_of(spec.outcome.route)
    found = replace(found, spec_route=chosen)
    if not met or not chosen or found.verdict != AGREES:
        return found
    if found.state == NO_ROUTE and found.why != NO_HTTP:  # Envoy logged it, routed nowhere
        return replace(found, verdict=COINCIDENCE, why=found.why or "served by no route")
    served = rule_of(envoy.outcome.route)  # the logged route is the model's: its rule
    if found.state == ATTRIBUTED and served and served != chosen:
        return replace(found, verdict=COINCIDENCE, why=f"served by {served}")
    if found.state == ATTRIBUTED and not served and ruleless:
        return replace(found, verdict=COINCIDENCE, why="served by a route of no HTTPRoute rule")
    return found


def xds_route(ctx: Context, attribution: Attribution) -> str:
    """The xDS path of the route Envoy logged (its name where the snapshot has no
    route of that name); "" when no route is known to have served the answer."""
    if not attribution.route:
        return ""
    name = attribution.route
    return ctx.xds_path_of_route(RouteRef(xds_name=name)) or name


def served(attribution: Attribution) -> str:
    """``route NAME``, or ``no route``: what served the answer, as reports say it."""
    return f"route {attribution.route}" if attribution.route else "no route"


def problem(attribution: Attribution) -> str:
    """The line a failed case's report gives an attribution that fails it."""
    if attribution.verdict == COINCIDENCE:
        return (
            f"passed by coincidence: Envoy served it through {served(attribution)} "
            f"({attribution.why}), not {attribution.spec_route}, which the spec model chose"
        )
    model = attribution.model_route or "no route"
    return (
        f"attribution disagrees: Envoy served it through {served(attribution)}, "
        f"the Envoy model chose {model}"
    )
