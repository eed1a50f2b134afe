"""Replay a scenario's cases through the embedded data plane and judge the answers.

``verifier.semantics.cases`` parses what every checker shares (a ``Request``
and the expectations an ``Outcome`` can show). Some fields of cases.yaml only
mean something on the wire (fixtures/README.md): ``samples`` with
status/backend/mirror ratios, ``mirrored_to``/``not_mirrored_to``,
``websocket``, ``request.protocol: h2c``, and the echo's ``proto``. They are
parsed here, next to the only place that can observe them.

``live_unmet`` applies the README's rules that a single live answer needs:
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
from verifier.semantics.request import Outcome
from verifier.semantics.spec.listenersets import merged_gateway
from verifier.xds.snapshot import Snapshot

MESH_REGISTRY = "mesh-registry.yaml"
PARALLEL_REQUESTS = 16


@dataclass(frozen=True)
class Ratio:
    ratio: float
    tolerance: float

    def holds(self, observed: float) -> bool:
        return abs(observed - self.ratio) <= self.tolerance


@dataclass(frozen=True)
class PodRef:
    """An echo pod by name prefix, as in ``mirrored_to``."""

    namespace: str
    name: str

    def matches(self, namespace: str, service: str) -> bool:
        return namespace == self.namespace and service.startswith(self.name)


@dataclass(frozen=True)
class LiveExpectation:
    """The cases.yaml fields only a live data plane can check."""

    protocol: str = "http1"
    samples: int = 1
    method: str | None = None
    proto: str | None = None
    valid_header_values: tuple[tuple[str, tuple[str, ...]], ...] = ()
    header_lists: tuple[tuple[str, tuple[str, ...]], ...] = ()
    websocket_messages: tuple[str, ...] | None = None
    status_ratio: tuple[tuple[int, Ratio], ...] = ()
    backend_ratio: tuple[tuple[str, Ratio], ...] = ()
    mirrored_to: tuple[PodRef, ...] = ()
    not_mirrored_to: tuple[PodRef, ...] = ()
    mirrored_ratio: tuple[tuple[PodRef, Ratio], ...] = ()


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


def _ratio(value: Any) -> Ratio:
    v = _d(value)
    return Ratio(float(v.get("ratio", 0)), float(v.get("tolerance", 0)))


def _pods(value: Any) -> tuple[PodRef, ...]:
    return tuple(PodRef(str(_d(p)["namespace"]), str(_d(p)["name"])) for p in value or [])


def _lists(value: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple((str(k), tuple(str(x) for x in v)) for k, v in _d(value).items())


def parse_live(item: Mapping[str, Any]) -> LiveExpectation:
    """The live-only fields of one raw cases.yaml item."""
    req, exp = _d(item.get("request")), _d(item.get("expect"))
    ereq, eresp, ws = _d(exp.get("request")), _d(exp.get("response")), exp.get("websocket")
    return LiveExpectation(
        protocol=str(req.get("protocol", "http1")),
        samples=int(item.get("samples", 1)),
        method=None if ereq.get("method") is None else str(ereq["method"]),
        proto=None if ereq.get("proto") is None else str(ereq["proto"]),
        valid_header_values=_lists(eresp.get("valid_header_values")),
        header_lists=_lists(eresp.get("header_lists")),
        websocket_messages=None
        if ws is None
        else tuple(str(m) for m in _d(ws).get("messages", [])),
        status_ratio=tuple((int(k), _ratio(v)) for k, v in _d(exp.get("status_ratio")).items()),
        backend_ratio=tuple((str(k), _ratio(v)) for k, v in _d(exp.get("backend_ratio")).items()),
        mirrored_to=_pods(exp.get("mirrored_to")),
        not_mirrored_to=_pods(exp.get("not_mirrored_to")),
        mirrored_ratio=tuple(
            (PodRef(str(_d(m)["namespace"]), str(_d(m)["name"])), _ratio(m))
            for m in exp.get("mirrored_ratio") or []
        ),
    )


def _single_port(res: Resources, item: Mapping[str, Any]) -> int | None:
    """README: ``gateway.port`` may be omitted when the Gateway has a single port."""
    gw = _d(item.get("gateway"))
    gateway = res.gateways.get((str(gw.get("namespace")), str(gw.get("name"))))
    ports = {lst.port for lst in merged_gateway(res, gateway).listeners} if gateway else set()
    return ports.pop() if len(ports) == 1 else None


def load_cases(scenario: Path, res: Resources) -> list[LiveCase]:
    """cases.yaml of a scenario folder, shared and live-only fields together."""
    path = scenario / "cases.yaml"
    data = load_yaml_file(str(path)) if path.is_file() else None
    items = [_d(item) for item in data] if isinstance(data, list) else []
    return [
        LiveCase(parse_case(item, i, _single_port(res, item), str(scenario)), parse_live(item))
        for i, item in enumerate(items)
    ]


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
                harness.for_gateway(case.case.gateway.key, case.case.request),
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
    if any(c.live.mirrored_to or c.live.not_mirrored_to or c.live.mirrored_ratio for c in cases):
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
            "method": live.method or request.method,
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
    have = {k: ",".join(v) for k, v in outcome.response_headers}
    for name, allowed in live.valid_header_values:
        if have.get(name.lower()) not in allowed:
            problems.append(
                f"response header {name!r} is {have.get(name.lower())!r}, "
                f"expected one of {list(allowed)}"
            )
    for name, items in live.header_lists:
        got = {x.strip() for x in have.get(name.lower(), "").split(",") if x.strip()}
        if got != set(items):
            problems.append(
                f"response header {name!r} lists {sorted(got)}, expected {sorted(items)}"
            )
    ws = live.websocket_messages
    if ws is not None and resp.status == 101 and list(resp.websocket_echoes) != list(ws):
        problems.append(f"websocket echoed {list(resp.websocket_echoes)}, expected {list(ws)}")
    mirrored = [(b.namespace, b.name) for b in outcome.mirrors]
    for pod in live.mirrored_to:
        if not any(pod.matches(*m) for m in mirrored):
            problems.append(f"not mirrored to {pod.namespace}/{pod.name} (mirrors: {mirrored})")
    for pod in live.not_mirrored_to:
        if any(pod.matches(*m) for m in mirrored):
            problems.append(f"mirrored to {pod.namespace}/{pod.name}, expected not")
    return problems


def _ratio_problems(run: CaseRun) -> list[str]:
    live, n = run.case.live, len(run.responses)
    problems = []
    for status, want in live.status_ratio:
        share = sum(r.status == status for r in run.responses) / n
        if not want.holds(share):
            problems.append(
                f"status {status} share {share:.2f}, expected {want.ratio}±{want.tolerance}"
            )
    answered = [o for r, o in zip(run.responses, run.outcomes, strict=True) if _from_echo(r)]
    for prefix, want in live.backend_ratio:
        hits = sum(any(b.name.startswith(prefix) for b in o.backends) for o in answered)
        share = hits / len(answered) if answered else 0.0
        if not want.holds(share):
            problems.append(
                f"backend {prefix} share {share:.2f} of {len(answered)} 2xx, "
                f"expected {want.ratio}±{want.tolerance}"
            )
    for pod, want in live.mirrored_ratio:
        hits = sum(any(pod.matches(b.namespace, b.name) for b in o.mirrors) for o in run.outcomes)
        if not want.holds(hits / n):
            problems.append(
                f"mirrored to {pod.name} in {hits}/{n} requests, "
                f"expected {want.ratio}±{want.tolerance}"
            )
    return problems


def live_unmet(run: CaseRun) -> list[str]:
    """Why the live answers miss the case (every sample, then the ratios); empty when met."""
    counts: Counter[str] = Counter()
    for resp, outcome in zip(run.responses, run.outcomes, strict=True):
        counts.update(dict.fromkeys(_sample_problems(run.case, resp, outcome), 1))
    n = len(run.responses)
    problems = [p if n == 1 else f"{p} (in {k} of {n} samples)" for p, k in counts.items()]
    return problems + _ratio_problems(run)
