"""Whether a real sidecar Envoy did what the Envoy model predicts, for one request.

Shared by the model-vs-real-Envoy test on the sidecar fixtures
(``tests/test_sidecar_model_vs_live.py``) and ``fuzz``'s ``envoy-agrees`` on mesh
worlds (``verifier.fuzz.mesh_plane``): one judgement, so that a drawn world's
counterexample means what the fixtures' test means. The prediction is the Envoy
model's on the client's sidecar xDS as captured (``Redirect(15001)``); the sidecar's
own word (its access log: filter chain, route, cluster) is compared as well as what
a wire shows (``live_mismatches``) and which pod answered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from verifier.gatewayapi.resources import Resources
from verifier.live.client import LiveResponse
from verifier.live.echo_model import echo_reply
from verifier.live.harness import answer_outcome
from verifier.live.mesh_pods import MeshPod, service_endpoints
from verifier.live.mesh_probe import LogLine
from verifier.live.podnet import CAPTURE_PORT
from verifier.live.verdict import live_mismatches
from verifier.semantics.envoy.model import EnvoyModel, Redirect
from verifier.semantics.request import Evaluation, Request
from verifier.xds import read
from verifier.xds.snapshot import Snapshot

CAPTURED = Redirect(CAPTURE_PORT)
NOT_CAPTURED = "not captured by the sidecar (kube-proxy's path)"
NO_SIDECAR = "sent from a workload without a sidecar"

_XDS_PATH = re.compile(r"routes\[(.*)\]\.virtual_hosts\[(.*)\]\.routes\[(\d+)\]")


def route_clusters(snap: Snapshot, xds_path: str | None) -> set[str]:
    """The clusters the route at ``xds_path`` may send to, as the access log names them:
    empty for none (it answers itself) and for a cluster the xDS does not have (Envoy
    answers 500 and names no cluster: an invalid backendRef's share)."""
    known = {c.name for c in snap.clusters}
    return {name if name in known else "" for name in _named_clusters(snap, xds_path)}


def _named_clusters(snap: Snapshot, xds_path: str | None) -> set[str]:
    found = _XDS_PATH.fullmatch(xds_path or "")
    if found is None:
        return {""}
    rc_name, vh_name, index = found.group(1), found.group(2), int(found.group(3))
    for rc in snap.routes:
        for vh in rc.virtual_hosts if rc.name == rc_name else ():
            if vh.name != vh_name or index >= len(vh.routes):
                continue
            action = vh.routes[index].route
            if read.one_of(vh.routes[index], "action")[0] != "route" or action is None:
                return {""}
            if action.weighted_clusters is not None:
                return {c.name for c in action.weighted_clusters.clusters if c.weight}
            return {action.cluster or ""}
    return {""}


@dataclass(frozen=True)
class Prediction:
    evaluation: Evaluation
    chain: str | None  # None: no filter chain takes the connection (nothing is logged)
    clusters: set[str]


def predict(model: EnvoyModel, snap: Snapshot, request: Request) -> Prediction:
    """The Envoy model's answer to ``request`` captured by the sidecar serving ``snap``,
    and the filter chain and clusters its access log must then name."""
    found = model.evaluate(request, echo_reply(request), redirect=CAPTURED)
    selected = model.connection_of(request, CAPTURED)
    if selected is None:
        return Prediction(found, None, set())
    chain = selected.chain
    if chain.tcp is not None:
        return Prediction(found, chain.name, {name for name, _w in chain.tcp.clusters})
    route = found.outcome.route
    return Prediction(
        found, chain.name, route_clusters(snap, route.xds_path if route is not None else None)
    )


def compare(
    res: Resources,
    pods: list[MeshPod],
    guess: Prediction,
    answer: LiveResponse,
    line: LogLine | None,
) -> list[str]:
    """Why real Envoy's handling of one request is not the predicted one."""
    outcome = guess.evaluation.outcome
    live = answer_outcome(answer)
    problems = live_mismatches(outcome, live)
    if answer.error and live.status == 0 and outcome.status != 0:
        problems.append(f"no answer: {answer.error}")
    if (line is None) != (guess.chain is None):
        problems.append(f"access log {line}, model's filter chain {guess.chain}")
    elif line is not None:
        route = outcome.route.xds_name if outcome.route is not None else None
        if line.chain != guess.chain:
            problems.append(f"filter chain {line.chain!r}, model {guess.chain!r}")
        if line.route != (route or ""):
            problems.append(f"route {line.route!r}, model {route!r}")
        if line.cluster not in guess.clusters:
            problems.append(f"cluster {line.cluster!r}, model {sorted(guess.clusters)}")
    echo = answer.echo
    if echo is not None and live.status == 200 and outcome.backends:
        endpoints = service_endpoints(res)
        allowed = {
            ip
            for b in outcome.backends
            if b.weight > 0
            for ns, name, _port in ((b.namespace, b.name, b.port), *b.aliases)
            for ip in endpoints.get((ns, name), set())
        }
        who = (echo["namespace"], echo["pod"])
        pod = next((p for p in pods if (p.namespace, p.name) == who), None)
        if pod is None or pod.ip not in allowed:
            got = f"{echo['namespace']}/{echo['pod']}"
            problems.append(f"answered by pod {got}, not an endpoint of {outcome.backends}")
    return problems
