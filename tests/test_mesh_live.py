"""Mesh cases, live: a pass must come through the route the spec chose, not by chance.

In a cluster, a request the sidecar does not route still reaches a pod: the sidecar
passes it through to the ClusterIP and kube-proxy sends it to a ready endpoint. Where
the Service has one version, that pod is the expected one, and the answer is right
for the wrong reason. ``edge-verify live`` attributes each mesh answer to the sidecar
route that served it (the sidecar's access log, by our request id), and a case met
through no route, or another one, than the HTTPRoute rule the spec model chose is
**passed by coincidence** (EV811, as on the edge: docs/live.md): a failure.

One scenario (an HTTPRoute on the Service echo-v1, one version) and one case, run
three times at once, each in a mesh of its own: with the client's sidecar served its
``translate --proxy`` xDS (the case passes, attributed to the route); with that xDS
lacking the Service's filter chain and routes (the request passes through, the right
pod answers, the case fails as passed by coincidence, and the Envoy model, reading
the same served xDS, agrees that no route served it); and with an xDS the sidecar
refuses (the case fails, EV806: no mesh could answer it).

Without root or nft a mesh run says why and exits 2 (no silent fallback), checked
before anything starts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BASE, FIXTURES, rel, translate_proxy

from verifier import pipeline
from verifier.errors import InputErrors
from verifier.live import attribution as attr
from verifier.live import mesh_live, netns
from verifier.live.client import AccessEntry, LiveResponse
from verifier.live.envoy_process import EnvoyError, envoy_available
from verifier.live.mesh_live import MeshTarget
from verifier.live.mesh_pods import mesh_pods
from verifier.live.mesh_probe import Identities, MeshWorld
from verifier.live.mesh_runner import KUBE_PROXY, MeshRun, _at, _attribution, run_mesh_cases
from verifier.live.results import (
    AGREES,
    ATTRIBUTED,
    COINCIDENCE,
    DISAGREES,
    NO_ROUTE,
    UNATTRIBUTED,
)
from verifier.live.runner import Answer, LiveOptions, prepare_all, routed, run_live
from verifier.live.verdict import three_way
from verifier.semantics import witness as wt
from verifier.semantics.request import Evaluation, Outcome, RouteRef
from verifier.xds.snapshot import Snapshot

CLIENT = ("mesh-apps", "client")
SERVICE_CHAIN = "mesh-apps/echo-v1/80"  # docs/mesh.md: a chain per ClusterIP and port
ROUTE = """\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: echo-v1-mesh
  namespace: mesh-apps
spec:
  parentRefs:
  - group: ""
    kind: Service
    name: echo-v1
    port: 80
  rules:
  - backendRefs:
    - name: echo-v1
      port: 80
"""
CASES = """\
- name: client-reaches-echo-v1-through-its-route
  from: {namespace: mesh-apps, workload: client}
  service: {namespace: mesh-apps, name: echo-v1, port: 80}
  request: {path: /}
  expect: {status: 200, backend: echo-v1, namespace: mesh-apps}
