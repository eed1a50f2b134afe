"""`edge-verify live`: every case (and witness) through real Envoy, judged three ways.

Scenarios are found and prepared exactly as ``check`` does (``pipeline.discover``
and ``pipeline.prepare``), so the live pass runs the very xDS that was checked,
with the same cases. Each scenario gets its own embedded harness; scenarios run
concurrently.

A case passes as a Gateway API conformance test does: its expectations are
met (``replay.live_unmet``: status, backend pod, namespace, the request the
backend saw, response headers, redirect parts, mirrors, ratios) on
``successes`` consecutive attempts within ``budget`` seconds, each request
given ``request_timeout`` seconds; after a failed attempt the next waits a
second, after a success it follows at once (upstream ``AwaitConvergence``).
A case with ``samples`` is one attempt of that many requests judged as a
whole, and one passing attempt suffices: its ratio tolerances are the
statistical check. Witness requests (``--witnesses``) have no expectation of
their own: one request each, passing when the three answers agree.

Every answer is also judged three ways (``verdict``): one finding per
disagreement, naming the odd one out.

Mesh cases (sent from a client workload to a Service) go through the scenario's
own mesh, real sidecars in a namespace per pod, and are judged by the same code,
with the route that served each answer (``mesh_runner``); a run with mesh cases
needs root and nft, and says so (exit 2) where they are missing.

With ``LiveOptions.remote`` the cases go to a cluster's Gateway instead
(``remote.RemoteTarget``, the same interface as the embedded harness), so a
case is judged by the same code whoever answers it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from verifier import features, pipeline
from verifier.check import Comparison, Context, at_chosen_match, brief
from verifier.errors import InputError, InputErrors
from verifier.findings import Finding, new
from verifier.gatewayapi.pods import Placement
from verifier.inputs import load_yaml_file
from verifier.live import attribution as attr
from verifier.live.bootstrap import BootstrapError
from verifier.live.client import LiveResponse
from verifier.live.echo_model import echo_reply, spec_client_view
from verifier.live.envoy_process import EnvoyError
from verifier.live.harness import EmbeddedHarness, HarnessError
from verifier.live.isolated import Isolated, Rejected, with_isolated_harness
from verifier.live.mesh_cluster import ClusterMesh, place, run_cluster_mesh_cases
from verifier.live.mesh_cluster import setup as mesh_setup
from verifier.live.mesh_live import mesh_unavailable
from verifier.live.mesh_runner import MeshRun, _Setup, run_mesh_cases
from verifier.live.remote import MIRRORS_SKIPPED, Remote, RemoteTarget
from verifier.live.replay import (
    CaseRun,
    LiveCase,
    live_unmet,
    looks_for_mirrors,
    observed,
    parse_live,
    statistical,
)
from verifier.live.results import (
    CASE,
    COINCIDENCE,
    DISAGREES,
    WITNESS,
    Attribution,
    CaseResult,
    LiveReport,
    ScenarioRun,
)
from verifier.live.verdict import ODD_ENVOY, ODD_LIVE, ODD_SPEC, ODD_XDS, Verdict, three_way
from verifier.rules.support.case_judge import (
    Judged,
    judge,
    mistake_finding,
    reason,
    rule_related,
)
from verifier.semantics import witness as wt
from verifier.semantics.request import Evaluation, Outcome, Request, evolve

RULE = "live-three-way"
# Why a case is not sent against a cluster: each kind goes only where it was asked to.
MESH_SKIPPED = (
    "a mesh case: against a cluster (--kubeconfig) mesh cases are sent from the client "
    "workloads' pods with --mesh"
)
EDGE_SKIPPED = (
    "an edge case: against a cluster (--kubeconfig) edge cases are sent to its Gateway "
    "with --gateway NS/NAME"
)
RETRY_DELAY = 1.0  # upstream AwaitConvergence's pause after a failed attempt
PARALLEL_REQUESTS = 16
CODES = {ODD_LIVE: "EV802", ODD_XDS: "EV803", ODD_SPEC: "EV804", ODD_ENVOY: "EV805"}
FAILED_CASE = "EV801"
MISTAKE_CONFIRMED, MISTAKE_UNCONFIRMED = "EV808", "EV809"
LIVE_CODES = (
    *("EV801", "EV802", "EV803", "EV804", "EV805", "EV806", "EV807", "EV808", "EV809"),
    attr.CODE,
    attr.COINCIDENCE_CODE,
)


@dataclass(frozen=True)
class LiveOptions:
    """How cases are judged; defaults as the upstream conformance suite's."""

    witnesses: bool = False
    successes: int = 3
    budget: float = 60.0
    request_timeout: float = 10.0
    parallel_scenarios: int = 8
    # A cluster's Gateway to send the cases to instead of an embedded data plane.
    remote: Remote | None = None
    # A cluster's mesh to send the mesh cases in, from its client pods (--mesh).
    cluster_mesh: ClusterMesh | None = None

    @property
    def cluster(self) -> bool:
        """Against a cluster (--kubeconfig): nothing of ours answers."""
        return self.remote is not None or self.cluster_mesh is not None


