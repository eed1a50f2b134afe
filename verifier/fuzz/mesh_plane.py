"""``envoy-agrees`` on a world's mesh requests: real sidecars, the Envoy model's word.

The edge's requests go to the campaign's one Envoy (``verifier.fuzz.plane``). A
sidecar cannot be asked there: what it decides depends on the pod it runs in (its
capture, its SPIFFE identity, the backends' sidecars terminating mTLS). So for a
world with mesh routes, its pods and sidecars are stood up with the live mesh's
harness (``verifier.live.mesh_probe.MeshWorld``, in a network namespace of its
own, forked from the plane's process), once per world: only the pods of the
clients that send and the pods that answer (backends), each sidecar fed its
workload's translation. Each mesh request ``models-agree`` asks is sent from its
client's pod, and real Envoy's handling is compared with the Envoy model's on that
client's sidecar xDS by ``verifier.live.sidecar_verdict`` (the comparison the
sidecar fixtures' model-vs-real-Envoy test makes).

Not sent, and counted per reason in the report (``PropertyRun.not_sent``): a
request from a workload without a sidecar (kube-proxy decides it, not an Envoy),
one its sidecar does not capture, and one whose predicted answer rests on an
assumption (``Outcome.caveats``).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

from verifier.live.client import LiveResponse
from verifier.live.harness import answer_outcome
from verifier.live.mesh_pods import captured, mesh_pods
from verifier.live.mesh_probe import Identities, MeshWorld, SidecarRefused
from verifier.live.sidecar_verdict import NO_SIDECAR, NOT_CAPTURED, Prediction, compare, predict
from verifier.semantics import witness as wt
from verifier.semantics.request import Source

from .properties import Mismatch
from .trial import Trial

IN_FLIGHT = 16  # requests at once into one world's sidecars
RECHECK_AFTER_S = 0.05


@dataclass
class MeshAsked:
    """What one world's mesh requests showed."""

    found: list[Mismatch] = field(default_factory=list)
    sent: int = 0
    refused: str | None = None  # a sidecar's Envoy NACKed xDS the model takes: why
    not_sent: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class _Judged:
    witness: wt.Witness
    client: tuple[str, str]
    guess: Prediction


def plan(trial: Trial) -> tuple[list[_Judged], Counter[str]]:
    """The mesh requests to send, each with its prediction; and the others, by reason."""
    res, plane = trial.res, trial.ctx.mesh_plane
    by_client = {p.client: p for p in reversed(mesh_pods(res))}  # sent from the first pod
    out: list[_Judged] = []
    skipped: Counter[str] = Counter()
    for w in trial.mesh_requests:
        source = w.request.source
        client = (source.namespace, source.workload) if source is not None else ("", "")
        pod = by_client.get(client)
        model = plane.model(Source(*client)) if pod is not None and pod.sidecar else None
        if pod is None or model is None:
            skipped[NO_SIDECAR] += 1
            continue
        if not captured(res, plane.registry, pod, w.request.address):
            skipped[NOT_CAPTURED] += 1
            continue
        guess = predict(model, trial.sidecars[Source(*client)], w.request)
        outcome = guess.evaluation.outcome
        if outcome.unjudged:
            for caveat in {c.subject for c in outcome.all_caveats() if c.decides}:
                skipped[f"assumes {caveat}"] += 1
            continue
        out.append(_Judged(w, client, guess))
    return out, skipped


async def ask_mesh(trial: Trial, identities: Identities) -> MeshAsked:
    """Every mesh request of ``trial`` from its client's pod through its real sidecar.
    Runs in a network namespace of its own (the world's node)."""
    judged, skipped = plan(trial)
    asked = MeshAsked(not_sent=skipped)
    if not judged:
        return asked
    sidecars = {(s.namespace, s.workload): snap for s, snap in trial.sidecars.items()}
    senders = frozenset(j.client for j in judged)
    registry = trial.ctx.mesh_plane.registry
    world = MeshWorld(trial.res, sidecars, identities, registry, senders=senders)
    try:
        async with world:
            asked.found = await _sent(trial, world, judged)
    except SidecarRefused as exc:  # a verdict on the xDS, not the harness failing
        asked.refused = str(exc)
        return asked
    asked.sent = len(judged)
    return asked


async def _sent(trial: Trial, world: MeshWorld, judged: list[_Judged]) -> list[Mismatch]:
    """Every request sent from its client's pod; the mismatches met twice."""
    limit = asyncio.Semaphore(IN_FLIGHT)

    async def sent(j: _Judged) -> tuple[str, LiveResponse]:
        async with limit:
            return await world.send(j.client, j.witness.request)

    answers = await asyncio.gather(*(sent(j) for j in judged))
    pairs = list(zip(judged, answers, strict=True))
    logs = {
        c: await world.logged(c, [s for j, (s, _a) in pairs if j.client == c and j.guess.chain])
        for c in {j.client for j in judged}
    }
    first = [
        (j, compare(trial.res, world.pods, j.guess, answer, logs[j.client].get(source)))
        for j, (source, answer) in pairs
    ]

    async def again(j: _Judged) -> Mismatch | None:
        """A mismatch counts when the request meets it twice (a loaded machine can time
        a request out; a model's mistake answers the same way again)."""
        await asyncio.sleep(RECHECK_AFTER_S)
        source, answer = await sent(j)
        wanted = [source] if j.guess.chain else []
        line = (await world.logged(j.client, wanted)).get(source)
        problems = compare(trial.res, world.pods, j.guess, answer, line)
        if not problems:
            return None
        outcome = j.guess.evaluation.outcome
        return Mismatch(j.witness, answer_outcome(answer), outcome, tuple(problems))

    done = await asyncio.gather(*(again(j) for j, problems in first if problems))
    return [m for m in done if m is not None]


def identities_wanted(trial: Trial) -> set[str]:
    """The SPIFFE IDs of the world's pods with a sidecar."""
    return {p.identity() for p in mesh_pods(trial.res) if p.sidecar}
