"""mTLS in the mesh, live and offline: a sidecar that breaks it fails both, at the same place.

The scenario of ``test_mesh_live`` (an HTTPRoute on echo-v1, one case from
mesh-apps/client), three meshes at once, with ``--witnesses`` (the backend sidecars'
:15008 probed as ``check``'s mesh-inbound probes them: ``mesh_inbound_live``):

- **served as translated**: the case passes and every probe of every backend
  sidecar's :15008 is admitted or refused as the spec says (a mesh peer in, no
  certificate, another trust domain, cleartext and an unknown SNI out);
- **a client sidecar that dials in cleartext** (its mesh cluster for echo-v1:80 without
  its transport socket, so it sends plain HTTP to the pod's :15008): echo-v1's sidecar
  closes the connection, the case gets 503, and the Envoy model, reading the served
  xDS, predicted that 503: the odd one out is the xDS (EV803), at the HTTPRoute rule;
- **a backend sidecar that admits the wrong identity** (echo-v1's inbound chain for
  port 80 accepting any ``spiffe://`` SAN): every case still passes (each client holds
  a certificate of the trust domain), but a client certificate of another trust domain,
  issued by the run's CA, reaches the application; the Envoy model says so too: EV803
  at the Service port.

``check --xds --proxy`` on the same altered xDS (written as a config_dump) says the
same, at the same places: EV919 at the HTTPRoute, EV924 at the Service port.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from test_check_cli import CLI, cli  # noqa: F401  (the fixture)
from test_mesh_live import CLIENT, scenario  # noqa: F401  (the fixture)

from verifier import pipeline
from verifier.live import mesh_live
from verifier.live.envoy_process import envoy_available
from verifier.live.mesh_runner import MeshRun, run_mesh_cases
from verifier.live.results import CASE, WITNESS
from verifier.live.runner import LiveOptions, prepare_all
from verifier.xds.snapshot import Snapshot, dumps, from_config_dump

BACKEND = ("mesh-apps", "echo-v1")
CLUSTER = "mesh/mesh-apps/echo-v1/80"
INBOUND_CHAIN = "inbound/mesh-apps/echo-v1/80"
ROUTE_RULE_LINE = 13  # the HTTPRoute's rules[0] in test_mesh_live.ROUTE (line 1: apiVersion)


def cleartext(snap: Snapshot) -> Snapshot:
    """The client sidecar's cluster to echo-v1:80 with no transport socket."""
    clusters = tuple(
        dataclasses.replace(c, transport_socket=None) if c.name == CLUSTER else c
        for c in snap.clusters
    )
    assert clusters != snap.clusters, "no cluster " + CLUSTER
    return dataclasses.replace(snap, clusters=clusters)


def any_trust_domain(snap: Snapshot) -> Snapshot:
    """echo-v1's inbound chain for port 80 accepting a client SAN of any trust domain."""
    doc = json.loads(dumps(snap))
    (inbound,) = [
        d["active_state"]["listener"]
        for section in doc["configs"]
        for d in section.get("dynamic_listeners", [])
        if d["active_state"]["listener"]["name"] == "inbound"
    ]
    (chain,) = [c for c in inbound["filter_chains"] if c["name"] == INBOUND_CHAIN]
    tls = chain["transport_socket"]["typed_config"]["common_tls_context"]
    sans = tls["combined_validation_context"]["default_validation_context"]
    sans["match_typed_subject_alt_names"][0]["matcher"] = {"prefix": "spiffe://"}
    broken, skipped = from_config_dump(doc)
    assert skipped == []
    return broken


def offline(cli: CLI, scenario: list[str], snap: Snapshot, proxy: str) -> list[dict[str, Any]]:  # noqa: F811
    """``check --xds DUMP --proxy PROXY``'s errors on ``snap`` written as a config_dump."""
    dump = Path(scenario[-1]) / f"{proxy.replace('/', '.')}.xds.json"
    dump.write_text(dumps(snap), encoding="utf-8")
    r = cli("check", *scenario, "--xds", str(dump), "--proxy", proxy, "--format", "json")
    assert r.rc == 1 and "Traceback" not in r.err, r.err
    return [f for f in r.json()["findings"] if f["severity"] == "error"]