Progress = Callable[[ScenarioRun], None]


@dataclass
class _Prepared:
    scenario: pipeline.Scenario
    ctx: Context
    cases: list[LiveCase]
    # Against a cluster's mesh: the clients' sidecar models and where the cases go from.
    placed: tuple[_Setup, Placement] | None = None


def prepare_all(paths: Sequence[str], check: pipeline.CheckOptions) -> list[_Prepared]:
    """Every scenario with its check context and live cases; bad input raised at once.

    A negative scenario (one that must be rejected) has no data plane and is
    left out; one whose rejection is not the expected one is bad input here
    as it is for ``check``."""
    errors: list[InputError] = []
    out: list[_Prepared] = []
    for scn in pipeline.discover(paths, check):
        ctx, result = pipeline.prepare(scn, check)
        prefix = f"{scn.name}: " if scn.suite else ""
        errors += [
            InputError(e.file, e.line, e.field, e.code, prefix + e.message)
            for e in result.input_errors
        ]
        if ctx is None or result.input_errors:
            continue
        if ctx.models_problem is not None:
            why = f"the Envoy model cannot read this xDS: {ctx.models_problem}"
            errors.append(InputError(check.xds or scn.name, 0, "", "xds", why))
            continue
        out.append(_Prepared(scn, ctx, _live_cases(scn, ctx)))
    if errors:
        raise InputErrors(errors)
    return out


def _live_cases(scn: pipeline.Scenario, ctx: Context) -> list[LiveCase]:
    """The context's cases (already sent to their Gateway or Service) with their
    live-only fields, read from the same files in the same order. The context holds
    the edge and the mesh cases apart, each in table order; a raw item is a mesh case
    when it names a ``service``."""
    raw: list[Any] = []
    for path in scn.cases:
        data = load_yaml_file(path)
        raw += data if isinstance(data, list) else []
    edge, mesh = iter(ctx.cases), iter(ctx.mesh_cases)
    out = []
    for item in raw:
        fields = item if isinstance(item, dict) else {}
        out.append(LiveCase(next(mesh if "service" in fields else edge), parse_live(fields)))
    return out


def run_live(
    paths: Sequence[str],
    check: pipeline.CheckOptions,
    opts: LiveOptions,
    progress: Progress | None = None,
) -> LiveReport:
    """Prepare every scenario, refuse to succeed on nothing, then run them all."""
    prepared = prepare_all(paths, check)
    where = " ".join(paths)
    mesh = sum(1 for p in prepared for c in p.cases if c.case.mesh)
    edge = sum(len(p.cases) for p in prepared) - mesh
    if opts.cluster_mesh is not None and not mesh:
        message = (
            f"--mesh sends mesh cases (from: and service:), and the cases have none "
            f"({edge} edge cases)"
        )
        raise InputErrors([InputError(where, 0, "--mesh", "nothing-to-run", message)])
    total = (edge if opts.remote is not None or not opts.cluster else 0) + (
        mesh if opts.cluster_mesh is not None or not opts.cluster else 0
    )
    if total == 0 and not opts.witnesses:
        also = f" ({mesh} mesh cases, which a cluster's run sends with --mesh)" if mesh else ""
        message = (
            f"no case to run{also}: give a scenario with a cases.yaml, --cases FILE or --witnesses"
        )
        raise InputErrors([InputError(where, 0, "", "nothing-to-run", message)])
    missing = mesh_unavailable() if mesh and not opts.cluster else None
    if missing is not None:  # never a silent fallback: a mesh case is sent through sidecars
        message = f"{mesh} mesh cases to send: {missing}"
        raise InputErrors([InputError(where, 0, "", "mesh-unavailable", message)])
    started = time.monotonic()
    if opts.cluster_mesh is not None:
        prepared = _placed(paths, check, prepared, opts.cluster_mesh)
    report = LiveReport(
        consistency={
            "successes": opts.successes,
            "budget_seconds": opts.budget,
            "request_timeout_seconds": opts.request_timeout,
        }
    )
    report.scenarios = asyncio.run(_run_all(prepared, check, opts, progress))
    report.seconds = time.monotonic() - started
    return report


