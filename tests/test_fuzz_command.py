"""``edge-verify fuzz``: the command as a translator author uses it.

A campaign on the reference translator finds nothing and says what it drew; on a
broken translator it exits 1 and writes a fixture ``check`` reads as it is; the
example database replays the failure first; a run that checked nothing, or an
--out that cannot hold what is found, is refused (exit 2) before anything is lost.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import broken_translators as bt
import pytest
from hypothesis import given
from test_check_cli import CLI, cli  # noqa: F401  (the fixture)
from worlds import one_route, world_settings

from verifier.cli import main
from verifier.fuzz.coverage import ALL_TAGS
from verifier.fuzz.properties import DEFAULT_PROPERTIES, reordered, with_fresh_route
from verifier.fuzz.trial import Translator, load_world
from verifier.fuzz.worlds import World, renamed, worlds
from verifier.xds.snapshot import envoy_validate, find_envoy

MESH_ROUTE_TAGS = (
    "mesh.route.producer",
    "mesh.route.consumer",
    "mesh.parentRef.port",
    "mesh.parentRef.every-port",
)


def _fuzz(tmp: Path, *args: str) -> tuple[int, dict[str, Any]]:
    report = tmp / "report.json"
    rc = main(
        [
            "fuzz",
            "--out",
            str(tmp / "found"),
            "--database",
            str(tmp / "db"),
            "--format",
            "json",
            "-o",
            str(report),
            *args,
        ]
    )
    return rc, json.loads(report.read_text()) if report.exists() else {}


def test_reference_translator_has_none_of_the_properties_broken(tmp_path: Path) -> None:
    rc, doc = _fuzz(tmp_path, "--budget", "8s", "--seed", "3")
    assert rc == 0, doc["failures"]
    assert [p["name"] for p in doc["properties"]] == list(DEFAULT_PROPERTIES)
    assert all(p["examples"] > 0 for p in doc["properties"])
    assert doc["examples"] == sum(p["examples"] for p in doc["properties"])
    assert set(doc["coverage"]["worlds"]) == set(ALL_TAGS)
    assert sum(doc["coverage"]["worlds"].values()) > 0
    assert doc["coverage"]["requests"]
    # Mesh worlds were drawn and their requests judged on the sidecars: producer and
    # consumer routes, with and without a port, sent to Services from mesh clients
    # (the rarer mesh tags, a drawn client's, need more worlds than a budget of 8 s
    # gives on a loaded machine).
    assert all(doc["coverage"]["worlds"][tag] > 0 for tag in MESH_ROUTE_TAGS)
    assert doc["coverage"]["requests"]["Mesh"] > 0
    assert not (tmp_path / "found").exists()


@world_settings(60)
@given(world=worlds())
def test_every_drawn_world_is_valid_input(world: World) -> None:
    """The tool's own validation accepts every drawn world and its metamorphic
    variants (load_world raises InputErrors otherwise)."""
    load_world(world)
    load_world(reordered(world))
    load_world(renamed(world)[0])
    load_world(with_fresh_route(world))


@pytest.mark.skipif(find_envoy() is None, reason="no envoy binary")
@world_settings(4)
@given(world=worlds())
def test_envoy_loads_the_translation_of_drawn_worlds(world: World) -> None:
    ok, output = envoy_validate(Translator()(world).snapshot)
    assert ok, output


def test_a_broken_translator_is_found_and_written_as_a_fixture(
    tmp_path: Path,
    broken_server: str,
    cli: CLI,  # noqa: F811
) -> None:
    command = bt.command(broken_server, "query-match-dropped")
    args = ["--translator", command, "--property", "models-agree", "--seed", "1"]
    rc, doc = _fuzz(tmp_path, *args, "--budget", "60s", "--shrink-budget", "20s")
    assert rc == 1
    (failure,) = doc["failures"]
    assert failure["property"] == "models-agree"
    folder = Path(failure["fixture"])
    written = {p.name for p in folder.iterdir()}
    # expected-findings.yaml when the world holds a configuration mistake drawn on purpose.
    assert written - {"expected-findings.yaml"} == {"resources.yaml", "cases.yaml", "README.md"}
    assert failure["summary"] in (folder / "README.md").read_text()
    # The fixture is a regression test as it is.
    suite = str(folder.parent)
    assert cli("check", suite, "--translator", command).rc == 1
    assert cli("check", suite).rc == 0
    # The database replays the counterexample before anything new is drawn.
    rc, again = _fuzz(tmp_path, *args, "--budget", "60s", "--shrink-budget", "5s")
    assert rc == 1
    assert again["failures"][0]["examples_to_find"] == 1


def test_a_run_that_checked_nothing_does_not_pass(tmp_path: Path, cli: CLI) -> None:  # noqa: F811
    r = cli("fuzz", "--budget", "0.000001", "--out", str(tmp_path / "o"), "--database", "")
    assert r.rc == 2
    assert "nothing was checked" in r.err


def test_an_out_that_cannot_hold_fixtures_is_refused_before_searching(
    tmp_path: Path,
    cli: CLI,  # noqa: F811
) -> None:
    taken = tmp_path / "file"
    taken.write_text("x")
    r = cli("fuzz", "--budget", "60s", "--out", str(taken))
    assert r.rc == 2
    assert "--out" in r.err and "not a directory" in r.err


@pytest.mark.parametrize(
    ("option", "where", "says"),
    [
        ("-o", "missing/report.json", "is not a directory"),
        ("-o", ".", "is a directory"),
        ("--database", "file", "not a directory"),
    ],
)
def test_a_report_or_database_that_cannot_be_written_is_refused_before_searching(
    option: str,
    where: str,
    says: str,
    tmp_path: Path,
    cli: CLI,  # noqa: F811
) -> None:
    """A 60 s search whose results would be lost to a typo in a path is not run."""
    (tmp_path / "file").write_text("x")
    out = str(tmp_path / "found")
    r = cli("fuzz", "--budget", "60s", "--out", out, option, str(tmp_path / where))
    assert r.rc == 2
    assert option in r.err and says in r.err
    assert not (tmp_path / "found").exists()


@pytest.mark.parametrize("budget", ["0", "-1s", "soon", "5x"])
def test_a_budget_that_is_not_a_duration_is_a_usage_error(
    budget: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["fuzz", f"--budget={budget}"])
    assert exc.value.code == 2
    assert "duration" in capsys.readouterr().err


def test_names_are_prefixed_consistently(tmp_path: Path) -> None:
    """The renamed variant changes names only: its translation has the same number
    of routes, every name carrying the prefix."""
    world = one_route("svc-2")
    new, names = renamed(world)
    res = load_world(new)
    assert set(res.httproutes) == {("zns-a", "zr0")}
    assert names["svc-2"] == "zsvc-2"
    assert "zsvc-2" in new.yaml() and "svc-2" not in new.yaml().replace("zsvc-2", "")
