"""The live properties: one real Envoy, fed over ADS, answering drawn worlds in turn.

``envoy-agrees`` holds on the reference translator, and finds an Envoy model
that mispredicts real Envoy (a mutant of the model, made here: the property's
power is shown on a real disagreement, not assumed). ``envoy-accepts --envoy``
finds xDS that ``--mode validate`` takes and Envoy NACKs over ADS. Without a
network namespace the live properties are refused, never skipped in silence.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import broken_translators as bt
import pytest
from test_fuzz_command import _fuzz

from verifier.fuzz.campaign import fixture_name, run_campaign
from verifier.fuzz.fixtures import write_found
from verifier.fuzz.plane import everything_world, in_plane
from verifier.fuzz.properties import Env
from verifier.fuzz.trial import Translator, load_world
from verifier.live import netns
from verifier.live.envoy_process import envoy_available
from verifier.semantics.envoy.match import CompiledMatch
from verifier.xds.snapshot import envoy_validate, from_config_dump

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not envoy_available(), reason="no envoy binary"),
    pytest.mark.skipif(os.geteuid() != 0, reason=netns.NEEDS),
]
EXAMPLES = 25


def _agrees(**options: Any) -> Any:
    return run_campaign(
        Env(Translator()),
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