def _placed(
    paths: Sequence[str],
    check: pipeline.CheckOptions,
    prepared: list[_Prepared],
    mesh: ClusterMesh,
) -> list[_Prepared]:
    """Each scenario with a ready pod of every client its mesh cases name (waited for:
    ``--mesh-wait``). Where some had none at first, the cluster is read again once they
    have: its EndpointSlices then name the pods that are ready now."""
    for again in (False, True):
        waited = False
        for p in prepared:
            cases = [c for c in p.cases if c.case.mesh]
            if cases:
                plan = mesh_setup(p.ctx, cases)
                p.placed = (plan, place(p.ctx, cases, mesh, plan))
                waited |= p.placed[1].waited
        if not waited or again:
            break
        prepared = prepare_all(paths, check)
    return prepared


async def _run_all(
    prepared: list[_Prepared],
    check: pipeline.CheckOptions,
    opts: LiveOptions,
    progress: Progress | None,
) -> list[ScenarioRun]:
    limit = asyncio.Semaphore(max(1, opts.parallel_scenarios))

    async def one(p: _Prepared) -> ScenarioRun:
        async with limit:
            run = await _run_scenario(p, check, opts)
        if progress is not None:
            progress(run)
        return run

    return list(await asyncio.gather(*(one(p) for p in prepared)))


