"""The Envoy model's decision equals real Envoy's, request by request.

The checker's findings are only as good as the Envoy model, so the model is
held to the real thing: for every fixture scenario, every case of its
cases.yaml and every generated witness request (the boundary requests the
rules reason about, ~2,100 over all fixtures) are sent through Envoy 1.40 running
the same xDS, and the observed decision (status, backend, the request the
backend saw, redirect, configured response headers) must be one the model
predicts. Weighted splits are checked for membership: a live request lands on
one backend, which must have a positive share in the model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import edge_scenarios

from verifier.gatewayapi.resources import Resources
from verifier.live import verdict
from verifier.live.echo_model import echo_reply
from verifier.live.envoy_process import envoy_available
from verifier.live.harness import EmbeddedHarness
from verifier.live.replay import load_cases, load_scenario
from verifier.semantics import witness as wt
from verifier.semantics.directory import backend_directory_from
from verifier.semantics.envoy.model import EnvoyModel
from verifier.semantics.request import Request
from verifier.xds.snapshot import Snapshot

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not envoy_available(), reason="no envoy binary"),
]

PARALLEL_SCENARIOS = 6
CONTROLLER = "gateway.aether.io/edge"
# Headers Envoy or the client stack add on their own; the model does not predict them.
UNMODELLED_REQUEST_HEADERS = {"content-length", "user-agent", "accept-encoding", "te"}


# What the live pass itself judges a live answer by (one definition for both).
decision_mismatches = verdict.live_mismatches


Reencoding = Callable[[Snapshot, Resources], Snapshot]


async def live_mismatches(scenario: Path, reencode: Reencoding | None = None) -> list[str]:
    """Why the Envoy model and real Envoy differ on the scenario's requests (the
    scenario's xDS, or ``reencode`` of it)."""
    res, snap = load_scenario(scenario)
    if reencode is not None:
        snap = reencode(snap, res)
    model = EnvoyModel(snap, backend_directory_from(res))
    cases = load_cases(scenario, res)
    requests: list[tuple[str, tuple[str, str], Request]] = [
        (f"case {c.case.name}", c.case.gateway.key, c.case.request)
        for c in cases
        if c.live.protocol == "http1" and not c.live.websocket_messages
    ]
    witnesses = wt.witnesses(res, CONTROLLER)
    requests += [(f"witness {w.note or w.feature}", w.gateway, w.request) for w in witnesses]
    failures: list[str] = []
    async with EmbeddedHarness(res, snap) as harness:
        for c in cases:  # witnesses present the cases' client certificates
            cert = c.case.request.client_cert
            if cert is not None and cert.cert_file:
                harness.client_certs[cert.issuer] = (cert.cert_file, cert.key_file)
        limit = asyncio.Semaphore(16)

        async def one(label: str, gateway: tuple[str, str], request: Request) -> None:
            sent = harness.effective_request(harness.for_gateway(gateway, request))
            async with limit:
                resp = await harness.send(sent)
            live = harness.to_outcome(resp)
            predicted = model.evaluate(sent, echo_reply(sent)).outcome
            for problem in decision_mismatches(predicted, live):
                failures.append(f"{label}: {sent.line()}: {problem}")

        await asyncio.gather(*(one(label, g, r) for label, g, r in requests))
    return failures


SCENARIOS = [s for s in edge_scenarios() if (s / "cases.yaml").is_file()]


@pytest.fixture(scope="module")
def results() -> dict[str, list[str]]:
    async def run_all() -> dict[str, list[str]]:
        sem = asyncio.Semaphore(PARALLEL_SCENARIOS)

        async def one(s: Path) -> tuple[str, list[str]]:
            async with sem:
                return s.name, await live_mismatches(s)

        return dict(await asyncio.gather(*(one(s) for s in SCENARIOS)))

    return asyncio.run(run_all())


@pytest.mark.parametrize("scenario", [s.name for s in SCENARIOS])
def test_envoy_model_agrees_with_real_envoy(scenario: str, results: dict[str, list[str]]) -> None:
    failures = results[scenario]
    assert not failures, "\n".join(sorted(failures))
