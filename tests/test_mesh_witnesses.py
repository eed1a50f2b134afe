"""Mesh witnesses (verifier/semantics/witness_mesh.py): every match of every mesh route,
and its neighbours, from every client workload, to the Service's frontend; never
among the edge's witnesses (the edge's Envoy model is not asked about them)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import BASE, mesh_scenarios, scenario_params

from verifier import pipeline
from verifier.check import Context
from verifier.semantics.spec.mesh import MeshModel, service_parent
from verifier.xds.snapshot import Snapshot


@pytest.mark.parametrize("scenario", scenario_params(mesh_scenarios()))
def test_every_mesh_match_is_reached_from_each_client_it_applies_to(scenario: Path) -> None:
    res = pipeline.load_resources([str(BASE), str(scenario)])
    ctx = Context(res, Snapshot())
    mesh = ctx.mesh_witnesses
    assert not [w for w in ctx.witnesses if w.request.source is not None]
    if not any(service_parent(p) for r in res.httproutes.values() for p in r.parent_refs):
        assert mesh == []  # mesh-basic: no mesh route, nothing to probe
        return
    assert mesh and all(w.request.source is not None for w in mesh)
    ips = {svc.meta.key: svc.cluster_ip for svc in res.services.values()}
    assert all(w.request.address == ips[w.gateway] for w in mesh)
    assert len({w.request.source.namespace for w in mesh if w.request.source}) >= 3
    model = MeshModel(res)
    served = set()
    for w in mesh:
        route = model.evaluate(w.request, trace=False).outcome.route
        if route is not None and route.httproute:
            served.add((route.httproute, route.rule or 0, route.match or 0))
    # Every match of a route that applies somewhere is answered for some witness (and a
    # route whose parentRef names no Service frontend, for none).
    assert served == _applying_matches(res), scenario.name


def _applying_matches(res: pipeline.Resources) -> set[tuple[str, int, int]]:
    """(route, rule, match) of the mesh routes whose parentRef names an existing Service
    port: each must be reached by some witness."""
    from verifier.semantics.spec.status import service_parent_refusal

    out = set()
    for (ns, name), route in res.httproutes.items():
        refs = [p for p in route.parent_refs if service_parent(p)]
        if not refs or all(service_parent_refusal(res, p) is not None for p in refs):
            continue
        out |= {
            (f"{ns}/{name}", rule.index, i)
            for rule in route.rules
            for i in range(len(rule.matches))
        }
    return out
