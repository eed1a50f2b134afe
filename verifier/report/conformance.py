"""A Gateway API ConformanceReport (``gateway.networking.k8s.io/v1``) for a live pass.

The Gateway API project collects these reports from implementations; a nightly
live run can upload this one. Its fields follow the upstream Go type
(``conformance/apis/v1``: ConformanceReport, Implementation, ProfileReport,
Status, ExtendedStatus, Statistics, Result) and tests/test_live_cli.py holds
the YAML to that definition.

A scenario is one conformance test, named as upstream names its tests
(``httproute-query-param-matching`` -> ``HTTPRouteQueryParamMatching``); it
passes when every case passes. A scenario whose name spells an extended
feature of ``verifier.features`` counts for that feature under ``extended``;
the rest count as core. A feature also counts as tested when a case that
exercises it ran, whatever its scenario is called (``ScenarioRun.features``,
``features.exercised``: a mesh case from a client whose namespace has a consumer
route to the Service tests MeshConsumerRoute). Extended features no scenario
tested are listed as unsupported: nothing here says they work. A case whose answer came through
another xDS route than the Envoy model's fails its test (``EV810``), and each
profile's summary counts the tests with answers no route was attributed to.

Scenarios whose cases are all mesh cases (sent from a client workload to a Service,
docs/mesh.md) are tests of the MESH-HTTP profile, reported apart from GATEWAY-HTTP's
with the mesh's extended features (``features.MESH_EXTENDED``; a scenario named
``mesh-rewrite-path`` tests MeshHTTPRouteRewritePath: upstream's mesh features spell
"HTTPRoute" where the scenarios leave it out).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml

from verifier.features import EXTENDED, MESH_EXTENDED
from verifier.live.results import LiveReport, ScenarioRun

API_VERSION = "gateway.networking.k8s.io/v1"
GATEWAY_API_VERSION = "v1.5.0"
PROFILE = "GATEWAY-HTTP"
MESH_PROFILE = "MESH-HTTP"
CHANNELS = ("standard", "experimental")
MODE = "default"
RESULTS = ("success", "partial", "failure")  # the upstream Result values
# How upstream spells these words inside test and feature names.
_WORDS = {
    "httproute": "HTTPRoute",
    "grpcroute": "GRPCRoute",
    "http": "HTTP",
    "https": "HTTPS",
    "cors": "CORS",
    "h2c": "H2C",
    "tls": "TLS",
    "websocket": "WebSocket",
}


@dataclass(frozen=True)
class Implementation:
    organization: str = "edge-verifier"
    project: str = "aether-edge"
    url: str = "https://gateway-api.sigs.k8s.io/"
    version: str = "unknown"
    contact: tuple[str, ...] = ()


def upstream_test_name(scenario: str) -> str:
    """``httproute-303-redirect-status-code`` -> ``HTTPRoute303RedirectStatusCode``."""
    return "".join(_WORDS.get(w, w[:1].upper() + w[1:]) for w in scenario.split("-"))


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def feature_of(scenario: str, features: frozenset[str] = EXTENDED) -> str | None:
    """The extended feature a scenario is named after (the longest whose name starts
    the scenario's: ``gateway-http-listener-isolation-listener-without-routes``
    tests GatewayHTTPListenerIsolation), if any. A mesh feature may be named without
    its "HTTPRoute" (``mesh-redirect-port``: MeshHTTPRouteRedirectPort)."""
    key = _key(scenario)
    found = [
        f
        for f in features
        if key.startswith(_key(f)) or key.startswith(_key(f).replace("meshhttproute", "mesh"))
    ]
    return max(found, key=len) if found else None


def _status(passed: list[str], failed: list[str], skipped: list[str]) -> dict[str, Any]:
    result = "failure" if failed else "partial" if skipped else "success"
    out: dict[str, Any] = {
        "result": result,
        "statistics": {"Passed": len(passed), "Failed": len(failed), "Skipped": len(skipped)},
    }
    if skipped:
        out["skippedTests"] = sorted(skipped)
    if failed:
        out["failedTests"] = sorted(failed)
    return out


def _profile(
    name: str,
    scenarios: list[ScenarioRun],
    features: frozenset[str],
    rewritten: bool,
) -> dict[str, Any]:
    """One ProfileReport: the scenarios as core or extended tests, the features tested."""
    core: dict[str, list[str]] = {"passed": [], "failed": [], "skipped": []}
    ext: dict[str, list[str]] = {"passed": [], "failed": [], "skipped": []}
    tested: set[str] = set()
    for scn in scenarios:
        feature = feature_of(scn.name, features)
        bucket = ext if feature else core
        ran = [r for r in scn.results if not r.skipped]
        state = "skipped" if not ran else "passed" if scn.passed else "failed"
        bucket[state].append(upstream_test_name(scn.name))
        if feature and ran:
            tested.add(feature)
        tested |= set(scn.features) & features  # a case that exercised it ran
    extended = _status(ext["passed"], ext["failed"], ext["skipped"])
    if tested:
        extended["supportedFeatures"] = sorted(tested)
    if features - tested:
        extended["unsupportedFeatures"] = sorted(features - tested)
    core_status = _status(core["passed"], core["failed"], core["skipped"])
    n_failed = len(core["failed"]) + len(ext["failed"])
    unattributed = sum(1 for s in scenarios if s.unattributed)
    n_run = sum(len(v) for v in (*core.values(), *ext.values()))
    summary = (
        f"Core tests {'failed' if core['failed'] else 'succeeded'}, "
        f"{len(tested)} extended features tested; {n_run - n_failed} of {n_run} tests passed"
        + (" (Envoy ran a rewritten copy of the xDS)" if rewritten else "")
        + (f" ({unattributed} not attributed to an xDS route)" if unattributed else "")
    )
    return {"name": name, "summary": summary, "core": core_status, "extended": extended}


def conformance_report(
    report: LiveReport,
    implementation: Implementation,
    channel: str = "standard",
    now: datetime | None = None,
) -> dict[str, Any]:
    """The report as the upstream type serialises it (JSON names, omitempty honoured):
    GATEWAY-HTTP for the edge's scenarios, MESH-HTTP for the mesh's (module docstring)."""
    edge = [s for s in report.scenarios if not s.mesh]
    mesh = [s for s in report.scenarios if s.mesh]
    profiles = []
    if edge or not mesh:
        profiles.append(_profile(PROFILE, edge, EXTENDED, report.rewritten))
    if mesh:
        profiles.append(_profile(MESH_PROFILE, mesh, MESH_EXTENDED, report.rewritten))
    impl = {
        "organization": implementation.organization,
        "project": implementation.project,
        "url": implementation.url,
        "version": implementation.version,
        "contact": list(implementation.contact),
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "ConformanceReport",
        "implementation": impl,
        "date": (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "gatewayAPIVersion": GATEWAY_API_VERSION,
        "mode": MODE,
        "gatewayAPIChannel": channel,
        "profiles": profiles,
    }


def render(report: LiveReport, implementation: Implementation, channel: str = "standard") -> str:
    doc = conformance_report(report, implementation, channel)
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=1000)
