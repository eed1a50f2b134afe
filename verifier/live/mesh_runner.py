"""The live pass's mesh half: a scenario's mesh cases through real sidecars, judged three ways.

One start of the scenario's mesh per run (``mesh_live.MeshTarget`` in a network
namespace of the run's own, ``netns.run_in_namespace``), every mesh case sent from
its client pod through ``ForwardEcho``, and each judged as an edge case is
(``runner``: the consistency rule, ``live_unmet``, the three-way verdict), with:

- **the spec model** (``Context.mesh_spec``, the echo's part added);
- **the Envoy model** on the client's sidecar xDS, the connection redirected to
  :15001 as the pod's capture does, when the sidecar captures the request; a request
  it does not capture (a client without a sidecar, a destination its capture scope
  leaves out) is kube-proxy's alone: no Envoy decides it, the Envoy model is not
  asked (``envoy_model_agrees`` None) and the spec model's answer stands for both;
- **which route served it** (``mesh_live.Served``, from the sidecar's access log):
  a case met live through another route than the HTTPRoute rule the spec model
  chose, or through none (kube-proxy delivered it), is **passed by coincidence**
  (EV820, a failure); a route other than the one the Envoy model names is
  **attribution disagrees** (EV821).

Each sidecar is served its workload's ``translate --proxy`` xDS (``sidecars`` may
give others: a test serving a mistaken one), unrewritten but for the access log.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from verifier import pipeline
from verifier.findings import Finding, new
from verifier.forked import on_stop
from verifier.live.client import LiveResponse
from verifier.live.echo_model import echo_reply, spec_client_view
from verifier.live.mesh_live import MeshTarget, Served
from verifier.live.mesh_pods import MeshPod, captured, mesh_pods
from verifier.live.mesh_probe import LOG_FIELDS, Identities, MeshWorld
from verifier.live.netns import NamespaceRunError, NamespaceUnavailable, run_in_namespace
from verifier.live.podnet import CAPTURE_PORT
from verifier.live.replay import LiveCase, live_unmet, looks_for_mirrors, observed
from verifier.live.results import CASE, CaseResult
from verifier.live.verdict import Verdict, live_mismatches, verdict_of
from verifier.orphans import private_dir
from verifier.semantics.cases import model_unmet
from verifier.semantics.directory import backend_directory_from
from verifier.semantics.envoy.model import EnvoyModel, Redirect
from verifier.semantics.envoy.routes import route_ref
from verifier.semantics.request import Backend, Evaluation, Outcome, Request
from verifier.xds.snapshot import Snapshot

if TYPE_CHECKING:
    from verifier.check import Context
    from verifier.live.runner import LiveOptions

CAPTURED = Redirect(CAPTURE_PORT)
COINCIDENCE, ATTRIBUTION = "EV820", "EV821"
MIRRORS_SKIPPED = "a mesh case with mirrors: the live mesh does not observe mirrored copies"
PARALLEL_CASES = 16

Routes = dict[str, tuple[str | None, int | None, int | None]]


@dataclass
class MeshRun:
    """A scenario's mesh cases, judged; what the mesh's start-up cost (seconds)."""

    found: list[tuple[CaseResult, list[Finding]]]
    notes: tuple[str, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)


def route_names(snap: Snapshot) -> Routes:
    """Each xDS route's name -> the HTTPRoute, rule and match of its metadata."""
    out: Routes = {}
    for rc in snap.routes:
        for vh in rc.virtual_hosts:
            for route in vh.routes:
                if route.name:
                    ref = route_ref(route)
                    out.setdefault(route.name, (ref.httproute, ref.rule, ref.match))
    return out


def _client(request: Request) -> tuple[str, str]:
    assert request.source is not None
    return (request.source.namespace, request.source.workload)


