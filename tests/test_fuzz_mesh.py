"""Mesh worlds in ``fuzz``, and the sidecar half of the ``--translator`` contract.

A world with mesh routes is translated for every workload with a sidecar as well
(``CMD --proxy NS/WORKLOAD PATH...``), in ``fuzz`` as in ``check``: a translator
that fails there fails the check (exit 2), never leaves the mesh unjudged in
silence. ``--no-mesh`` draws edge-only worlds, for a translator of the edge only.
(The seeded mesh bugs are hunted in tests/test_fuzz_seeded_bugs.py.)
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from conftest import BASE, FIXTURES
from hypothesis import given
from worlds import world_settings

from verifier.cli import main
from verifier.fuzz.coverage import MESH_TAGS
from verifier.fuzz.trial import Translator, has_mesh_routes
from verifier.fuzz.worlds import World, worlds
from verifier.gatewayapi import mesh_attach
from verifier.gatewayapi.attach import build_graph
from verifier.gatewayapi.resources import load_resources
from verifier.mesh_compare import sidecar_clients
from verifier.translate import TranslateOptions, translate
from verifier.translate.sidecar import translate_sidecar
from verifier.xds.snapshot import envoy_validate, find_envoy, to_config_dump

SCENARIO = "mesh-consumer-route"
# A translator that prints what was written for its arguments, logging them; it exits 3
# for the workload named in FAIL (if any). ``python -S``: no site, a few ms a run.
SCRIPT = """
import json, os, sys
args = sys.argv[1:]
proxy = args[1] if args[:1] == ["--proxy"] else ""
with open(os.environ["LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
if proxy and proxy == os.environ.get("FAIL"):
    sys.exit(3)
sys.stdout.write(open(os.path.join(os.environ["DUMPS"], proxy.replace("/", "_") or "edge")).read())
"""


@pytest.fixture(scope="module")
def canned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The reference translator's xDS of the scenario, the edge's and each sidecar's,
    as files the canned translator prints; and the sidecar workloads."""
    out = tmp_path_factory.mktemp("dumps")
    res = load_resources([str(BASE), str(FIXTURES / SCENARIO)])
    (out / "edge").write_text(json.dumps(to_config_dump(translate(res, build_graph(res)))))
    graph = mesh_attach.build_mesh(res)
    proxies = []
    for source in sidecar_clients(res):
        wl = mesh_attach.sidecar_workload(res, source.line())
        dump = to_config_dump(translate_sidecar(res, graph, wl, TranslateOptions()))
        (out / source.line().replace("/", "_")).write_text(json.dumps(dump))
        proxies.append(source.line())
    (out / "translator.py").write_text(SCRIPT)
    return out, proxies


def _check(canned: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch, fail: str) -> int:
    dumps, _ = canned
    monkeypatch.setenv("DUMPS", str(dumps))
    monkeypatch.setenv("LOG", str(dumps / f"argv-{fail.replace('/', '_') or 'none'}.log"))
    monkeypatch.setenv("FAIL", fail)
    command = f"{shlex.quote(sys.executable)} -S {shlex.quote(str(dumps / 'translator.py'))}"
    return main(["check", str(BASE), str(FIXTURES / SCENARIO), "--translator", command])


def test_check_runs_the_translator_for_each_sidecar(
    canned: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    dumps, proxies = canned
    assert _check(canned, monkeypatch, "") == 0
    calls = [json.loads(line) for line in (dumps / "argv-none.log").read_text().splitlines()]
    paths = [str(BASE), str(FIXTURES / SCENARIO)]
    assert calls == [paths] + [["--proxy", p, *paths] for p in proxies]
    assert len(proxies) > 1  # clients in the Services' namespace and in a consumer's


def test_a_translator_failing_for_a_sidecar_fails_the_check(
    canned: tuple[Path, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, proxies = canned
    assert _check(canned, monkeypatch, proxies[-1]) == 2
    err = capsys.readouterr().err
    assert f"--translator --proxy {proxies[-1]}: exited with code 3" in err
    assert "[translator-failed]" in err


def test_no_mesh_draws_edge_worlds_only(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    args = ["fuzz", "--no-mesh", "--property", "models-agree", "--max-examples", "15"]
    args += ["--budget", "20s", "--database", "", "--out", str(tmp_path / "found")]
    assert main([*args, "--format", "json", "-o", str(report)]) == 0
    doc = json.loads(report.read_text())
    assert doc["mesh"] is False and doc["examples"] > 0
    assert all(doc["coverage"]["worlds"][tag] == 0 for tag in MESH_TAGS)
    assert "Mesh" not in doc["coverage"]["requests"]


@pytest.mark.skipif(find_envoy() is None, reason="no envoy binary")
@world_settings(2)
@given(world=worlds().filter(has_mesh_routes))
def test_envoy_loads_the_sidecars_of_drawn_mesh_worlds(world: World) -> None:
    """What envoy-accepts --envoy asks of every sidecar (and check's goldens of every
    fixture's): Envoy's validate mode takes it."""
    trial = Translator()(world)
    assert trial.sidecars
    for source, snap in sorted(trial.sidecars.items()):
        ok, output = envoy_validate(snap)
        assert ok, (source, output)
