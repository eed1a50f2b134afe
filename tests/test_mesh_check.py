"""`check` on mesh scenarios: mesh requests and cases judged by the spec model and by
their client's sidecar (the Envoy model on the reference translator's xDS for it) or
kube-proxy; the mesh's configuration mistakes declared by their scenario; and a
profile that does not claim the mesh (gateway-api) leaving those unasked, its mesh
cases judged by the spec model alone (EV701 when it misses one)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import mesh_scenario
import pytest
from conftest import BASE, FIXTURES
from test_check_cli import section
from verifier.rules import RULES

from verifier import pipeline
from verifier.cli import main

STATUS = FIXTURES / "mesh-status-no-matching-parent"
CONSUMER = FIXTURES / "mesh-consumer-route"


def _check(*paths: Path, profile: str = "aether-edge") -> pipeline.ScenarioResult:
    opts = pipeline.CheckOptions(profile=profile)
    (scenario,) = pipeline.discover([str(p) for p in paths], opts)
    return pipeline.check_scenario(scenario, opts, RULES)


def test_declared_mesh_mistakes_are_reported_and_expected() -> None:
    result = _check(BASE, STATUS)
    assert result.input_errors == [] and result.findings == []
    assert sorted(f.code for f in result.expected) == ["EV916", "EV917", "EV917", "EV918"]
    # Every mesh request and case judged by both sides: none by the spec model alone.
    assert result.mesh_requests > 0 and result.mesh_unjudged == 0 and result.mesh_cases == 0


def test_a_profile_without_the_mesh_skips_its_rule_and_its_declared_findings() -> None:
    result = _check(BASE, STATUS, profile="gateway-api")
    assert result.input_errors == [] and result.findings == [] and result.expected == []
    skipped = {name for name, _why in result.skipped}
    assert {"mesh-route-accepted", "mesh-consumer-route", "mesh-mtls"} <= skipped
    assert result.mesh_requests == 0 and result.mesh_cases == 4  # the spec model's alone


def _wrong_case(tmp_path: Path) -> Path:
    """mesh-consumer-route with one case expecting the producer's header where the
    consumer route answers."""
    shutil.copy(CONSUMER / "resources.yaml", tmp_path / "resources.yaml")
    table = (CONSUMER / "cases.yaml").read_text()
    wrong = table.replace("X-Header-Set: consumer}}", "X-Header-Set: producer}}", 1)
    assert wrong != table
    (tmp_path / "cases.yaml").write_text(wrong)
    return tmp_path


def test_a_mesh_case_both_sides_miss_is_an_ev703_at_its_line(tmp_path: Path) -> None:
    result = _check(BASE, _wrong_case(tmp_path))
    assert [(f.code, f.line, f.resource) for f in result.findings] == [
        ("EV703", 1, "case consumer-namespace-gets-its-consumer-route")
    ]


def test_without_the_mesh_a_case_the_spec_model_misses_is_an_ev701(tmp_path: Path) -> None:
    result = _check(BASE, _wrong_case(tmp_path), profile="gateway-api")
    assert [(f.code, f.line, f.resource) for f in result.findings] == [
        ("EV701", 1, "case consumer-namespace-gets-its-consumer-route")
    ]
    assert "the spec model does not meet" in result.findings[0].message


# ---------------------------------------------------------------- a new user's mesh mistakes

# (edit of the trial scenario, code, resource, the line's text, after that line, did you mean)
ROUTE_MISTAKES = {
    "service-does-not-exist": (
        ("    - name: ledger-v1\n      port: 8080\n      weight: 90", "    - name: ledger-vl\n"
         "      port: 8080\n      weight: 90"),
        "EV905", "HTTPRoute payments/ledger-canary", "- name: ledger-vl", "", "ledger-v1",
    ),
    "port-the-service-lacks": (
        ("      port: 8080\n      weight: 10", "      port: 8081\n      weight: 10"),
        "EV906", "HTTPRoute payments/ledger-canary", "port: 8081", "", "8080",
    ),
    "filter-not-implemented": (
        ("  - backendRefs:\n    - name: ledger-v1", "  - filters:\n"
         "    - {type: ExtensionRef, extensionRef: {group: x.io, kind: K, name: k}}\n"
         "    backendRefs:\n    - name: ledger-v1"),
        "EV904", "HTTPRoute payments/ledger-canary",
        "- {type: ExtensionRef, extensionRef: {group: x.io, kind: K, name: k}}", "", None,
    ),
    "no-reference-grant": (
        ("    namespace: storefront\n  to:", "    namespace: checkout\n  to:"),
        "EV908", "HTTPRoute storefront/ledger-from-storefront", "namespace: payments",
        "- path: {type: PathPrefix, value: /reports}", None,
    ),
}  # fmt: skip


def _check_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    """``edge-verify check ARGS --format json``, as a user runs it."""
    code = main(["check", *args, "--format", "json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


@pytest.mark.parametrize("mistake", sorted(ROUTE_MISTAKES))
def test_a_mesh_routes_mistake_is_an_error_at_its_field(
    mistake: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The trial's mesh routes: each backendRef mistake passed `check` (status alone said
    ResolvedRefs=False), and so did a filter no proxy implements (Accepted=False); now
    the edge's code at the field, with did you mean."""
    edit, code, resource, text, after, near = ROUTE_MISTAKES[mistake]
    folder = mesh_scenario.write(tmp_path, edit)
    rc, doc = _check_json(capsys, str(folder))
    assert rc == 1
    (found,) = doc["findings"]
    assert (found["code"], found["resource"]) == (code, resource)
    file, _, line = found["location"].rpartition(":")
    assert int(line) == mesh_scenario.line_of(Path(file), text, after)
    assert (found["expected"] or {}).get("did_you_mean") == near