"""


@pytest.fixture
def scenario(tmp_path: Path) -> list[str]:
    folder = tmp_path / "mesh-route-to-one-version"
    folder.mkdir()
    (folder / "resources.yaml").write_text(ROUTE, encoding="utf-8")
    (folder / "cases.yaml").write_text(CASES, encoding="utf-8")
    return [rel(BASE), str(folder)]


def refused(snap: Snapshot) -> Snapshot:
    """The sidecar's xDS with the Service's filter chain twice (another name, the same
    match): Envoy refuses the outbound listener."""
    listeners = []
    for li in snap.listeners:
        chains = [c for c in li.filter_chains if c.name == SERVICE_CHAIN]
        again = [dataclasses.replace(c, name=f"{c.name}-again") for c in chains]
        listeners.append(dataclasses.replace(li, filter_chains=[*li.filter_chains, *again]))
    return dataclasses.replace(snap, listeners=tuple(listeners))


def without_the_route(snap: Snapshot) -> Snapshot:
    """The sidecar's xDS with no filter chain (and no route table) for echo-v1:80: the
    connection falls to the default chain, which passes it through."""
    listeners = tuple(
        dataclasses.replace(
            li, filter_chains=[c for c in li.filter_chains if c.name != SERVICE_CHAIN]
        )
        for li in snap.listeners
    )
    assert listeners != snap.listeners, "no chain named " + SERVICE_CHAIN
    routes = tuple(rc for rc in snap.routes if rc.name != f"outbound/{SERVICE_CHAIN}")
    return dataclasses.replace(snap, listeners=listeners, routes=routes)


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
@pytest.mark.skipif(mesh_live.mesh_unavailable() is not None, reason="needs root and nft")
def test_a_pass_kube_proxy_gave_is_passed_by_coincidence(scenario: list[str]) -> None:
    (prepared,) = prepare_all(scenario, pipeline.CheckOptions())
    ctx, cases = prepared.ctx, prepared.cases
    (served,) = pipeline.sidecar_snapshots(
        ctx.res, [CLIENT], ctx.trust_domain, frozenset()
    ).values()
    opts = LiveOptions(successes=1)

    async def all_three() -> tuple[MeshRun, MeshRun, MeshRun]:
        routed = run_mesh_cases("routed", ctx, cases, opts)
        dropped = run_mesh_cases(
            "dropped", ctx, cases, opts, sidecars={CLIENT: without_the_route(served)}
        )
        nacked = run_mesh_cases("nacked", ctx, cases, opts, sidecars={CLIENT: refused(served)})
        return await asyncio.gather(routed, dropped, nacked)

    routed, dropped, nacked = asyncio.run(all_three())
    ((ok, ok_findings),) = routed.found
    assert ok.passed and ok_findings == [], (ok.problems, ok_findings)
    route = "mesh-apps/echo-v1-mesh/rule/0/match/0"
    assert ok.xds_route == route
    assert ok.attribution is not None
    assert (ok.attribution.state, ok.attribution.route) == (ATTRIBUTED, route)
    assert (ok.attribution.model_route, ok.attribution.verdict) == (route, AGREES)
    assert ok.attribution.spec_route == "mesh-apps/echo-v1-mesh rule 0"

    ((chance, findings),) = dropped.found
    assert chance.observed["status"] == 200  # the expected pod answered ...
    assert [b["name"] for b in chance.observed["backends"]] == ["echo-v1"]
    assert not chance.passed  # ... but by kube-proxy, not by the route: a failure
    a = chance.attribution
    assert a is not None and (a.state, a.route, a.why) == (NO_ROUTE, "", KUBE_PROXY)
    assert a.verdict == COINCIDENCE and chance.failure_kind == "attribution-coincidence"
    assert [f.code for f in findings] == [attr.COINCIDENCE_CODE]
    assert findings[0].resource == "HTTPRoute mesh-apps/echo-v1-mesh"
    # At the HTTPRoute rule the spec model chose (as check places it), not at the case.
    assert findings[0].file.endswith("resources.yaml") and findings[0].line == 13
    assert chance.spec_agrees and chance.envoy_model_agrees  # the models read the served xDS

    # A sidecar that refuses its xDS: no case can run; the scenario says so (EV806).
    ((never, why),) = nacked.found
    assert not never.passed and not never.skipped
    assert [f.code for f in why] == ["EV806"]


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
@pytest.mark.skipif(mesh_live.mesh_unavailable() is not None, reason="needs root and nft")
def test_a_case_failing_for_a_configuration_mistake_is_ev808_at_the_mistake(
    tmp_path: Path,
) -> None:
    """A mesh route's backendRef to a Service that does not exist: the case fails live
    as both models predict, reported as the edge's is (EV808 at the backendRef, the case
    related), not as a case that fails (EV801 at the case)."""
    folder = tmp_path / "mesh-route-backend-not-found"
    folder.mkdir()
    typo = ROUTE.replace("    - name: echo-v1\n", "    - name: echo-vl\n")
    (folder / "resources.yaml").write_text(typo, encoding="utf-8")
    (folder / "cases.yaml").write_text(CASES, encoding="utf-8")
    (prepared,) = prepare_all([rel(BASE), str(folder)], pipeline.CheckOptions())
    run = asyncio.run(run_mesh_cases("typo", prepared.ctx, prepared.cases, LiveOptions()))
    ((failed, findings),) = run.found
    assert not failed.passed and failed.attempts == 1  # sent once: it cannot converge
    assert [f.code for f in findings] == ["EV808"], findings
    (mistake,) = findings
    assert mistake.file.endswith("resources.yaml") and mistake.line == 14  # the backendRef
    assert mistake.resource == "HTTPRoute mesh-apps/echo-v1-mesh"
    (case,) = mistake.related
    assert case.file.endswith("cases.yaml") and case.line == 1


def test_a_mesh_run_without_root_or_nft_says_why_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, scenario: list[str]
) -> None:
    """Checked before any scenario starts: nothing is sent, nothing falls back."""
    monkeypatch.setattr(mesh_live.os, "geteuid", lambda: 1000)
    with pytest.raises(InputErrors) as raised:
        run_live(scenario, pipeline.CheckOptions(), LiveOptions())
    (error,) = raised.value.errors
    assert error.code == "mesh-unavailable"
    monkeypatch.setattr(mesh_live.os, "geteuid", lambda: 0)
    monkeypatch.setattr(mesh_live.shutil, "which", lambda name: None)
    with pytest.raises(InputErrors) as raised:
        run_live(scenario, pipeline.CheckOptions(), LiveOptions())
    (other,) = raised.value.errors
    assert other.code == "mesh-unavailable" and other.message != error.message


def test_attribution_disagrees_when_the_sidecar_names_another_route(scenario: list[str]) -> None:
    """The sidecar's log names a route the Envoy model did not choose: EV810, an error
    that fails the case, at the case (the edge's verdict and code); the same route:
    nothing. No line where the Envoy model has no HTTP connection manager take the
    request is kube-proxy's delivery (no route); where it has one, it is unattributed."""
    (prepared,) = prepare_all(scenario, pipeline.CheckOptions())
    (case,) = prepared.cases
    ctx, request = prepared.ctx, case.case.request
    chosen = "mesh-apps/echo-v1-mesh/rule/0/match/0"
    ref = RouteRef(chosen, httproute="mesh-apps/echo-v1-mesh", rule=0, match=0)
    model = Evaluation(Outcome(200, route=ref), ())

    def answer(route: str | None) -> LiveResponse:
        logged = None if route is None else AccessEntry(route, "outbound|80||echo-v1", 200, "-")
        return LiveResponse(request, 200, correlation="id-1", access=logged)

    same = _attribution([answer(chosen)], model, logged=True)
    assert (same.state, same.route, same.verdict) == (ATTRIBUTED, chosen, AGREES)
    other = _attribution(
        [answer(chosen), answer("mesh-apps/echo-v1/80/default")], model, logged=True
    )
    assert (other.state, other.verdict) == (ATTRIBUTED, DISAGREES)
    assert _attribution([answer(None)], model, logged=True).state == UNATTRIBUTED
    none = _attribution([answer(None)], model, logged=False)
    assert (none.state, none.why, none.verdict) == (NO_ROUTE, KUBE_PROXY, DISAGREES)

    verdict = three_way(model.outcome, model.outcome, model.outcome, live_meets_case=True)
    w = wt.Witness(case.case.parent_key, request, wt.CASE, note=case.case.name)
    at = _at(ctx, case, w, model, model)
    a = Answer(ctx, w, model, model, model.outcome, verdict, at=at)
    assert routed(a, same, met=True).findings == []
    judged = routed(a, other, met=True)
    (finding,) = judged.findings
    assert finding.code == attr.CODE and (finding.file, finding.line) == (at.file, at.line)
    assert finding.resource == "HTTPRoute mesh-apps/echo-v1-mesh"
    assert judged.problems and judged.attribution.verdict == DISAGREES


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
@pytest.mark.skipif(mesh_live.mesh_unavailable() is not None, reason="needs root and nft")
def test_a_sidecar_that_dies_mid_run_ends_the_run_naming_it(tmp_path: Path) -> None:
    """A sidecar killed while cases run (a crash, a stray signal) leaves a mesh the xDS
    does not describe: the next answer ends the run with the sidecar's name, where it
    once retried for a minute and blamed both models (EV802) for a dead process."""
    (prepared,) = prepare_all([rel(BASE), "fixtures/mesh-basic"], pipeline.CheckOptions())
    request = next(c.case.request for c in prepared.cases if c.case.mesh)
    assert request.source is not None
    client = (request.source.namespace, request.source.workload)
    res = prepared.ctx.res
    pods = [p for p in mesh_pods(res) if p.sidecar]
    sidecars = {p.client: translate_proxy(FIXTURES / "mesh-basic", *p.client) for p in pods}

    async def main() -> tuple[int, str]:
        identities = await Identities.issue(tmp_path, {p.identity() for p in pods})

        async def run() -> tuple[int, str]:
            world = MeshWorld(res, sidecars, identities, controls=frozenset({client}))
            async with world:
                target = MeshTarget(world)
                try:
                    before = await target.send(request)
                    envoy = world.running[world.pod_of(client).name].envoy
                    assert envoy.pid is not None
                    os.kill(envoy.pid, signal.SIGKILL)
                    try:
                        await target.send(request)
                    except EnvoyError as exc:
                        return before.status, str(exc).splitlines()[0]
                    return before.status, "no error"
                finally:
                    target.close()

        return (await netns.run_in_namespace(run, [])).value

    status, error = asyncio.run(main())
    assert status == 200
    assert re.fullmatch(
        r"the sidecar of pod client-\S+ ended during the live run \(exit status -9\); .*", error
    ), error


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="root, setpriv")
def test_root_without_the_namespace_capabilities_exits_2_before_anything_starts(
    scenario: list[str],
) -> None:
    """Root in an unprivileged container (no CAP_SYS_ADMIN, CAP_NET_ADMIN) passed the
    euid check, then failed every case as EV807 and exited 1, saying Envoy ran: a
    trial's. The capabilities are asked first: exit 2, naming them."""
    done = subprocess.run(
        [
            *("setpriv", "--bounding-set=-sys_admin,-net_admin"),
            *(sys.executable, "-m", "verifier.cli", "live", *scenario),
        ],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "needs CAP_SYS_ADMIN and CAP_NET_ADMIN" in done.stderr
    assert "[mesh-unavailable]" in done.stderr and "passed" not in done.stdout
