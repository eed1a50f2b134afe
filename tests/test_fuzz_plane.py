"""The live properties: one real Envoy, fed over ADS, answering drawn worlds in turn.

``envoy-agrees`` holds on the reference translator, and finds an Envoy model
that mispredicts real Envoy (a mutant of the model, made here: the property's
power is shown on a real disagreement, not assumed), at the edge and, on a
mesh world, through a client's real sidecar. ``envoy-accepts --envoy``
finds xDS that ``--mode validate`` takes and Envoy NACKs over ADS. Without a
network namespace the live properties are refused, never skipped in silence.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import broken_translators as bt
import pytest
from test_fuzz_command import _fuzz
from test_sidecar_model_vs_live import _twice_the_first_chain

from verifier.fuzz.campaign import fixture_name, run_campaign
from verifier.fuzz.fixtures import write_found
from verifier.fuzz.mesh_worlds import is_mesh_route
from verifier.fuzz.plane import everything_world, in_plane
from verifier.fuzz.properties import Env
from verifier.fuzz.trial import Translator, load_world
from verifier.live import netns
from verifier.live.envoy_process import envoy_available
from verifier.live.sidecar_verdict import NO_SIDECAR, NOT_CAPTURED
from verifier.semantics.envoy import listeners
from verifier.semantics.envoy.downstream import Downstream
from verifier.semantics.envoy.match import CompiledMatch
from verifier.xds.snapshot import envoy_validate, from_config_dump

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not envoy_available(), reason="no envoy binary"),
    pytest.mark.skipif(os.geteuid() != 0, reason=netns.NEEDS),
]
EXAMPLES = 25  # edge worlds (--no-mesh: the edge's Envoy only)
MESH_EXAMPLES = 8  # about a third have mesh routes, each ~1.3 s of pods and sidecars
MESH_SHRINK_STEPS = 10  # a mesh world stands up its pods and sidecars: ~0.5 s each


def _agrees(env: Env | None = None, **options: Any) -> Any:
    return run_campaign(
        env or Env(Translator(), mesh=False),
        ["envoy-agrees"],
        budget=300,
        seed_value=0,
        database_dir=None,
        shrink_seconds=30,
        plane=in_plane,
        **options,
    )


def test_real_envoy_does_what_the_envoy_model_says_on_drawn_worlds() -> None:
    campaign = _agrees(max_examples=EXAMPLES)
    run = campaign.properties[0]
    assert campaign.failures == [], campaign.failures[0].failure.summary
    assert run.examples >= EXAMPLES
    assert run.requests >= 20 * EXAMPLES
    assert campaign.coverage["match.path.PathPrefix"] > 0  # what the mutant below breaks


def test_real_sidecars_do_what_the_envoy_model_says_on_drawn_mesh_worlds() -> None:
    """Each mesh world's pods and sidecars stood up, its mesh requests sent from their
    clients' pods: the Envoy model on each client's sidecar xDS predicts every answer.
    Those no sidecar decides are counted, not passed over."""
    campaign = _agrees(Env(Translator()), max_examples=MESH_EXAMPLES)
    run = campaign.properties[0]
    assert campaign.failures == [], campaign.failures[0].failure.summary
    assert campaign.coverage["mesh.route.producer"] and campaign.coverage["mesh.route.consumer"]
    assert run.mesh_sent >= 100, run
    assert run.not_sent.keys() <= {NO_SIDECAR, NOT_CAPTURED}, run.not_sent
    assert run.not_sent[NO_SIDECAR] > 0  # ns-c/client's: kube-proxy decides them


def _separated_prefix_as_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Envoy model mistaking path_separated_prefix for a plain prefix: it then
    predicts /pq matches /p, which real Envoy does not."""
    original: Callable[..., Any] = CompiledMatch._path_check

    def loose(self: CompiledMatch, kind: str, value: object) -> Any:
        return original(self, "prefix" if kind == "path_separated_prefix" else kind, value)

    monkeypatch.setattr(CompiledMatch, "_path_check", loose)  # the plane's child inherits it


