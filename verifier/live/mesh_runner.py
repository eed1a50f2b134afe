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
- **which route served it**, from the client sidecar's access log, judged as the
  edge's answers are (``attribution``, ``runner.routed``, docs/live.md): a route
  other than the one the Envoy model names is **attribution disagrees** (EV810);
  a case met live through a route of another HTTPRoute rule than the spec model
  chose, or through none, is **passed by coincidence** (EV811). What differs on the
  mesh: a request with no line in its sidecar's log went by no sidecar route
  (``no-route``, kube-proxy delivered it) where the Envoy model has no HTTP
  connection manager take it (not captured, or passed through); where it has
  one, a missing line is ``unattributed``, as on the edge.

Each sidecar is served its workload's ``translate --proxy`` xDS (``sidecars`` may
give others: a test serving a mistaken one), unrewritten but for the access log.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from verifier import pipeline
from verifier.check import at_chosen_match
from verifier.findings import Finding, new
from verifier.forked import on_stop
from verifier.gatewayapi import workloads as wl
from verifier.live import attribution as attr
from verifier.live import mesh_inbound_live as inbound
from verifier.live.client import LiveResponse
from verifier.live.echo_model import echo_reply, spec_client_view
from verifier.live.mesh_live import MeshAnswers, MeshTarget
from verifier.live.mesh_pods import MeshPod, captured, mesh_pods
from verifier.live.mesh_probe import LOG_FIELDS, Identities, MeshWorld
from verifier.live.netns import NamespaceRunError, NamespaceUnavailable, run_in_namespace
from verifier.live.podnet import CAPTURE_PORT
from verifier.live.replay import LiveCase, live_unmet, looks_for_mirrors, observed
from verifier.live.results import AGREES, CASE, DISAGREES, NO_ROUTE, Attribution, CaseResult
from verifier.live.verdict import Verdict, live_mismatches, verdict_of
from verifier.orphans import private_dir
from verifier.rules.mesh_inbound import port_probes
from verifier.rules.support.case_judge import judge_mesh
from verifier.semantics import witness as wt
from verifier.semantics.cases import model_unmet
from verifier.semantics.directory import backend_directory_from
from verifier.semantics.envoy.model import EnvoyModel, Redirect
from verifier.semantics.request import Backend, Evaluation, Outcome, Request
from verifier.xds.snapshot import Snapshot

if TYPE_CHECKING:
    from verifier.check import Context
    from verifier.live.runner import LiveOptions

CAPTURED = Redirect(CAPTURE_PORT)
KUBE_PROXY = "no sidecar log line: kube-proxy delivered it"
MIRRORS_SKIPPED = "a mesh case with mirrors: the live mesh does not observe mirrored copies"
PARALLEL_CASES = 16


@dataclass
class MeshRun:
    """A scenario's mesh cases, judged; what the mesh's start-up cost (seconds)."""

    found: list[tuple[CaseResult, list[Finding]]]
    notes: tuple[str, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)
    additions: tuple[str, ...] = ()  # what was added to the sidecars' xDS (access logs)


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

    def pod(self, client: tuple[str, str]) -> MeshPod:
        return next(p for p in self.pods if p.client == client)


def _setup(
    ctx: Context,
    given: Mapping[tuple[str, str], Snapshot] | None,
    clients: Collection[tuple[str, str]] | None = None,
) -> _Setup:
    """``given`` sidecars' xDS, the reference translator's for the rest (of ``clients``
    only, when given: a cluster's mesh runs the others), and their Envoy models."""
    pods = mesh_pods(ctx.res)
    wanted = {p.client for p in pods if p.sidecar and (clients is None or p.client in clients)}
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
    return _Setup(ctx, pods, sidecars, models)


def split_mirrors(
    scenario: str, cases: list[LiveCase]
) -> tuple[list[tuple[CaseResult, list[Finding]]], list[LiveCase]]:
    """The cases no mesh can judge (mirrors: seen only in our own backends' logs, which
    a mesh run does not read), reported skipped with the reason, and the rest to send."""
    from verifier.live.runner import unsent

    skipped = [c for c in cases if looks_for_mirrors(c)]
    found: list[tuple[CaseResult, list[Finding]]] = [
        (unsent(scenario, c, skipped=MIRRORS_SKIPPED), []) for c in skipped
    ]
    return found, [c for c in cases if c not in skipped]