async def _run_scenario(
    p: _Prepared, check: pipeline.CheckOptions, opts: LiveOptions
) -> ScenarioRun:
    ctx = p.ctx

    async def work(h: EmbeddedHarness) -> list[tuple[CaseResult, list[Finding]]]:
        requests = asyncio.Semaphore(PARALLEL_REQUESTS)
        for lc in p.cases:  # witnesses present the cases' client certificates
            cert = lc.case.request.client_cert
            if cert is not None and cert.cert_file:
                h.client_certs[cert.issuer] = (cert.cert_file, cert.key_file)
        # Mirrors are seen in the backends' logs once they are quiet: those cases go
        # last, on their own, so other cases' traffic does not hold the log open.
        found: list[tuple[CaseResult, list[Finding]]] = []
        plain = [c for c in edge if not looks_for_mirrors(c)]
        mirrored = [c for c in edge if looks_for_mirrors(c)]
        if opts.remote is not None:
            # One Gateway is reached; a case for another would be judged on its answers.
            target = opts.remote.gateway
            elsewhere = [c for c in edge if c.case.parent_key != target]
            found += [(_unsent(p, c, skipped=_not_the_gateway(c, target)), []) for c in elsewhere]
            found += [
                (_unsent(p, c, skipped=MIRRORS_SKIPPED), []) for c in mirrored if c not in elsewhere
            ]
            plain = [c for c in plain if c not in elsewhere]
            mirrored = []
        # A case's budget runs from its first request, so only as many cases are under
        # way at once as requests may be: with all of them started together, each
        # case's later attempts queued behind every other case's first, and a table
        # of 10,000 cases failed every case on its budget, not on its answers.
        under_way = asyncio.Semaphore(PARALLEL_REQUESTS)

        async def judged(c: LiveCase) -> tuple[CaseResult, list[Finding]]:
            async with under_way:
                sent = await _send_case(h, ctx, c, opts, requests)
            # Waiting for Envoy's access-log lines holds no slot: other cases send meanwhile.
            return await _judge_case(h, ctx, p.scenario.name, c, sent)

        for batch in (plain, mirrored):
            found += await asyncio.gather(*(judged(c) for c in batch))
        if opts.witnesses:
            witnesses = [
                w
                for w in ctx.witnesses
                if w.feature != wt.CASE
                and (opts.remote is None or w.gateway == opts.remote.gateway)
            ]
            found += await asyncio.gather(
                *(
                    _judge_witness(h, ctx, p.scenario.name, i, w, opts, requests)
                    for i, w in enumerate(witnesses)
                )
            )
        return found

    edge = [c for c in p.cases if not c.case.mesh]
    meshed = await _mesh(p, opts)
    alone = opts.cluster and opts.remote is None  # --mesh alone: no Gateway to send to
    if alone:
        meshed.found += [(_unsent(p, c, skipped=EDGE_SKIPPED), []) for c in edge]
        edge = []
    if not edge and (alone or not opts.witnesses):  # no edge Envoy is started for nothing
        return _scenario_run(p, meshed.found, False, meshed.notes, meshed.timings, meshed.additions)
    # Envoy runs exactly the checked xDS, in a network namespace of the run's own
    # (or, where none can be made, a rewritten copy on loopback, and the report says so);
    # or, against a cluster, the cluster's Gateway answers and nothing is started here.
    try:
        if opts.remote is not None:
            async with RemoteTarget(
                ctx.res, ctx.snapshot, opts.remote, addressing=check.addressing
            ) as target:
                done = Isolated(await work(target), False, tuple(target.notes))
        else:
            done = await with_isolated_harness(
                ctx.res,
                ctx.snapshot,
                work,
                destinations=[c.case.request.address for c in p.cases if not c.case.mesh]
                + ([w.request.address for w in ctx.witnesses] if opts.witnesses else []),
                trust_domain=check.trust_domain,
                addressing=check.addressing,
            )
    except (HarnessError, EnvoyError, BootstrapError) as exc:
        edge_only = _Prepared(p.scenario, p.ctx, edge)
        failed = _not_run(edge_only, exc)
        found: list[tuple[CaseResult, list[Finding]]] = [(r, []) for r in failed.results]
        found += meshed.found
        found[0] = (found[0][0], list(failed.findings)) if failed.results else found[0]
        return _scenario_run(p, found, False, meshed.notes, meshed.timings, meshed.additions)
    found = [*done.value, *meshed.found]
    notes, additions = (*done.notes, *meshed.notes), (*done.additions, *meshed.additions)
    return _scenario_run(p, found, done.rewritten, notes, meshed.timings, additions)


async def _mesh(p: _Prepared, opts: LiveOptions) -> MeshRun:
    """The scenario's mesh cases: through its own mesh (``mesh_runner``), or from a
    cluster's client pods with --mesh (``mesh_cluster``); skipped, with the reason,
    against a cluster without it."""
    cases = [c for c in p.cases if c.case.mesh]
    if not cases:
        return MeshRun([])
    if opts.cluster_mesh is not None and p.placed is not None:
        plan, placement = p.placed
        name, port = p.scenario.name, opts.cluster_mesh.port
        return await run_cluster_mesh_cases(name, p.ctx, cases, opts, plan, placement, port)
    if opts.cluster:
        return MeshRun([(_unsent(p, c, skipped=MESH_SKIPPED), []) for c in cases])
    return await run_mesh_cases(p.scenario.name, p.ctx, cases, opts)


def _scenario_run(
    p: _Prepared,
    found: list[tuple[CaseResult, list[Finding]]],
    rewritten: bool,
    notes: tuple[str, ...],
    timings: dict[str, float],
    additions: tuple[str, ...],
) -> ScenarioRun:
    """The scenario's results in table order (cases, then witnesses) and findings."""
    order = {c.case.name: i for i, c in enumerate(p.cases)}
    results = [r for r, _ in found]
    results.sort(key=lambda r: (r.kind != CASE, order.get(r.name, 0)))
    return ScenarioRun(
        p.scenario.name,
        tuple(results),
        tuple(f for _, fs in found for f in fs),
        rewritten,
        notes,
        timings=timings,
        mesh=bool(p.cases) and all(c.case.mesh for c in p.cases),
        additions=additions,
        features=_exercised(p, results),
    )