@dataclass(frozen=True)
class _Setup:
    """Decided before the fork: the sidecars' xDS, their Envoy models and routes."""

    ctx: Context
    pods: list[MeshPod]
    sidecars: Mapping[tuple[str, str], Snapshot]
    models: Mapping[tuple[str, str], EnvoyModel]
    routes: Mapping[tuple[str, str], Routes]

    def pod(self, client: tuple[str, str]) -> MeshPod:
        return next(p for p in self.pods if p.client == client)


def _setup(ctx: Context, given: Mapping[tuple[str, str], Snapshot] | None) -> _Setup:
    pods = mesh_pods(ctx.res)
    wanted = {p.client for p in pods if p.sidecar}
    given = dict(given or {})
    sidecars = {
        **pipeline.sidecar_snapshots(
            ctx.res, wanted - set(given), ctx.trust_domain, ctx.mesh_registry
        ),
        **given,
    }
    directory = backend_directory_from(
        ctx.res, trust_domain=ctx.trust_domain, registry=ctx.mesh_registry
    )
    models = {c: EnvoyModel(s, directory) for c, s in sidecars.items()}
    routes = {c: route_names(s) for c, s in sidecars.items()}
    return _Setup(ctx, pods, sidecars, models, routes)


async def run_mesh_cases(
    scenario: str,
    ctx: Context,
    cases: list[LiveCase],
    opts: LiveOptions,
    *,
    sidecars: Mapping[tuple[str, str], Snapshot] | None = None,
) -> MeshRun:
    """Every mesh case of ``cases`` through the scenario's mesh, started once."""
    from verifier.live.runner import unsent

    skipped = [c for c in cases if looks_for_mirrors(c)]
    sent = [c for c in cases if c not in skipped]
    found: list[tuple[CaseResult, list[Finding]]] = [
        (unsent(scenario, c, skipped=MIRRORS_SKIPPED), []) for c in skipped
    ]
    if not sent:
        return MeshRun(found)
    try:
        setup = _setup(ctx, sidecars)
    except ValueError as exc:  # which pod is which (MeshPlanError), an unreadable xDS
        return MeshRun([*found, *_not_run(scenario, ctx, sent, f"the live mesh: {exc}")])
    running = {p.client for p in setup.pods}
    podless = [c for c in sent if _client(c.case.request) not in running]
    for c in podless:  # a client scaled to zero: nothing could send it
        why = f"the live mesh: no pod of {'/'.join(_client(c.case.request))} runs (0 replicas)"
        found += _not_run(scenario, ctx, [c], why)
    sent = [c for c in sent if c not in podless]
    if not sent:
        return MeshRun(found)
    controls = frozenset(_client(c.case.request) for c in sent)
    identities = {p.identity(ctx.trust_domain) for p in setup.pods if p.sidecar}
    pki = private_dir("edge-verify-mesh-pki-")

    async def inside() -> tuple[list[tuple[CaseResult, list[Finding]]], dict[str, float]]:
        issued = await Identities.issue(pki, identities)
        world = MeshWorld(
            ctx.res,
            setup.sidecars,
            issued,
            ctx.mesh_registry,
            ctx.trust_domain,
            controls=controls,
        )
        async with world:
            target = MeshTarget(world, setup.routes)
            with on_stop(target.kill_now):
                limit = asyncio.Semaphore(PARALLEL_CASES)
                try:
                    judged = await asyncio.gather(
                        *(_judge(target, setup, scenario, c, opts, limit) for c in sent)
                    )
                finally:
                    target.close()
            timings = dict(world.timings)
            starts = [s.start_seconds for s in world.running.values()]
            timings["sidecar_start_mean"] = sum(starts) / max(len(starts), 1)
        return list(judged), timings

    try:
        done = await run_in_namespace(inside, [])
    except (NamespaceRunError, NamespaceUnavailable) as exc:
        return MeshRun([*found, *_not_run(scenario, ctx, sent, f"the live mesh: {exc}")])
    finally:
        shutil.rmtree(pki, ignore_errors=True)
    judged, timings = done.value
    timings["namespace_setup"] = done.setup_seconds
    note = (
        f"mesh: {len(setup.sidecars)} sidecars fed their translate --proxy xDS over ADS, "
        f"unrewritten but for an access log on every HTTP connection manager and tcp_proxy "
        f"({', '.join(LOG_FIELDS)}); each case sent by its client pod's echo (ForwardEcho) "
        "to the Service's ClusterIP, the Service's name as Host (pods have no cluster DNS)"
    )
    return MeshRun([*found, *judged], (note,), timings)