@pytest.mark.live
@pytest.mark.skipif(not envoy_available(), reason="no envoy binary")
@pytest.mark.skipif(mesh_live.mesh_unavailable() is not None, reason="needs root and nft")
def test_a_sidecar_that_breaks_mtls_fails_live_and_offline_at_the_same_place(
    scenario: list[str],  # noqa: F811
    cli: CLI,  # noqa: F811
) -> None:
    (prepared,) = prepare_all(scenario, pipeline.CheckOptions())
    ctx, cases = prepared.ctx, prepared.cases
    served = pipeline.sidecar_snapshots(ctx.res, [CLIENT, BACKEND], ctx.trust_domain, frozenset())
    clear, admits = cleartext(served[CLIENT]), any_trust_domain(served[BACKEND])
    opts = LiveOptions(successes=1, witnesses=True)

    async def all_three() -> tuple[MeshRun, MeshRun, MeshRun]:
        return await asyncio.gather(
            run_mesh_cases("translated", ctx, cases, opts),
            run_mesh_cases("cleartext", ctx, cases, opts, sidecars={CLIENT: clear}),
            run_mesh_cases("any-trust-domain", ctx, cases, opts, sidecars={BACKEND: admits}),
        )

    translated, dialled, admitted = asyncio.run(all_three())

    # As translated: the case and every probe pass; the probes say both ways.
    probes = [r for r, _f in translated.found if r.kind == WITNESS]
    assert [(r.name, f) for r, f in translated.found if not r.passed or f] == []
    assert {r.observed["admitted"] for r in probes} == {True, False}
    assert len(probes) >= 5 * 2  # five probes of each of echo-v1's two ports at least

    # The client dials echo-v1's :15008 in cleartext: refused, as the Envoy model says.
    ((case, findings),) = [(r, f) for r, f in dialled.found if r.kind == CASE]
    assert not case.passed and case.observed["status"] == 503
    assert (case.spec_agrees, case.envoy_model_agrees, case.odd_one_out) == (False, True, "xds")
    ((code, resource, file, line),) = [(f.code, f.resource, f.file, f.line) for f in findings]
    route = ("HTTPRoute mesh-apps/echo-v1-mesh", f"{scenario[-1]}/resources.yaml")
    assert (code, resource, file, line) == ("EV803", *route, ROUTE_RULE_LINE)
    (error,) = offline(cli, scenario, clear, "/".join(CLIENT))
    assert (error["code"], error["resource"], error["location"]) == (
        "EV919",
        route[0],
        f"{route[1]}:{ROUTE_RULE_LINE}",
    )

    # echo-v1's sidecar admits another trust domain: the cases pass, the probe does not.
    failed = [(r, f) for r, f in admitted.found if not r.passed]
    assert all(r.passed for r, _f in admitted.found if r.kind == CASE)
    ((probe, findings),) = failed
    assert probe.kind == WITNESS and probe.name == (
        "mesh-apps/echo-v1:80, inbound of echo-v1: a client certificate of another trust domain"
    )
    assert (probe.expected, probe.observed) == ({"admitted": False}, {"admitted": True})
    assert (probe.spec_agrees, probe.envoy_model_agrees, probe.odd_one_out) == (False, True, "xds")
    svc = ctx.res.services[BACKEND].meta.where("spec.ports[0]")
    ((code, resource, file, line),) = [(f.code, f.resource, f.file, f.line) for f in findings]
    assert (code, resource, file, line) == (
        "EV803",
        "Service mesh-apps/echo-v1",
        svc.file,
        svc.line,
    )
    (error,) = offline(cli, scenario, admits, "/".join(BACKEND))
    assert (error["code"], error["resource"], error["location"]) == (
        "EV924",
        "Service mesh-apps/echo-v1",
        f"{svc.file}:{svc.line}",
    )
    assert "another trust domain" in error["message"]
