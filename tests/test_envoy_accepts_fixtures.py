"""Real Envoy must accept the xDS of every valid scenario.

The goldens prove the output is stable; only Envoy itself can prove it is
loadable (unknown fields, bad regexes, conflicting names). Each test validates
its own snapshot in its own Envoy process, so they may run in parallel.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import edge_scenarios, scenario_params, translate_scenario


@pytest.mark.parametrize("scenario", scenario_params(edge_scenarios()))
def test_envoy_accepts(scenario: Path, repo_cwd: Path) -> None:
    from verifier.xds.snapshot import envoy_validate

    ok, output = envoy_validate(translate_scenario(scenario))
    if not ok:
        pytest.fail(
            f"envoy --mode validate rejected the xDS of {scenario.name}:\n{output}", pytrace=False
        )