def _exercised(p: _Prepared, results: Sequence[CaseResult]) -> tuple[str, ...]:
    """The features the scenario's cases that were sent exercise (``features.exercised``)."""
    ran = {r.name for r in results if r.kind == CASE and not r.skipped}
    sent = [c.case for c in p.cases if c.case.name in ran]
    return tuple(sorted(features.exercised(p.ctx.res, sent)))


def _not_run(p: _Prepared, exc: Exception) -> ScenarioRun:
    """A scenario whose data plane never served (Envoy NACKed the xDS, or died): one
    finding with Envoy's own words, and every case failed with them, not a traceback."""
    code = "EV806" if isinstance(exc, Rejected) else "EV807"
    message = str(exc).strip()
    first = p.ctx.case_locations.get(p.cases[0].case.name, ("", 0)) if p.cases else ("", 0)
    finding = new(code, RULE, file=first[0], line=first[1], message=message)
    results = tuple(_unsent(p, c, problems=(message,)) for c in p.cases)
    return ScenarioRun(p.scenario.name, results, (finding,), False, ())


def _unsent(
    p: _Prepared, c: LiveCase, *, problems: tuple[str, ...] = (), skipped: str = ""
) -> CaseResult:
    return unsent(p.scenario.name, c, problems=problems, skipped=skipped)


def unsent(
    scenario: str, c: LiveCase, *, problems: tuple[str, ...] = (), skipped: str = ""
) -> CaseResult:
    """A case that was never sent: failed with ``problems`` (no data plane), or
    ``skipped`` with the reason (one this kind of target cannot judge)."""
    return CaseResult(
        scenario,
        c.case.name,
        CASE,
        False,
        0,
        c.case.request.line(),
        _expected(c),
        {},
        None,
        None,
        "",
        problems,
        skipped=skipped,
    )


def _not_the_gateway(c: LiveCase, target: tuple[str, str]) -> str:
    ns, name = c.case.parent_key
    return (
        f"remote target: the case is for Gateway {ns}/{name}; only --gateway "
        f"{target[0]}/{target[1]} is reached"
    )


async def _attempt(
    h: EmbeddedHarness, c: LiveCase, opts: LiveOptions, limit: asyncio.Semaphore
) -> CaseRun:
    """One attempt: every sample of the case, mirrors settled when the case looks for them.
    The case's request is the check context's, already aimed at its Gateway
    (``Context.sent``): Envoy is sent what the models judge."""

    async def one() -> LiveResponse:
        async with limit:
            return await h.send(
                c.case.request,
                protocol=c.live.protocol,
                websocket_messages=c.live.websocket_messages or (),
                timeout=opts.request_timeout,
            )

    responses = await asyncio.gather(*(one() for _ in range(max(1, c.live.samples))))
    if looks_for_mirrors(c):
        await h.settle()
    observed = tuple(h.observe_mirrors(r) for r in responses)
    return CaseRun(c, observed, tuple(h.to_outcome(r) for r in observed))


