"""Real Envoy must accept the xDS of every valid scenario.

The goldens prove the output is stable; only Envoy itself can prove it is
loadable (unknown fields, bad regexes, conflicting names). Each test validates
its own snapshot in its own Envoy process, so they may run in parallel.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import (
    edge_scenarios,
    proxy_params,
    scenario_params,
    translate_proxy,
    translate_scenario,
)


@pytest.mark.parametrize("scenario", scenario_params(edge_scenarios()))
def test_envoy_accepts(scenario: Path, repo_cwd: Path) -> None:
    from verifier.xds.snapshot import envoy_validate

    ok, output = envoy_validate(translate_scenario(scenario))
    if not ok:
        pytest.fail(
            f"envoy --mode validate rejected the xDS of {scenario.name}:\n{output}", pytrace=False
        )


@pytest.mark.parametrize(("scenario", "namespace", "workload"), proxy_params())
def test_envoy_accepts_sidecar(
    scenario: Path, namespace: str, workload: str, repo_cwd: Path
) -> None:
    """Each sidecar's xDS (``translate --proxy``): the outbound listener's original_dst
    filter and destination-matched chains, the inbound mTLS listener, the passthrough
    and mesh clusters."""
    from verifier.xds.snapshot import envoy_validate

    ok, output = envoy_validate(translate_proxy(scenario, namespace, workload))
    if not ok:
        pytest.fail(
            f"envoy --mode validate rejected the sidecar {namespace}/{workload} of "
            f"{scenario.name}:\n{output}",
            pytrace=False,
        )