def test_the_trial_scenario_is_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = mesh_scenario.write(tmp_path, cases=True)
    rc, doc = _check_json(capsys, str(folder), "--fail-on", "warning")
    assert (rc, doc["findings"]) == (0, [])


def test_one_xds_mistake_is_one_finding_at_the_rule_it_is_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """batch's sidecar with the producer route's 90/10 split swapped: every witness that
    falls to that rule (the header match's other side, storefront's consumer path, which
    does not apply to batch) shows the one mistake, reported once at that rule."""
    folder = mesh_scenario.write(tmp_path / "in")
    dump = tmp_path / "batch.json"
    assert main(["translate", str(folder), "--proxy", "payments/batch", "-o", str(dump)]) == 0
    doc = json.loads(dump.read_text("utf-8"))
    configs = section(doc, "Routes")["dynamic_route_configs"]
    (table,) = [c for c in configs if c["route_config"]["name"] == "outbound/payments/ledger/8080"]
    split = table["route_config"]["virtual_hosts"][0]["routes"][1]["route"]["weighted_clusters"]
    assert [c["weight"] for c in split["clusters"]] == [90, 10]
    split["clusters"][0]["weight"], split["clusters"][1]["weight"] = 10, 90
    dump.write_text(json.dumps(doc), "utf-8")
    capsys.readouterr()
    rc, report = _check_json(capsys, str(folder), "--xds", str(dump), "--proxy", "payments/batch")
    assert rc == 1
    (found,) = report["findings"]
    assert (found["code"], found["resource"]) == ("EV218", "HTTPRoute payments/ledger-canary")
    file, _, line = found["location"].rpartition(":")
    # The split's rule (it has no matches: its first line), not the header match's.
    assert int(line) == mesh_scenario.line_of(Path(file), "- backendRefs:", 'value: "true"')
    assert found["xds_path"].endswith("routes[1]")


def test_a_mesh_rule_whose_backends_all_weigh_zero_is_a_warning_at_its_backend_refs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The trial's split zeroed on both sides: valid, and every request of the rule is
    answered 500 (both models agree, so only this warning says so)."""
    zeroed = ("      weight: 90", "      weight: 0"), ("      weight: 10", "      weight: 0")
    folder = mesh_scenario.write(tmp_path, *zeroed)
    assert main(["check", str(folder)]) == 0  # a warning: the default --fail-on error passes
    capsys.readouterr()
    rc, doc = _check_json(capsys, str(folder), "--fail-on", "warning")
    assert rc == 1
    (found,) = doc["findings"]
    assert (found["code"], found["severity"]) == ("EV925", "warning")
    assert found["resource"] == "HTTPRoute payments/ledger-canary"
    file, _, line = found["location"].rpartition(":")
    assert int(line) == mesh_scenario.line_of(Path(file), "- backendRefs:", 'value: "true"')


UNLABELLED = {
    ns: (f'  name: {ns}\n  labels:\n    aether.io/managed: "true"\n', f"  name: {ns}\n")
    for ns in ("payments", "storefront")
}
REDIRECT_ALL_WEB = (
    "    metadata:\n      labels: {app: web}\n",
    "    metadata:\n      labels: {app: web}\n"
    '      annotations: {capture.aether.io/redirect-all: "true"}\n',
)
PARENT = '- group: ""'


def _at_parent(found: dict[str, Any], route: str) -> bool:
    """``found`` is at the parentRef of HTTPRoute ``route`` (its first, a Service)."""
    file, _, line = found["location"].rpartition(":")
    return int(line) == mesh_scenario.line_of(Path(file), PARENT, f"name: {route}")


@pytest.mark.parametrize("redirect_all", [False, True], ids=["no-client", "redirect-all-client"])
def test_a_mesh_route_on_a_service_outside_the_mesh_is_a_warning_naming_who_applies_it(
    redirect_all: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """payments without the mesh label: ledger is not mesh-registered, so a sidecar
    applies its routes only when it captures everything (redirect-all), and batch (in
    payments) has no sidecar at all. EV926 at each route's parentRef, naming the
    clients that do apply it: none, or storefront/web once it redirects all."""
    edits = [UNLABELLED["payments"], *([REDIRECT_ALL_WEB] if redirect_all else [])]
    rc, doc = _check_json(
        capsys, str(mesh_scenario.write(tmp_path, *edits)), "--fail-on", "warning"
    )
    assert rc == 1
    found = {f["resource"]: f for f in doc["findings"]}
    assert sorted(found) == [
        "HTTPRoute payments/ledger-canary",
        "HTTPRoute storefront/ledger-from-storefront",
    ]
    for resource, f in found.items():
        assert (f["code"], f["severity"]) == ("EV926", "warning")
        assert _at_parent(f, resource.rpartition("/")[2])
    # storefront's consumer route replaces the producer route for web: only it reaches web.
    assert found["HTTPRoute payments/ledger-canary"]["actual"]["clients"] == []
    consumer = found["HTTPRoute storefront/ledger-from-storefront"]["actual"]["clients"]
    assert consumer == (["storefront/web"] if redirect_all else [])


def test_a_consumer_route_in_a_namespace_outside_the_mesh_applies_to_no_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = mesh_scenario.write(tmp_path, UNLABELLED["storefront"])
    rc, doc = _check_json(capsys, str(folder), "--fail-on", "warning")
    assert rc == 1
    (found,) = doc["findings"]
    assert (found["code"], found["severity"]) == ("EV927", "warning")
    assert found["resource"] == "HTTPRoute storefront/ledger-from-storefront"
    assert _at_parent(found, "ledger-from-storefront")
    assert found["actual"]["clients"] == []


def test_a_case_failing_for_a_missing_mesh_label_points_at_the_route_it_keeps_away(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The trial's cases with storefront unlabelled: web's two cases fail as both sides
    predict (kube-proxy answers), each an EV703 at the case with the consumer route's
    parentRef as related, where EV927 is."""
    folder = mesh_scenario.write(tmp_path, UNLABELLED["storefront"], cases=True)
    rc, doc = _check_json(capsys, str(folder))
    assert rc == 1
    cases = [f for f in doc["findings"] if f["code"] == "EV703"]
    assert [f["resource"] for f in cases] == [
        "case web-reports-go-to-v1",
        "case web-other-paths-404-consumer-replaces-producer",
    ]
    (warning,) = [f for f in doc["findings"] if f["code"] == "EV927"]
    for f in cases:
        assert f["related"][0]["location"] == warning["location"]
        assert "EV927" in f["related"][0]["what"]