def _not_run(
    scenario: str, ctx: Context, cases: list[LiveCase], message: str
) -> list[tuple[CaseResult, list[Finding]]]:
    """Cases no mesh could answer: each failed with the reason, and one finding (EV806
    when a sidecar refused its xDS, else EV807) at the first."""
    from verifier.live.runner import unsent

    code = "EV806" if "refused its xDS" in message else "EV807"
    first = ctx.case_locations.get(cases[0].case.name, ("", 0))
    finding = new(code, _rule(), file=first[0], line=first[1], message=message.strip())
    failed = [unsent(scenario, c, problems=(message,)) for c in cases]
    return [(failed[0], [finding]), *((r, []) for r in failed[1:])]


def _rule() -> str:
    from verifier.live.runner import RULE

    return RULE


def _models(setup: _Setup, request: Request) -> tuple[Evaluation, Evaluation, bool]:
    """The spec model's answer and the Envoy model's (the spec's when no sidecar
    captures the request: kube-proxy's path), and whether the Envoy model was asked."""
    ctx = setup.ctx
    raw = ctx.mesh_spec(request, trace=False)
    spec = Evaluation(spec_client_view(ctx.res, request, raw.outcome), raw.trace)
    client = _client(request)
    model = setup.models.get(client)
    if model is None or not captured(
        ctx.res, ctx.mesh_registry, setup.pod(client), request.address
    ):
        return spec, spec, False
    envoy = model.evaluate(request, echo_reply(request), trace=False, redirect=CAPTURED)
    return spec, envoy, True


def _http(setup: _Setup, request: Request) -> bool:
    """The Envoy model has an HTTP connection manager of the client's sidecar take the
    request (its access log then has a line with our request id)."""
    selected = setup.models[_client(request)].connection_of(request, CAPTURED)
    return selected is not None and selected.chain.tcp is None


def _backends(*outcomes: Outcome) -> tuple[Backend, ...]:
    return tuple(b for o in outcomes for b in o.backends if b.weight > 0)


async def _judge(
    target: MeshTarget,
    setup: _Setup,
    scenario: str,
    c: LiveCase,
    opts: LiveOptions,
    limit: asyncio.Semaphore,
) -> tuple[CaseResult, list[Finding]]:
    from verifier.live.runner import _attempt, _consistent

    started = time.monotonic()
    request = c.case.request
    spec, envoy, asked = _models(setup, request)
    target.predicted[request] = _backends(spec.outcome, envoy.outcome)
    both_miss = bool(
        model_unmet(c.case.expect, spec.outcome, request)
        and model_unmet(c.case.expect, envoy.outcome, request)
    )
    if both_miss:  # it cannot converge: our sidecars ACKed before the first case
        run = await _attempt(target, c, opts, limit)  # type: ignore[arg-type]
        attempts, problems = 1, live_unmet(run)
    else:
        run, attempts, problems = await _consistent(target, c, opts, limit)  # type: ignore[arg-type]
    responses = await target.attribute(run.responses, logged=asked and _http(setup, request))
    served = [target.served(r) for r in responses]
    verdict = _verdict(target, spec.outcome, envoy.outcome, responses, met=not problems)
    if not asked:  # kube-proxy's answer: no Envoy to be odd; a miss is the case's (EV801)
        verdict = replace(verdict, odd_one_out=None)
    findings = _three_way(setup.ctx, c, spec, envoy, run.outcomes[0], verdict)
    where = setup.ctx.case_locations.get(c.case.name, ("", 0))
    chosen = spec.outcome.route
    expected = (chosen.httproute, chosen.rule) if chosen and chosen.httproute else None
    by_chance = [s for s in served if (s.key[:2] if s.key else None) != expected]
    if not problems and by_chance:
        wanted, how = _rule_text(expected), by_chance[0].describe()
        problems = [f"passed by coincidence: the spec model chose {wanted}; served by {how}"]
        findings.append(
            new(
                COINCIDENCE,
                _rule(),
                file=where[0],
                line=where[1],
                resource=f"HTTPRoute {expected[0]}" if expected else "",
                request=request.to_json(),
                case=c.case.name,
                chosen=wanted,
                served=how,
            )
        )
    elif problems and not findings:
        findings.append(
            new(
                "EV801",
                _rule(),
                file=where[0],
                line=where[1],
                request=request.to_json(),
                case=c.case.name,
                attempts=attempts,
                problems="; ".join(problems),
            )
        )
    if asked:
        findings += _attribution(setup.ctx, c, envoy, served, where)
    result = CaseResult(
        scenario=scenario,
        name=c.case.name,
        kind=CASE,
        passed=not problems,
        attempts=attempts,
        request=f"from {'/'.join(_client(request))}: {request.line()}",
        expected=_expected(c),
        observed=observed(run),
        spec_agrees=verdict.spec_agrees,
        envoy_model_agrees=verdict.envoy_model_agrees if asked else None,
        xds_route=served[0].route if served else "",
        problems=tuple(problems),
        odd_one_out=verdict.odd_one_out,
        seconds=time.monotonic() - started,
        attribution="; ".join(dict.fromkeys(s.describe() for s in served)),
    )
    return result, findings