async def _consistent(
    h: EmbeddedHarness, c: LiveCase, opts: LiveOptions, limit: asyncio.Semaphore
) -> tuple[CaseRun, int, list[str]]:
    """Attempts until ``successes`` in a row (one for a sampled case) or the budget ends."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + opts.budget
    need = 1 if statistical(c) else max(1, opts.successes)
    streak = attempts = 0
    while True:
        run = await _attempt(h, c, opts, limit)
        attempts += 1
        problems = live_unmet(run)
        if not problems:
            streak += 1
            if streak >= need:
                return run, attempts, []
            if loop.time() < deadline:
                continue  # no pause after a success, as upstream
            why = f"{streak} of {need} consecutive successes within {opts.budget:g}s"
            return run, attempts, [why]
        streak = 0
        if loop.time() + RETRY_DELAY >= deadline:
            return run, attempts, problems
        await asyncio.sleep(RETRY_DELAY)


def _models(
    ctx: Context, gateway: tuple[str, str], request: Request
) -> tuple[Evaluation, Evaluation]:
    """Both models' answers to the request as sent, with the echo backend's part in them."""
    spec = ctx.spec(gateway, request, trace=False)
    spec = Evaluation(spec_client_view(ctx.res, request, spec.outcome), spec.trace)
    envoy = ctx.envoy.evaluate(request, echo_reply(request), trace=False)
    return spec, envoy


def _verdict(spec: Outcome, envoy: Outcome, lives: Sequence[Outcome], met: bool) -> Verdict:
    """The verdict of the first distinct live answer that disagrees, else of the first."""
    first: Verdict | None = None
    for live in dict.fromkeys(lives):
        v = three_way(spec, envoy, live, live_meets_case=met)
        if v.odd_one_out is not None:
            return v
        first = first or v
    assert first is not None
    return first


@dataclass(frozen=True)
class _Sent:
    """A case's attempts, done: its last run and what it left unmet."""

    predicted: Judged
    once: bool
    run: CaseRun
    attempts: int
    problems: list[str]
    started: float


async def _send_case(
    h: EmbeddedHarness, ctx: Context, c: LiveCase, opts: LiveOptions, limit: asyncio.Semaphore
) -> _Sent:
    started = time.monotonic()
    predicted = judge(ctx, c.case)
    once = sent_once(predicted, opts)
    if once:
        run = await _attempt(h, c, opts, limit)
        attempts, problems = 1, live_unmet(run)
    else:
        run, attempts, problems = await _consistent(h, c, opts, limit)
    return _Sent(predicted, once, run, attempts, problems, started)


async def _judge_case(
    h: EmbeddedHarness, ctx: Context, scenario: str, c: LiveCase, done: _Sent
) -> tuple[CaseResult, list[Finding]]:
    predicted, once, run, attempts = done.predicted, done.once, done.run, done.attempts
    problems, started = done.problems, done.started
    responses = await h.attribute(run.responses)  # the answers judged: the last attempt's
    sent = run.responses[0].request
    spec, envoy = _models(ctx, c.case.parent_key, sent)
    verdict = _verdict(spec.outcome, envoy.outcome, run.outcomes, met=not problems)
    w = wt.Witness(c.case.parent_key, sent, wt.CASE, note=c.case.name)
    answer = Answer(ctx, w, spec, envoy, run.outcomes[0], verdict)
    findings = three_way_findings(answer)
    routed = _attributed(answer, responses, met=not (problems or once or findings))
    if once:
        findings, problems = _judged_once(ctx, c, predicted, verdict, findings, problems)
    elif problems and not findings:
        findings = [_failed_case(ctx, c, predicted, attempts, problems)]
    findings, problems = findings + routed.findings, problems + routed.problems
    result = CaseResult(
        scenario=scenario,
        name=c.case.name,
        kind=CASE,
        passed=not problems,
        attempts=attempts,
        request=sent.line(),
        expected=_expected(c),
        observed=observed(run),
        spec_agrees=verdict.spec_agrees,
        envoy_model_agrees=verdict.envoy_model_agrees,
        xds_route=attr.xds_route(ctx, routed.attribution),
        problems=tuple(problems),
        odd_one_out=verdict.odd_one_out,
        seconds=time.monotonic() - started,
        attribution=routed.attribution,
    )
    return result, findings