def test_a_mesh_case_failing_for_a_backend_mistake_is_reported_at_the_mistake(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the trial's cases, the misspelt split backend fails batch-default-split as
    both sides predict: one finding at the backendRef, the case as related, as on the
    edge (EV702 folded into the EV905 at that line), not an EV703 at the case."""
    edit, *_rest = ROUTE_MISTAKES["service-does-not-exist"]
    rc, doc = _check_json(capsys, str(mesh_scenario.write(tmp_path, edit, cases=True)))
    assert rc == 1
    assert [f["code"] for f in doc["findings"]] == ["EV905"]
    (found,) = doc["findings"]
    assert [r["location"].rpartition(":")[2] for r in found["related"]] == ["7"]
    assert "batch-default-split" in found["related"][0]["what"]


# (edit, the code at the parentRef, its line's text, after that line, the cases it fails)
REFUSED_PARENTS = {
    "port-the-service-lacks": (
        ("    name: ledger\n    port: 8080\n  rules:",
         "    name: ledger\n    port: 8081\n  rules:"),
        "EV917", "port: 8081", "", ["batch-canary-header-goes-to-v2", "batch-default-split"],
    ),
    "consumer-namespace-left-out": (
        ("    namespace: payments\n    port: 8080\n  rules:", "    port: 8080\n  rules:"),
        "EV916", "name: ledger", "name: ledger-from-storefront",
        ["web-reports-go-to-v1", "web-other-paths-404-consumer-replaces-producer"],
    ),
    "core-group-left-out": (
        ('  - group: ""\n    kind: Service\n    name: ledger\n    port: 8080',
         "  - kind: Service\n    name: ledger\n    port: 8080"),
        "EV918", "- kind: Service", "", ["batch-canary-header-goes-to-v2", "batch-default-split"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("mistake", sorted(REFUSED_PARENTS))
def test_a_mesh_case_failing_because_its_route_is_refused_is_told_at_the_parent_ref(
    mistake: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mesh route whose Service parentRef is refused applies to no one: the cases
    written for it fail as both sides predict (kube-proxy, or the producer route,
    answers). One finding, mesh-route-accepted's at the parentRef, with those cases as
    related (EV702 folded into it, as into EV905), not an EV703 at each case."""
    edit, code, text, after, cases = REFUSED_PARENTS[mistake]
    rc, doc = _check_json(capsys, str(mesh_scenario.write(tmp_path, edit, cases=True)))
    assert rc == 1
    assert [f["code"] for f in doc["findings"]] == [code]
    (found,) = doc["findings"]
    file, _, line = found["location"].rpartition(":")
    assert int(line) == mesh_scenario.line_of(Path(file), text, after)
    assert [r["what"].split()[1] for r in found["related"]] == cases
    assert all(r["location"].startswith(str(tmp_path / "cases.yaml")) for r in found["related"])
