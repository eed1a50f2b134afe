"""Shared by the drawn-world tests: small Gateway API worlds that the translator
and the spec model, which read the spec separately, must agree on, in the
reference encoding and in another implementation's (tests/foreign.py). Worlds hold
configuration mistakes on purpose (a ListenerSet no Gateway admits, a route no
listener takes): each is declared (expected-findings.yaml, as the fuzzer's fixtures
declare theirs), so that what fails the check is a disagreement of the models."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import yaml
from conftest import BASE
from foreign import reencode
from hypothesis import HealthCheck, settings

from verifier.cli import main
from verifier.fuzz.fixtures import declare_findings
from verifier.fuzz.trial import Translator, load_world, write_scenario
from verifier.fuzz.worlds import World
from verifier.gatewayapi.attach import build_graph
from verifier.gatewayapi.resources import load_resources
from verifier.translate import TranslateOptions, translate
from verifier.xds.snapshot import Snapshot, dumps

GROUP = "gateway.networking.k8s.io"


def world_settings(examples: int) -> Any:
    """The same draws on every machine, no deadline (each example runs check)."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )


def one_route(service: str) -> World:
    """The smallest world the fuzzer draws: Gateway ns-a/gw-0 with one HTTP listener and
    HTTPRoute ns-a/r0 to port 8080 of Service ``service``."""
    gateway = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Gateway",
        "metadata": {"name": "gw-0", "namespace": "ns-a"},
        "spec": {
            "gatewayClassName": "aether",
            "listeners": [{"name": "l0", "port": 80, "protocol": "HTTP"}],
        },
    }
    route = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "r0", "namespace": "ns-a"},
        "spec": {
            "parentRefs": [{"name": "gw-0"}],
            "rules": [{"backendRefs": [{"name": service, "port": 8080}]}],
        },
    }
    return World((gateway, route))


def grant_from(ns: str) -> dict[str, Any]:
    """Routes in ``ns`` may use the Services in edge-infra."""
    return {
        "apiVersion": f"{GROUP}/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": {"name": f"from-{ns}", "namespace": "edge-infra"},
        "spec": {
            "from": [{"group": GROUP, "kind": "HTTPRoute", "namespace": ns}],
            "to": [{"group": "", "kind": "Service"}],
        },
    }


def assert_check_finds_nothing(docs: list[dict[str, Any]]) -> None:
    """``check`` on the world (with fixtures/base) exits 0, its configuration mistakes
    declared; else the failure shows the world's YAML and the findings. Objects drawn
    twice are written once."""
    unique = {(d["kind"], d["metadata"]["namespace"], d["metadata"]["name"]): d for d in docs}
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "world"
        scenario.mkdir()
        text = yaml.safe_dump_all(list(unique.values()), sort_keys=False)
        (scenario / "resources.yaml").write_text(text, encoding="utf-8")
        declare_findings(BASE, scenario)
        report = Path(tmp) / "report.json"
        rc = main(["check", str(BASE), str(scenario), "--format", "json", "-o", str(report)])
        findings = json.loads(report.read_text(encoding="utf-8"))["findings"] if rc != 2 else []
        assert rc == 0, text + "\n" + "\n".join(f["message"] for f in findings)
        # The same world's xDS as another implementation would write it (tests/foreign.py).
        foreign = Path(tmp) / "foreign.json"
        foreign.write_text(dumps(_reencoded(scenario)), encoding="utf-8")
        args = ["check", str(BASE), str(scenario), "--xds", str(foreign), "--profile"]
        rc = main([*args, "gateway-api", "--format", "json", "-o", str(report)])
        findings = json.loads(report.read_text(encoding="utf-8"))["findings"] if rc != 2 else []
        assert rc == 0, "re-encoded:\n" + text + "\n".join(f["message"] for f in findings)


def assert_fuzz_world_checks_clean(world: World) -> None:
    """``check`` finds nothing but its declared configuration mistakes in a world of
    the fuzzer's strategies (verifier/fuzz), as the reference translator writes it and
    as another implementation would."""
    with tempfile.TemporaryDirectory() as tmp:
        base, scenario = write_scenario(Path(tmp), world)
        declare_findings(base, scenario)
        report = Path(tmp) / "report.json"
        for extra in ([], ["--xds", str(Path(tmp) / "foreign.json"), "--profile", "gateway-api"]):
            if extra:
                foreign = reencode(Translator()(world).snapshot, load_world(world))
                Path(extra[1]).write_text(dumps(foreign), encoding="utf-8")
            args = ["check", str(base), str(scenario), *extra]
            rc = main([*args, "--format", "json", "-o", str(report)])
            found = json.loads(report.read_text(encoding="utf-8"))["findings"] if rc != 2 else []
            assert rc == 0, world.yaml() + "\n".join(f["message"] for f in found)


def _reencoded(scenario: Path) -> Snapshot:
    res = load_resources([str(BASE), str(scenario)])
    return reencode(translate(res, build_graph(res), TranslateOptions()), res)
