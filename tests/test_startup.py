"""Start-up: a command imports only what it uses.

Per-PR checks are the tool's first use and most configurations are small, so
start-up is most of what a user waits for. envoy-data-plane alone took 0.72 s
to import, and registering ``fuzz`` once pulled it (and Hypothesis, the models
and the translator) into every command: ``--version`` took 2.3 s. Each case
below runs a command in a fresh interpreter and fails when a heavy package
creeps into its imports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES

from verifier.fuzz.names import DEFAULT_PROPERTIES, LIVE_PROPERTIES, PROPERTY_NAMES
from verifier.fuzz.properties import PROPERTIES

# Packages that cost tens to hundreds of milliseconds to import.
HEAVY = frozenset(
    {
        "envoy_data_plane",
        "betterproto2",
        "pydantic",
        "hypothesis",
        "aiohttp",
        "grpclib",
        "kubernetes",
        "rich",
        "dnslib",
    }
)
PROBE = """
import json, sys
from verifier.cli import main
try:
    main(json.loads(sys.argv[1]))
except SystemExit:
    pass
sys.stderr.write("\\n" + json.dumps(sorted(sys.modules)))
"""


def imported(argv: list[str], *, full: bool = False) -> set[str]:
    """The top-level packages (every module: ``full``) loaded by running
    ``edge-verify ARGV`` in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argv)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    modules = set(json.loads(done.stderr.strip().splitlines()[-1]))
    return modules if full else {m.split(".")[0] for m in modules}


SCENARIO = FIXTURES / "httproute-exact-path-matching"
LIGHT: dict[str, tuple[list[str], frozenset[str]]] = {
    "--version": (["--version"], HEAVY),
    "--help": (["--help"], HEAVY),
    "fuzz --help": (["fuzz", "--help"], HEAVY),
    "check --help": (["check", "--help"], HEAVY),
    # status is the spec side alone: no xDS, no models' Envoy half, no terminal styling
    # when piped.
    "status": (["status", str(FIXTURES / "base"), str(SCENARIO)], HEAVY),
}


@pytest.mark.parametrize("name", sorted(LIGHT))
def test_a_command_imports_nothing_heavy_it_does_not_use(name: str) -> None:
    argv, banned = LIGHT[name]
    crept = imported(argv) & banned
    assert not crept, f"edge-verify {name} imports {sorted(crept)}"


def test_check_loads_no_live_or_fuzzing_machinery() -> None:
    """check needs envoy-data-plane (its Envoy model reads the messages), but not the
    live pass's, the ADS server's or the fuzzer's packages."""
    loaded = imported(["check", str(FIXTURES / "base"), str(SCENARIO), "-o", "/dev/null"])
    assert "envoy_data_plane" in loaded  # what the probe sees is the real import set
    # rich draws progress on a terminal only; piped, the report is plain text
    assert not loaded & {"hypothesis", "aiohttp", "grpclib", "kubernetes", "dnslib", "rich"}


def test_checking_an_xds_file_imports_no_envoy_data_plane(tmp_path: Path) -> None:
    """``check --xds`` reads the file as records (verifier.xds.records): importing
    envoy-data-plane (0.3 s, with pydantic and betterproto2) is for making messages,
    which only the translator, the ADS server and the mutation engine do. A config_dump
    and a per-type directory alike; ``check`` without ``--xds`` translates, so it does."""
    xds = tmp_path / "xds.json"
    translate = ["translate", str(FIXTURES / "base"), str(SCENARIO), "-o", str(xds)]
    subprocess.run([sys.executable, "-m", "verifier.cli", *translate], check=True)
    heavy = ("envoy_data_plane", "betterproto2", "pydantic")
    for source in (xds, SCENARIO):  # a config_dump; the scenario's per-type golden files
        argv = ["check", str(FIXTURES / "base"), str(SCENARIO), "--xds", str(source)]
        loaded = imported([*argv, "-o", os.devnull], full=True)
        assert "verifier.semantics.envoy.model" in loaded  # the probe sees the check's imports
        assert not {m for m in loaded if m.startswith(heavy)}, source


def test_the_command_lines_names_are_the_properties() -> None:
    assert set(PROPERTY_NAMES) == set(PROPERTIES)
    assert set(DEFAULT_PROPERTIES) | LIVE_PROPERTIES == set(PROPERTIES)
    assert not set(DEFAULT_PROPERTIES) & LIVE_PROPERTIES