async def run_mesh_cases(
    scenario: str,
    ctx: Context,
    cases: list[LiveCase],
    opts: LiveOptions,
    *,
    sidecars: Mapping[tuple[str, str], Snapshot] | None = None,
) -> MeshRun:
    """Every mesh case of ``cases`` through the scenario's mesh, started once."""
    found, sent = split_mirrors(scenario, cases)
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
    probes = _inbound_probes(setup) if opts.witnesses else []
    identities = {p.identity(ctx.trust_domain) for p in setup.pods if p.sidecar}
    identities |= inbound.identities(probes)
    pki = private_dir("edge-verify-mesh-pki-")

    Inside = tuple[list[tuple[CaseResult, list[Finding]]], dict[str, float], tuple[str, ...]]

    async def inside() -> Inside:
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
            target = MeshTarget(world)
            with on_stop(target.kill_now):
                limit = asyncio.Semaphore(PARALLEL_CASES)
                try:
                    judged = await asyncio.gather(
                        *(_judge(target, setup, scenario, c, opts, limit) for c in sent)
                    )
                finally:
                    target.close()
                if probes:  # each backend sidecar's :15008, as mesh-inbound probes it
                    certs = inbound.write_certificates(
                        pki, issued.issued, inbound.identities(probes)
                    )
                    judged += await inbound.send_all(ctx, scenario, _rule(), probes, certs)
            timings = dict(world.timings)
            starts = [s.start_seconds for s in world.running.values()]
            timings["sidecar_start_mean"] = sum(starts) / max(len(starts), 1)
            added = tuple(
                f"sidecar of pod {pod}: {line}"
                for pod, lines in sorted(world.additions.items())
                for line in lines
            )
        return list(judged), timings, added

    try:
        done = await run_in_namespace(inside, [])
    except (NamespaceRunError, NamespaceUnavailable) as exc:
        return MeshRun([*found, *_not_run(scenario, ctx, sent, f"the live mesh: {exc}")])
    finally:
        shutil.rmtree(pki, ignore_errors=True)
    judged, timings, additions = done.value
    timings["namespace_setup"] = done.setup_seconds
    note = (
        f"mesh: {len(setup.sidecars)} sidecars fed their translate --proxy xDS over ADS, "
        f"unrewritten but for an access log on every HTTP connection manager and tcp_proxy "
        f"({', '.join(LOG_FIELDS)}); each case sent by its client pod's echo (ForwardEcho) "
        "to the Service's cluster DNS name, which the pod resolves through the mesh's DNS "
        "to its ClusterIP (an address no Service holds is dialled as it is)"
    )
    return MeshRun([*found, *judged], (note,), timings, additions)