async def _judge_witness(
    h: EmbeddedHarness,
    ctx: Context,
    scenario: str,
    index: int,
    w: wt.Witness,
    opts: LiveOptions,
    limit: asyncio.Semaphore,
) -> tuple[CaseResult, list[Finding]]:
    name = f"witness {index}: {w.note or w.feature}"
    try:
        async with limit:
            resp = await h.send(w.request, timeout=opts.request_timeout)  # aimed by ctx
    except ValueError as exc:  # a client certificate no case brings files for
        skipped = CaseResult(
            scenario,
            name,
            WITNESS,
            False,
            0,
            w.request.line(),
            {},
            {},
            None,
            None,
            "",
            skipped=str(exc),
        )
        return skipped, []
    (resp,) = await h.attribute([resp])
    live = h.to_outcome(resp)
    spec, envoy = _models(ctx, w.gateway, resp.request)
    verdict = three_way(spec.outcome, envoy.outcome, live, live_meets_case=False)
    answer = Answer(ctx, evolve(w, request=resp.request), spec, envoy, live, verdict)
    findings = three_way_findings(answer)
    routed = _attributed(answer, [resp], met=not findings)
    problems = verdict.spec_problems + verdict.envoy_problems + tuple(routed.problems)
    result = CaseResult(
        scenario=scenario,
        name=name,
        kind=WITNESS,
        passed=not problems,
        attempts=1,
        request=resp.request.line(),
        expected=spec.outcome.to_json(),
        observed=live.to_json(),
        spec_agrees=verdict.spec_agrees,
        envoy_model_agrees=verdict.envoy_model_agrees,
        xds_route=attr.xds_route(ctx, routed.attribution),
        problems=problems,
        odd_one_out=verdict.odd_one_out,
        attribution=routed.attribution,
    )
    return result, [*findings, *routed.findings]


def sent_once(predicted: Judged, opts: LiveOptions) -> bool:
    """Whether a case is sent once instead of until it converges. A case both models
    predict to fail because of a configuration mistake cannot converge anywhere. Nor
    can any case both models predict to fail on our own data plane: Envoy has ACKed
    every resource before the first case is sent, so a retry asks the same
    configuration again. A cluster's Gateway (``--kubeconfig``) may still be taking
    its configuration in, so there the others are retried as usual."""
    return predicted.doomed or (predicted.both_miss and opts.remote is None)


def _judged_once(
    ctx: Context,
    c: LiveCase,
    predicted: Judged,
    verdict: Verdict,
    findings: list[Finding],
    problems: list[str],
) -> tuple[list[Finding], list[str]]:
    """The findings and problems of a case sent once because both models predict it
    fails. Met live is not a pass: where real Envoy gave an answer the models allow
    (one sample of a split that lands on the share that works), the case is still
    wrong by them; only an answer outside what they predict says a model (or the
    case) is wrong."""
    outside = verdict.odd_one_out is not None
    predicted_problems = dict.fromkeys(predicted.spec_problems + predicted.envoy_problems)
    if not problems:
        lead = "met live" if outside else "met live on its one attempt by chance"
        live = [f"{lead}, though both models predict it fails: {'; '.join(predicted_problems)}"]
    else:
        live = problems
    if predicted.doomed:
        code = MISTAKE_UNCONFIRMED if outside and not problems else MISTAKE_CONFIRMED
        finding = mistake_finding(ctx, predicted, code, RULE, "; ".join(live))
        why = f"as both models predict, because of: {_why(predicted)}"
        return [*findings, finding], [*live, why]
    if not findings:
        findings = [_failed_case(ctx, c, predicted, 1, live)]
    return findings, [*live, "as both models predict: sent once, not retried"]


def _why(judged: Judged) -> str:
    first = judged.mistakes[0]
    return f"{first.describe()} ({reason(first)})"


def _expected(c: LiveCase) -> dict[str, Any]:
    """The case's expectation as written, live-only fields (ratios, mirrors) included."""
    expect = {k: v for k, v in asdict(c.case.expect).items() if v not in ((), None)}
    live = {
        k: v
        for k, v in asdict(c.live).items()
        if (v not in ((), None) and k not in ("protocol", "samples")) or (k == "samples" and v != 1)
    }
    return {**expect, **live}