def test_an_envoy_model_that_mispredicts_envoy_is_found_and_shrunk(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _separated_prefix_as_plain(monkeypatch)
    campaign = _agrees(max_examples=200)
    assert len(campaign.failures) == 1
    found = campaign.failures[0]
    failure = found.failure
    assert failure.property == "envoy-agrees"
    # What real Envoy answered and the model did not predict (a status, backend or the
    # request the backend saw: which one the seed's worlds meet first).
    assert "real Envoy answered" in failure.summary
    assert "which the Envoy model does not predict" in failure.summary
    assert len(failure.world.routes()) == 1, failure.world.yaml()
    assert failure.requests, "the request that shows it"
    folder = write_found(tmp_path, failure, fixture_name(failure), "envoy-agrees")
    assert "envoy-agrees" in (folder / "README.md").read_text()
    assert (folder / "cases.yaml").is_file()


def _original_port_not_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Envoy model's original_dst restoring the destination address but not its
    port: a captured connection then matches no Service's filter chain (they match
    the port too) and the model predicts the passthrough, where the sidecar routes."""
    original: Callable[..., Downstream] = listeners.inspect

    def half(listener: Any, arrived: tuple[str, int], *rest: Any) -> Downstream:
        conn = original(listener, arrived, *rest)
        return replace(conn, port=arrived[1]) if conn.restored else conn

    monkeypatch.setattr(listeners, "inspect", half)  # the plane's children inherit it


def test_an_envoy_model_that_mispredicts_a_sidecar_is_found_on_a_mesh_world(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _original_port_not_restored(monkeypatch)
    campaign = _agrees(Env(Translator()), max_examples=60, shrink_steps=MESH_SHRINK_STEPS)
    assert len(campaign.failures) == 1
    failure = campaign.failures[0].failure
    assert failure.property == "envoy-agrees"
    # Found by a mesh request, through its client's real sidecar: the edge's requests
    # meet no original_dst.
    assert "through the client's sidecar" in failure.summary, failure.summary
    assert "filter chain" in failure.summary, failure.summary
    assert failure.requests and all(w.request.source for w in failure.requests)
    assert [r for r in failure.world.routes() if is_mesh_route(r)], failure.world.yaml()
    folder = write_found(tmp_path, failure, fixture_name(failure), "envoy-agrees")
    assert "from:" in (folder / "cases.yaml").read_text()  # mesh cases, from the client


def test_a_sidecar_refusing_xds_the_model_takes_is_an_envoy_agrees_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every sidecar's outbound listener with its first filter chain twice (the same
    match): the Envoy model reads it, the sidecar's Envoy NACKs it. A verdict on the
    xDS, reported as the edge's NACK is, not a harness that failed to start."""
    reference = Translator._reference_sidecars

    def doubled(res: Any, clients: Any) -> Any:
        return {s: _twice_the_first_chain(x) for s, x in reference(res, clients).items()}

    monkeypatch.setattr(Translator, "_reference_sidecars", staticmethod(doubled))
    campaign = _agrees(Env(Translator()), max_examples=30, shrink_steps=3)
    (found,) = campaign.failures
    assert found.failure.property == "envoy-agrees"
    assert "NACKed xDS the model takes" in found.failure.summary
    assert "refused its xDS" in found.failure.summary, found.failure.summary
    assert [r for r in found.failure.world.routes() if is_mesh_route(r)]


def test_xds_validate_takes_but_envoy_nacks_is_an_envoy_accepts_failure(
    broken_server: str, tmp_path: Path
) -> None:
    bug = "listener-on-foreign-address"
    args = ("--envoy", "--property", "envoy-accepts", "--max-examples", "10", "--budget", "60s")
    rc, doc = _fuzz(tmp_path, *args, "--translator", bt.command(broken_server, bug))
    assert rc == 1, doc
    (failure,) = doc["failures"]
    assert failure["property"] == "envoy-accepts"
    assert "NACKed" in failure["summary"] and bt.FOREIGN_ADDRESS in failure["summary"]
    # --mode validate alone would have passed it: the NACK half is what found it.
    fixture = Path(failure["fixture"])
    dump = bt.translate(bug, [str(fixture.parent / "base"), str(fixture)])
    snap, skipped = from_config_dump(json.loads(dump))
    assert not skipped
    ok, output = envoy_validate(snap)
    assert ok, output


def test_without_a_namespace_the_live_properties_are_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse() -> None:
        raise netns.NamespaceUnavailable(errno.EPERM, f"unshare(CLONE_NEWNET): {netns.NEEDS}")

    monkeypatch.setattr(netns, "unshare_network", refuse)  # the forked child inherits it
    rc, doc = _fuzz(tmp_path, "--property", "envoy-agrees", "--budget", "5s")
    assert rc == 2 and doc == {}
    assert "need a network namespace of their own" in capsys.readouterr().err


def test_the_plane_starts_from_a_world_reaching_every_service() -> None:
    """So that every Service a drawn world names has its echo from the start."""
    world = everything_world()
    res = load_world(world)
    reached = {
        (ref["namespace"], ref["name"])
        for route in world.routes()
        for rule in route["spec"]["rules"]
        for ref in rule["backendRefs"]
    }
    assert set(res.services) == reached
    assert not Translator()(world).ctx.models_problem