def _inbound_probes(setup: _Setup) -> list[inbound.InboundProbe]:
    """``check``'s mesh-inbound probes of every workload's sidecar that some Service
    selects, each to the workload's first pod, judged on the sidecar's served xDS."""
    res, out = setup.ctx.res, []
    for client, snap in sorted(setup.sidecars.items()):
        workload = wl.workload(res, *client)
        pod = next((p for p in setup.pods if p.client == client), None)
        if workload is None or pod is None:
            continue
        for p in port_probes(setup.ctx, workload, setup.models[client], snap):
            out.append(inbound.InboundProbe(pod, p))
    return out


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
    target: MeshAnswers,
    setup: _Setup,
    scenario: str,
    c: LiveCase,
    opts: LiveOptions,
    limit: asyncio.Semaphore,
) -> tuple[CaseResult, list[Finding]]:
    from verifier.live.runner import (
        Answer,
        _attempt,
        _consistent,
        _failed_case,
        _judged_once,
        routed,
        three_way_findings,
    )

    started = time.monotonic()
    request = c.case.request
    spec, envoy, asked = _models(setup, request)
    # As check judges the case (``case_judge``): a case both models miss because of a
    # configuration mistake is reported at the mistake, as on the edge.
    predicted = judge_mesh(setup.ctx, c.case, setup.ctx.mesh_spec(request, trace=False), envoy)
    target.predicted[request] = _backends(spec.outcome, envoy.outcome)
    # Our sidecars ACKed their xDS before the first case, so there is nothing to wait
    # for: where the Envoy model, reading that xDS, says the case is unmet (a cleartext
    # cluster to a mesh peer, a dropped route), retrying until the budget ends would
    # only repeat the same answer. One attempt is judged as it comes. (A cluster's
    # sidecars may still be taking their configuration in: retried there.)
    settled = target.acked and bool(model_unmet(c.case.expect, envoy.outcome, request))
    if settled:
        run = await _attempt(target, c, opts, limit)  # type: ignore[arg-type]
        attempts, problems = 1, live_unmet(run)
    else:
        run, attempts, problems = await _consistent(target, c, opts, limit)  # type: ignore[arg-type]
    logged = asked and _http(setup, request)
    responses = await target.attribute(run.responses, logged=logged)
    verdict = _verdict(target, spec.outcome, envoy.outcome, responses, met=not problems)
    if not asked:  # kube-proxy's answer: no Envoy to be odd; a miss is the case's (EV801)
        verdict = replace(verdict, odd_one_out=None)
    w = wt.Witness(c.case.parent_key, request, wt.CASE, note=c.case.name)
    answer = Answer(
        setup.ctx,
        w,
        spec,
        envoy,
        run.outcomes[0],
        verdict,
        at=_at(setup.ctx, c, w, spec, envoy),
        ruleless=True,
    )
    findings = three_way_findings(answer)
    if target.logs:
        found = _attribution(responses, envoy, logged=logged)
    else:  # no log of ours (a cluster's sidecars): unattributed, never the model's guess
        found = attr.judge(responses, envoy, logged=False)
    judged = routed(answer, found, met=not (problems or findings))
    if settled and predicted.both_miss:  # sent once: judged as the edge's (EV808, EV801)
        findings, problems = _judged_once(setup.ctx, c, predicted, verdict, findings, problems)
    elif problems and not findings:  # the case itself fails: at it, as on the edge
        findings.append(_failed_case(setup.ctx, c, predicted, attempts, problems))
    findings += judged.findings
    problems = [*problems, *judged.problems]
    result = CaseResult(
        scenario=scenario,
        name=c.case.name,
        kind=CASE,
        passed=not problems,
        attempts=attempts,
        request=request.line(),  # its "from NS/WORKLOAD" included
        expected=_expected(c),
        observed=observed(run),
        spec_agrees=verdict.spec_agrees,
        envoy_model_agrees=verdict.envoy_model_agrees if asked else None,
        xds_route=judged.attribution.route,
        problems=tuple(problems),
        odd_one_out=verdict.odd_one_out,
        seconds=time.monotonic() - started,
        attribution=judged.attribution,
    )
    return result, findings


def _attribution(
    responses: Sequence[LiveResponse], envoy: Evaluation, *, logged: bool
) -> Attribution:
    """The answers' routes from the client sidecar's log (``attribution.judge``), but
    where no line was expected (``logged``: the Envoy model has an HTTP connection
    manager of a capturing sidecar take the request) and none came, no sidecar route
    served it: kube-proxy delivered it (``no-route``). ``envoy``: the Envoy model's
    answer (the spec model's, naming no xDS route, where no sidecar captures it)."""
    found = attr.judge(responses, envoy, logged=True)
    if logged or found.why == attr.NO_HTTP or any(r.access is not None for r in responses):
        return found
    verdict = DISAGREES if found.model_route else AGREES
    return Attribution(NO_ROUTE, model_route=found.model_route, verdict=verdict, why=KUBE_PROXY)


def _at(ctx: Context, c: LiveCase, w: wt.Witness, spec: Evaluation, envoy: Evaluation) -> Finding:
    """Where a mesh case's three-way and attribution findings go, as ``check`` places
    the models' disagreements (and the edge's live findings): at the HTTPRoute match
    the spec model chose (else the one the xDS route that took it was made from), else
    at the Service the request was sent to; at the case when neither is known. A
    location only: no message of its own."""
    file, line, resource = ctx.where(at_chosen_match(w, spec, envoy))
    if not file:
        return _case_at(ctx, c, resource)
    return Finding(file, line, "", _rule(), "", "", resource=resource)


def _case_at(ctx: Context, c: LiveCase, resource: str = "") -> Finding:
    file, line = ctx.case_locations.get(c.case.name, ("", 0))
    return Finding(file, line, "", _rule(), "", "", resource=resource)


def _verdict(
    target: MeshAnswers,
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