@dataclass(frozen=True)
class Answer:
    """One request's live answer and everything it is judged against.

    ``at``: where every finding about it goes, when that is fixed (a mesh case: at
    the case, the HTTPRoute the spec model chose as its resource, no edge xDS path);
    else each finding is placed as ``check`` places the models' disagreements.
    ``ruleless``: a served route without a rule in its metadata was made from no
    HTTPRoute rule (``attribution.by_coincidence``: a sidecar's xDS is ours)."""

    ctx: Context
    w: wt.Witness
    spec: Evaluation
    envoy: Evaluation
    live: Outcome
    verdict: Verdict
    at: Finding | None = None
    ruleless: bool = False

    def where(self, w: wt.Witness) -> Finding:
        """Where a live finding about ``w`` goes: ``at``, else located as check locates
        the models' disagreements (its message is not used); else at the case."""
        if self.at is not None:
            return self.at
        spec, envoy, ctx = self.spec, self.envoy, self.ctx
        comparison = ctx.compare(w) or Comparison(w, spec, envoy, self.verdict.models_differ)
        where = ctx.comparison_finding("EV501", RULE, comparison)
        if not where.file and w.note in ctx.case_locations:
            file, line = ctx.case_locations[w.note]
            where = replace(where, file=file, line=line)
        return where

    def finding(self, code: str, where: Finding, expected: Outcome, **params: Any) -> Finding:
        """A live finding at ``where`` about this request (``params``: its message's own)."""
        w, live = self.w, self.live
        return new(
            code,
            RULE,
            file=where.file,
            line=where.line,
            resource=where.resource,
            xds_path=params.pop("xds_path", where.xds_path),
            request=w.request.to_json(),
            expected=expected.to_json(),
            actual=live.to_json(),
            note=w.note or w.feature,
            live=brief(live),
            **params,
        )


def three_way_findings(a: Answer) -> list[Finding]:
    """One finding for a three-way disagreement, at the HTTPRoute match it is about."""
    odd = a.verdict.odd_one_out
    if odd is None:
        return []
    spec, envoy = brief(a.spec.outcome), brief(a.envoy.outcome)
    return [a.finding(CODES[odd], a.where(a.w), a.spec.outcome, spec=spec, envoy=envoy)]


@dataclass(frozen=True)
class Routed:
    attribution: Attribution
    problems: list[str]
    findings: list[Finding]


def _attributed(a: Answer, responses: Sequence[LiveResponse], *, met: bool) -> Routed:
    """The answers' routes from Envoy's access log (``attribution``), judged (``routed``)."""
    logged = any(r.correlation for r in responses)  # only our namespace's Envoy logs
    return routed(a, attr.judge(responses, a.envoy, logged=logged), met=met)


def routed(a: Answer, found: Attribution, *, met: bool) -> Routed:
    """``found`` judged: a problem and a finding where live and the Envoy model chose
    different routes (``EV810``), or where a right answer (``met``: as the case and all
    three say) came through a route of another HTTPRoute rule than the spec model
    chose, or through none (``EV811``). The mesh's too (``mesh_runner``)."""
    found = attr.by_coincidence(found, a.spec, a.envoy, met=met, ruleless=a.ruleless)
    if found.verdict not in (DISAGREES, COINCIDENCE):
        return Routed(found, [], [])
    # At the HTTPRoute match the spec model chose for it (the models agree on the answer).
    where = a.where(at_chosen_match(a.w, a.spec, a.envoy))
    served = attr.served(found)
    if found.verdict == COINCIDENCE:
        rule = attr.rule_of(a.envoy.outcome.route) if found.route else ""
        code = attr.COINCIDENCE_CODE
        params = {"served": f"{served}, made from {rule}" if rule else served}
        params["spec_rule"] = found.spec_route
    else:
        params = {
            "served": served,
            "cluster": found.cluster or "none",
            "model_route": found.model_route or "no route",
        }
        code = attr.CODE
    xds_path = attr.xds_route(a.ctx, found) if a.at is None else a.at.xds_path
    finding = a.finding(code, where, a.envoy.outcome, xds_path=xds_path, **params)
    return Routed(found, [attr.problem(found)], [finding])


def _failed_case(
    ctx: Context, c: LiveCase, predicted: Judged, attempts: int, problems: list[str]
) -> Finding:
    """A case all three answers agree on and that still fails: its expectation is at odds
    with both models and real Envoy. Related, as check's EV703 has them: where the
    answer comes from (the rule, or the weights of a split the case states otherwise)
    and any backendRef whose Service has no ready endpoint."""
    file, line = ctx.case_locations.get(c.case.name, ("", 0))
    return new(
        FAILED_CASE,
        RULE,
        file=file,
        line=line,
        related=rule_related(ctx, predicted),
        request=c.case.request.to_json(),
        case=c.case.name,
        attempts=attempts,
        problems="; ".join(problems),
    )