def _verdict(
    target: MeshTarget,
    spec: Outcome,
    envoy: Outcome,
    responses: Sequence[LiveResponse],
    met: bool,
) -> Verdict:
    """The three-way verdict of the first answer that disagrees, else of the first; the
    answering pod named for each model as that model names it (``MeshTarget.named``)."""
    first: Verdict | None = None
    for resp in responses:
        v = verdict_of(
            spec,
            envoy,
            live_mismatches(spec, target.named(resp, _backends(spec))),
            live_mismatches(envoy, target.named(resp, _backends(envoy))),
            met,
        )
        if v.odd_one_out is not None:
            return v
        first = first or v
    assert first is not None
    return first


def _expected(c: LiveCase) -> dict[str, object]:
    from verifier.live.runner import _expected as expected

    return expected(c)


def _rule_text(key: tuple[str | None, int | None] | None) -> str:
    return "no route (kube-proxy's path)" if key is None else f"HTTPRoute {key[0]} rule {key[1]}"


def _attribution(
    ctx: Context, c: LiveCase, envoy: Evaluation, served: list[Served], where: tuple[str, int]
) -> list[Finding]:
    """EV821 when the sidecar's log names another route than the Envoy model does."""
    model = envoy.outcome.route.xds_name if envoy.outcome.route else None
    other = [s for s in served if (s.route or None) != (model or None)]
    if not other:
        return []
    return [
        new(
            ATTRIBUTION,
            _rule(),
            file=where[0],
            line=where[1],
            request=c.case.request.to_json(),
            note=c.case.name,
            served=other[0].describe(),
            model=f"route {model}" if model else "no route",
        )
    ]


def _three_way(
    ctx: Context,
    c: LiveCase,
    spec: Evaluation,
    envoy: Evaluation,
    live: Outcome,
    verdict: Verdict,
) -> list[Finding]:
    """One finding for a three-way disagreement, at the case, the HTTPRoute the spec
    model chose as its resource (the edge's codes)."""
    from verifier.live.runner import disagreement

    if verdict.odd_one_out is None:
        return []
    file, line = ctx.case_locations.get(c.case.name, ("", 0))
    route = spec.outcome.route
    resource = f"HTTPRoute {route.httproute}" if route and route.httproute else ""
    at = (file, line, resource, "")
    return [disagreement(verdict.odd_one_out, at, c.case.request, spec, envoy, live, c.case.name)]
