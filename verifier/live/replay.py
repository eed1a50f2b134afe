"""Replay a scenario's cases through the embedded data plane and judge the answers.

``verifier.semantics.cases`` parses what every checker shares (a ``Request``
and the expectations an ``Outcome`` can show). Some fields of cases.yaml only
mean something on the wire (docs/cases.md): ``samples`` with
status/backend/mirror ratios, ``mirrored_to``/``not_mirrored_to``,
``websocket``, ``request.protocol: h2c``, and the echo's ``proto``. They are
parsed here, next to the only place that can observe them.

``live_unmet`` applies the cases format's rules (docs/cases.md) that a single live answer needs:
backend, namespace and ``expect.request`` apply only to 2xx answers from an
echo pod, and, as in the conformance suite, a backend must see the method,
path and (when the case sets one) host that were sent unless the case says
otherwise.

One harness per scenario, cases sent concurrently: each answer is
self-contained (mirrors are matched by x-request-id), so order does not matter.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from verifier.gatewayapi.attach import build_graph
from verifier.gatewayapi.mesh_registry import load_mesh_registry
from verifier.gatewayapi.resources import Resources, load_resources
from verifier.inputs import load_yaml_file
from verifier.live.client import LiveResponse
from verifier.live.harness import EmbeddedHarness
from verifier.semantics.cases import Case, Expectation, parse_case, unmet
from verifier.semantics.request import Backend, Outcome, evolve
from verifier.semantics.shares import counted_for
from verifier.semantics.spec.listenersets import merged_gateway
from verifier.xds.snapshot import Snapshot

MESH_REGISTRY = "mesh-registry.yaml"
PARALLEL_REQUESTS = 16


@dataclass(frozen=True)
class LiveExpectation:
    """The cases.yaml fields only a live data plane sends or observes (the rest,
    ratios and mirrors included, are the shared ``Expectation``'s)."""

    protocol: str = "http1"
    samples: int = 1
    proto: str | None = None
    websocket_messages: tuple[str, ...] | None = None


@dataclass(frozen=True)
class LiveCase:
    case: Case
    live: LiveExpectation = field(default_factory=LiveExpectation)


@dataclass(frozen=True)
class CaseRun:
    """Every sample's raw answer and its Outcome, in sending order."""

    case: LiveCase
    responses: tuple[LiveResponse, ...]
    outcomes: tuple[Outcome, ...]


def _d(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def parse_live(item: Mapping[str, Any]) -> LiveExpectation:
    """The live-only fields of one raw cases.yaml item (already checked by ``parse_case``)."""
    req, exp = _d(item.get("request")), _d(item.get("expect"))
    proto, ws = _d(exp.get("request")).get("proto"), exp.get("websocket")
    return LiveExpectation(
        protocol=str(req.get("protocol", "http1")),
        samples=int(item.get("samples", 1)),
        proto=None if proto is None else str(proto),
        websocket_messages=None
        if ws is None
        else tuple(str(m) for m in _d(ws).get("messages", [])),
    )


def _single_port(res: Resources, item: Mapping[str, Any]) -> int | None:
    """README: ``gateway.port`` may be omitted when the Gateway has a single port."""
    gw = _d(item.get("gateway"))
    gateway = res.gateways.get((str(gw.get("namespace")), str(gw.get("name"))))
    ports = {lst.port for lst in merged_gateway(res, gateway).listeners} if gateway else set()
    return ports.pop() if len(ports) == 1 else None


def load_cases(scenario: Path, res: Resources) -> list[LiveCase]:
    """The edge cases of a scenario folder's cases.yaml, shared and live-only fields
    together. Mesh cases (``service:`` and ``from:``) are left out: no sidecar runs
    here yet (``edge-verify live`` reports them skipped, with the reason)."""
    path = scenario / "cases.yaml"
    data = load_yaml_file(str(path)) if path.is_file() else None
    items = [_d(item) for item in data] if isinstance(data, list) else []
    cases = [
        LiveCase(parse_case(item, i, _single_port(res, item), str(scenario)), parse_live(item))
        for i, item in enumerate(items)
    ]
    return [c for c in cases if not c.case.mesh]


def load_scenario(scenario: Path) -> tuple[Resources, Snapshot]:
    """``fixtures/base`` + the scenario (+ its mesh registry), translated."""
    from verifier.translate import TranslateOptions, translate

    res = load_resources([str(scenario.parent / "base"), str(scenario)])
    registry = scenario / MESH_REGISTRY
    mesh = load_mesh_registry(str(registry)) if registry.is_file() else frozenset()
    return res, translate(res, build_graph(res), TranslateOptions(mesh_registry=mesh))


# --- running ----------------------------------------------------------------------------------


async def replay(
    harness: EmbeddedHarness, case: LiveCase, limit: asyncio.Semaphore
) -> list[LiveResponse]:
    async def one() -> LiveResponse:
        async with limit:
            return await harness.send(
                harness.for_gateway(case.case.parent_key, case.case.request),
                protocol=case.live.protocol,
                websocket_messages=case.live.websocket_messages or (),
            )

    return list(await asyncio.gather(*(one() for _ in range(max(1, case.live.samples)))))


async def run_with(
    harness: EmbeddedHarness, cases: Sequence[LiveCase], parallel: int = PARALLEL_REQUESTS
) -> list[CaseRun]:
    """Send every case (all samples) through a started harness; mirrors settled at the end."""
    limit = asyncio.Semaphore(parallel)
    answers = await asyncio.gather(*(replay(harness, c, limit) for c in cases))
    flat = await harness.attribute([r for rs in answers for r in rs])
    regrouped, at = [], 0
    for rs in answers:  # the same answers, each with the xDS route Envoy logged for it
        regrouped.append(flat[at : at + len(rs)])
        at += len(rs)
    answers = regrouped
    if any(looks_for_mirrors(c) for c in cases):
        await harness.settle()
    runs = []
    for case, responses in zip(cases, answers, strict=True):
        observed = tuple(harness.observe_mirrors(r) for r in responses)
        runs.append(CaseRun(case, observed, tuple(harness.to_outcome(r) for r in observed)))
    return runs


async def run_scenario(scenario: Path, parallel: int = PARALLEL_REQUESTS) -> list[CaseRun]:
    """One harness for the scenario, every case of its cases.yaml replayed."""
    res, snap = load_scenario(scenario)
    cases = load_cases(scenario, res)
    async with EmbeddedHarness(res, snap) as harness:
        return await run_with(harness, cases, parallel)


def run_cases(scenario: Path) -> list[tuple[Case, Outcome]]:
    """(case, live outcome of its first sample) for every case: the model cross-check's input.

    The case's request is replaced by the one actually sent (the default Host
    filled in), so a model evaluating ``case.request`` sees what Envoy saw.
    Synchronous: it owns its event loop; from async code use ``run_scenario``.
    """
    runs = asyncio.run(run_scenario(scenario))
    return [
        (replace(run.case.case, request=run.responses[0].request), run.outcomes[0]) for run in runs
    ]


# --- judging ----------------------------------------------------------------------------------


def looks_for_mirrors(c: LiveCase) -> bool:
    expect = c.case.expect
    return bool(expect.mirrored_to or expect.not_mirrored_to or expect.mirrored_ratio)


def statistical(c: LiveCase) -> bool:
    """Judged over its samples as a whole (ratios), not sample by sample only."""
    return c.live.samples > 1 or bool(c.case.expect.shares)


def _from_echo(resp: LiveResponse) -> bool:
    return resp.echo is not None and 200 <= resp.status < 300


def _pod_free(expect: Expectation) -> Expectation:
    """README: backend, namespace and expect.request apply only to 2xx answers from a pod."""
    return replace(
        expect,
        backends=(),
        namespace=None,
        request_host=None,
        request_path=None,
        request_headers=(),
        request_absent=(),
        request_method=None,
    )


def _sample_problems(case: LiveCase, resp: LiveResponse, outcome: Outcome) -> list[str]:
    request, expect, live = case.case.request, case.case.expect, case.live
    if resp.error:
        if resp.status == 0 and expect.statuses == (0,):
            return []  # `status: 0`: no HTTP response is what the spec requires
        return [f"no answer: {resp.error}"]
    problems = unmet(expect if _from_echo(resp) else _pod_free(expect), outcome, request)
    fwd = outcome.request
    if _from_echo(resp) and fwd is not None:
        echo = resp.echo or {}
        wanted = {
            "method": expect.request_method or request.method,
            "path": expect.request_path or request.path,
            "host": expect.request_host or request.host or None,
            "proto": live.proto,
        }
        seen = {"method": fwd.method, "path": fwd.path, "host": fwd.host, "proto": echo["proto"]}
        problems += [
            f"backend saw {key} {seen[key]!r}, expected {value!r}"
            for key, value in wanted.items()
            if value is not None and seen[key] != value
        ]
    ws = live.websocket_messages
    if ws is not None and resp.status == 101 and list(resp.websocket_echoes) != list(ws):
        problems.append(f"websocket echoed {list(resp.websocket_echoes)}, expected {list(ws)}")
    return list(dict.fromkeys(problems))


def _ratio_problems(run: CaseRun) -> list[str]:
    expect, n = run.case.case.expect, len(run.responses)
    problems = []
    for status, want in expect.status_ratio:
        share = sum(r.status == status for r in run.responses) / n
        if not want.holds(share):
            problems.append(
                f"status {status} share {share:.2f}, expected {want.ratio}±{want.tolerance}"
            )
    answered = [o for r, o in zip(run.responses, run.outcomes, strict=True) if _from_echo(r)]
    prefixes = tuple(p for p, _ in expect.backend_ratio)
    for prefix, want in expect.backend_ratio:
        hits = sum(any(counted_for(b, prefixes) == prefix for b in o.backends) for o in answered)
        share = hits / len(answered) if answered else 0.0
        if not want.holds(share):
            problems.append(
                f"backend {prefix} share {share:.2f} of {len(answered)} 2xx, "
                f"expected {want.ratio}±{want.tolerance}"
            )
    for pod, want in expect.mirrored_ratio:
        hits = sum(any(pod.matches(b.namespace, b.name) for b in o.mirrors) for o in run.outcomes)
        if not want.holds(hits / n):
            problems.append(
                f"mirrored to {pod.name} in {hits}/{n} requests, "
                f"expected {want.ratio}±{want.tolerance}"
            )
    return problems


def observed(run: CaseRun) -> dict[str, Any]:
    """What the live pass saw of a case, as an Outcome's JSON: its one answer's; for a
    case of several samples, an answer that forwarded (else the first), with each
    backend's weight the number of 2xx answers it gave, as a model's weights give
    its share, and ``statuses`` counting every status. The 500 and 503 shares stay
    0: which answers were the proxy's own is configuration, not what a wire shows."""
    first = run.outcomes[0]
    if len(run.outcomes) == 1:
        return first.to_json()
    answered: Counter[Backend] = Counter()
    for o in run.outcomes:
        if 200 <= o.status < 300:
            answered.update(evolve(b, weight=1) for b in o.backends)
    base = next((o for o in run.outcomes if o.backends), first)
    counted = tuple(sorted(evolve(b, weight=n) for b, n in answered.items()))
    statuses = Counter(str(o.status) for o in run.outcomes)
    return {**evolve(base, backends=counted).to_json(), "statuses": dict(sorted(statuses.items()))}


def live_unmet(run: CaseRun) -> list[str]:
    """Why the live answers miss the case (every sample, then the ratios); empty when met."""
    counts: Counter[str] = Counter()
    for resp, outcome in zip(run.responses, run.outcomes, strict=True):
        counts.update(dict.fromkeys(_sample_problems(run.case, resp, outcome), 1))
    n = len(run.responses)
    problems = [p if n == 1 else f"{p} (in {k} of {n} samples)" for p, k in counts.items()]
    return problems + _ratio_problems(run)
