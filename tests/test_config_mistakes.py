"""Configuration mistakes are errors at their field, whether or not a case exercises them.

Issue 31's trial: a new user's scenario (tests/user_scenario.py: a Gateway, two Services
with Deployments, an HTTPRoute with a 90/10 split; here without cases) passed ``check``
with a backendRef to a Service that does not exist, a port the Service lacks, or a route
hostname no listener takes. Each is now a finding at the line the user must edit, with
its code. Then one compact test for each other reason the configuration rules give, the
declared findings of deliberately broken scenarios (expected-findings.yaml), the loader's
"did you mean" for field names, and the fuzzer's fixtures, which declare their worlds'
mistakes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import yaml
from conftest import BASE, FIXTURES
from test_check_cli import CLI, cli  # noqa: F401  (the fixture)
from user_scenario import ISSUE, MISTAKES, line_of, write
from verifier.rules import CONFIGURATION
from worlds import one_route

from verifier import pipeline
from verifier.check import Context
from verifier.errors import InputErrors
from verifier.findings import Finding
from verifier.fuzz.fixtures import write_found
from verifier.fuzz.properties import Failure
from verifier.gatewayapi.resources import Resources, load_resources
from verifier.xds.snapshot import Snapshot

CHECK = (sys.executable, "-m", "verifier.cli", "check")
FLAGS = ("--fail-on", "warning", "--format", "json")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, dict[str, object]]]:
    """``edge-verify check DIR --fail-on warning --format json`` in a process of its
    own, as a user runs it, for each mistake at once."""
    root = tmp_path_factory.mktemp("mistakes")
    procs = {
        name: subprocess.Popen(
            [*CHECK, str(write(root / name, **MISTAKES[name].values)), *FLAGS],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ISSUE
    }
    done = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert "Traceback" not in err, err
        done[name] = (proc.returncode, json.loads(out) if out else {"err": err})
    return done


@pytest.mark.parametrize("mistake", ISSUE)
def test_a_users_mistake_is_an_error_at_its_line(
    mistake: str,
    installed: dict[str, tuple[int, dict[str, object]]],
    tmp_path: Path,
    cli: CLI,  # noqa: F811
) -> None:
    made = MISTAKES[mistake]
    rc, doc = installed[mistake]
    assert rc == 1, doc
    findings = doc["findings"]
    assert isinstance(findings, list)
    (finding,) = findings
    file, _, line = finding["location"].rpartition(":")
    assert (finding["code"], finding["resource"]) == (made.code, "HTTPRoute shop/cart")
    assert int(line) == line_of(Path(file), made.line)
    assert made.fix in finding["message"]
    # The default --fail-on error fails too, and the text report leads with the line.
    folder = write(tmp_path / mistake, **made.values)
    r = cli("check", str(folder))
    assert r.rc == 1, r.err
    assert r.out.startswith(f"{folder / 'resources.yaml'}:{line}: error {made.code} ")


def test_the_scenario_without_mistakes_passes(tmp_path: Path, cli: CLI) -> None:  # noqa: F811
    r = cli("check", str(write(tmp_path / "shop")), "--fail-on", "warning")
    assert r.rc == 0, r.out


# ---------------------------------------------------------------- each other reason


def mistakes_in(tmp_path: Path, text: str, *, scope: frozenset[str] | None = None) -> list[Finding]:
    """The configuration rules' findings on the user's scenario plus ``text``."""
    folder = write(tmp_path / "in")
    (folder / "more.yaml").write_text(text, "utf-8")
    res: Resources = load_resources([str(folder)])
    res.scope = scope
    ctx = Context(res, Snapshot())
    return sorted(f for rule in CONFIGURATION for f in rule.check(ctx))


def text_at(f: Finding) -> str:
    """The text of the line ``f`` is at."""
    return Path(f.file).read_text("utf-8").splitlines()[f.line - 1].strip()


ROUTE = """\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: other, namespace: shop}}
spec:
  parentRefs:
  - {parent}
  rules:
  - {rule}
"""
TO_CART = "backendRefs: [{name: cart, port: 8080}]"
NO_BACKEND = "matches: [{path: {type: PathPrefix, value: /}}]"
EXTENSION = "{type: ExtensionRef, extensionRef: {group: x.io, kind: K, name: k}}"


def route(parent: str = "{name: web}", rule: str = TO_CART) -> str:
    return ROUTE.format(parent=parent, rule=rule)


CASES: dict[str, tuple[str, str, str, str]] = {
    # name: (more YAML, code, the line's text, in the message)
    "gateway-not-found": (route("{name: wbe}"), "EV901", "- {name: wbe}", "did you mean web?"),
    "listener-set-not-found": (
        route("{kind: ListenerSet, name: team}"),
        "EV901",
        "- {kind: ListenerSet, name: team}",
        "ListenerSet shop/team does not exist",
    ),
    "section-name": (
        route("{name: web, sectionName: htp}"),
        "EV901",
        "- {name: web, sectionName: htp}",
        "did you mean sectionName http?",
    ),
    "namespace-not-allowed": (
        route("{name: web}", NO_BACKEND).replace("namespace: shop", "namespace: other")
        + "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: other}\n",
        "EV901",  # the parentRef's namespace defaults to the route's: no Gateway there
        "- {name: web}",
        "did you mean shop/web?",
    ),
    "not-allowed-by-listeners": (
        route("{name: web, namespace: shop}", NO_BACKEND).replace(
            "namespace: shop}", "namespace: x}", 1
        )
        + "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n",
        "EV902",
        "- {name: web, namespace: shop}",
        "allowedRoutes from Same",
    ),
    "unsupported-value": (
        route(
            rule="filters: [{type: ExtensionRef, extensionRef: {group: x.io, kind: K, name: k}}]"
        ),
        "EV904",
        "- filters: [{type: ExtensionRef, extensionRef: {group: x.io, kind: K, name: k}}]",
        "filter ExtensionRef",
    ),
    "mirror-to-nothing": (
        route(
            rule="filters: [{type: RequestMirror, requestMirror: {backendRef: "
            "{name: carts, port: 8080}}}]"
        ),
        "EV905",
        "- filters: [{type: RequestMirror, requestMirror: {backendRef: "
        "{name: carts, port: 8080}}}]",
        "did you mean cart?",
    ),
    "invalid-kind": (
        route(rule="backendRefs: [{group: x.io, kind: Bucket, name: cart}]"),
        "EV907",
        "- backendRefs: [{group: x.io, kind: Bucket, name: cart}]",
        "x.io/Bucket",
    ),
    "all-weights-zero": (
        route(rule="backendRefs: [{name: cart, port: 8080, weight: 0}]"),
        "EV925",
        "- backendRefs: [{name: cart, port: 8080, weight: 0}]",
        "HTTPRoute shop/other rule 0",
    ),
    "ref-not-permitted": (
        route(rule="backendRefs: [{name: api, namespace: x, port: 80}]"),
        "EV908",
        "- backendRefs: [{name: api, namespace: x, port: 80}]",
        "ReferenceGrant in namespace x",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_route_reason_is_found_at_its_field(case: str, tmp_path: Path) -> None:
    text, code, line, said = CASES[case]
    (found,) = mistakes_in(tmp_path, text)
    assert (found.code, text_at(found)) == (code, line), found
    assert said in found.message, found.message


WSS = """\
apiVersion: v1
kind: Service
metadata: {name: tls-only, namespace: shop}
spec:
  ports:
  - {port: 8443, appProtocol: kubernetes.io/wss}
"""


def test_an_app_protocol_the_edge_cannot_speak(tmp_path: Path) -> None:
    text = route(rule="backendRefs: [{name: tls-only, port: 8443}]") + "---\n" + WSS
    (found,) = mistakes_in(tmp_path, text)
    assert found.code == "EV909" and "kubernetes.io/wss" in found.message


HTTPS = """\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: tls, namespace: shop}}
spec:
  gatewayClassName: aether
  listeners:
  - name: https
    protocol: HTTPS
    port: 443
    tls:
      certificateRefs:
      - {ref}
  - name: twin
    protocol: HTTP
    port: {port}
---
apiVersion: v1
kind: Secret
metadata: {{name: shop-tls, namespace: shop}}
type: kubernetes.io/tls
data: {{tls.crt: "", tls.key: ""}}
"""


def test_listener_certificate_refs_and_conflicts(tmp_path: Path) -> None:
    found = mistakes_in(tmp_path, HTTPS.format(ref="{name: shop-tsl}", port=443))
    assert [(f.code, f.resource, text_at(f)) for f in found] == [
        # the HTTP listener on the HTTPS listener's port: ProtocolConflict, both sides
        ("EV910", "Gateway shop/tls", "- name: https"),
        ("EV911", "Gateway shop/tls", "- {name: shop-tsl}"),
        ("EV910", "Gateway shop/tls", "- name: twin"),
    ]
    assert "did you mean shop-tls?" in found[1].message
    other = mistakes_in(tmp_path / "2", HTTPS.format(ref="{name: x, namespace: vault}", port=80))
    assert [(f.code, (f.actual or {}).get("reason")) for f in other] == [
        ("EV911", "RefNotPermitted")
    ]


LISTENER_SET = """\
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {{name: team, namespace: {namespace}}}
spec:
  parentRef: {{name: {parent}, namespace: shop}}
  listeners:
  - {{name: extra, protocol: HTTP, port: 8081}}
"""


def test_a_listener_set_that_is_not_accepted(tmp_path: Path) -> None:
    (refused,) = mistakes_in(tmp_path, LISTENER_SET.format(namespace="shop", parent="web"))
    assert (refused.code, refused.resource, text_at(refused)) == (
        "EV912",
        "ListenerSet shop/team",
        "parentRef: {name: web, namespace: shop}",
    )
    assert "allowedListeners" in refused.message
    (orphan,) = mistakes_in(tmp_path / "2", LISTENER_SET.format(namespace="shop", parent="wbe"))
    assert orphan.code == "EV912" and "did you mean web?" in orphan.message


def test_what_a_namespace_limited_read_cannot_know_is_not_judged(tmp_path: Path) -> None:
    """A cluster read with --namespace shop cannot show that a Gateway, Service or
    ReferenceGrant in another namespace is missing: nothing is said about those."""
    text = (
        route("{name: edge, namespace: infra}")
        + "---\n"
        + route(rule="backendRefs: [{name: api, namespace: x, port: 80}]").replace(
            "name: other", "name: third"
        )
    )
    assert [f.code for f in mistakes_in(tmp_path, text)] == ["EV901", "EV908"]
    assert mistakes_in(tmp_path / "2", text, scope=frozenset({"shop"})) == []


# ---------------------------------------------------------------- declared findings


def suite_with(tmp_path: Path, scenario: str, edit: Callable[[list[str]], list[str]]) -> Path:
    """``base`` and ``scenario`` copied as a suite, its expected-findings.yaml edited."""
    root = tmp_path / "suite"
    shutil.copytree(BASE, root / "base")
    shutil.copytree(FIXTURES / scenario, root / scenario)
    declared = root / scenario / "expected-findings.yaml"
    declared.write_text("\n".join(edit(declared.read_text("utf-8").splitlines())) + "\n")
    return root


def checked(root: Path) -> pipeline.ScenarioResult:
    from verifier.rules import RULES

    (scn,) = pipeline.discover([str(root)], pipeline.CheckOptions())
    return pipeline.check_scenario(scn, pipeline.CheckOptions(), RULES)


def test_declared_findings_pass_and_a_missing_or_extra_one_fails(tmp_path: Path) -> None:
    scenario = "httproute-status-backend-not-found"
    exact = checked(suite_with(tmp_path / "a", scenario, lambda lines: lines))
    assert (exact.findings, exact.input_errors, len(exact.expected)) == ([], [], 2)
    # One declaration dropped: that finding is reported as found.
    extra = checked(suite_with(tmp_path / "b", scenario, lambda lines: lines[:-1]))
    assert [f.code for f in extra.findings] == ["EV905"] and extra.input_errors == []
    # One declared that is not found: an input error at its line, the extras beside it.
    moved = checked(
        suite_with(tmp_path / "c", scenario, lambda ls: [*ls[:-1], ls[-1].replace("38", "39")])
    )
    assert [(e.code, e.line) for e in moved.input_errors] == [
        ("expected-finding", 4),
        ("unexpected-finding", 38),
    ]
    assert moved.findings == []


def test_a_malformed_declaration_is_bad_input(tmp_path: Path) -> None:
    scenario = "httproute-status-backend-not-found"
    root = suite_with(tmp_path, scenario, lambda ls: [*ls, "- {code: EV905, file: x.yaml}"])
    (error,) = checked(root).input_errors
    assert (error.line, error.field, error.code) == (5, "[2].line", "type")


# ---------------------------------------------------------------- the loader; the fuzzer


def test_a_mistyped_field_names_the_one_meant(tmp_path: Path, cli: CLI) -> None:  # noqa: F811
    folder = write(tmp_path / "shop")
    path = folder / "resources.yaml"
    path.write_text(path.read_text("utf-8").replace("  - matches:", "  - matchs:"), "utf-8")
    with pytest.raises(InputErrors) as raised:
        load_resources([str(folder)])
    (error,) = raised.value.errors
    assert (error.field, error.code) == ("spec.rules[0].matchs", "unknown-field")
    assert error.message.endswith("did you mean 'matches'?")
    assert cli("check", str(folder)).rc == 2


def test_a_mistyped_field_of_a_service_or_deployment_names_the_one_meant(
    tmp_path: Path,
    cli: CLI,  # noqa: F811
) -> None:
    """Issue 31's second trial: ``selecter``, ``targetport`` and ``replica`` passed check
    (the Service then selected nothing, and ``run`` blamed Envoy a minute later). The
    API server refuses them; so does check, each at its line, naming the field meant."""
    folder = write(tmp_path / "shop")
    path = folder / "resources.yaml"
    text = path.read_text("utf-8").replace("  replicas: 1", "  replica: 1", 1)
    text = text.replace("  selector: {app: cart-canary}", "  selecter: {app: cart-canary}")
    head, _, tail = text.rpartition("targetPort: 3000")
    path.write_text(f"{head}targetport: 3000{tail}", "utf-8")
    r = cli("check", str(folder))
    assert r.rc == 2, r.err
    typos = (
        ("  replica: 1", "spec.replica", "replicas"),
        ("  selecter: {app: cart-canary}", "spec.selecter", "selector"),
        ("  - {port: 8080, targetport: 3000}", "spec.ports[0].targetport", "targetPort"),
    )
    for line, field, meant in typos:
        where = f"{path}:{line_of(path, line)}: {field}: unknown field "
        (error,) = [e for e in r.err.splitlines() if e.startswith(where)]
        assert error.endswith(f"did you mean {meant!r}? [unknown-field]"), error
    assert "3 input errors" in r.err


@pytest.mark.parametrize("fmt", ["json", "junit", "sarif"])
def test_a_machine_report_of_bad_input_carries_the_errors(
    fmt: str,
    tmp_path: Path,
    cli: CLI,  # noqa: F811
) -> None:
    """check --format json|junit|sarif -o FILE on bad input wrote nothing (a CI step
    uploading the SARIF got no file). It writes the report, exit 2, with each input
    error at its line, and never a report that looks clean."""
    folder = write(tmp_path / "shop")
    path = folder / "resources.yaml"
    typo = "  selecter: {app: cart-canary}"
    path.write_text(path.read_text("utf-8").replace("  selector: {app: cart-canary}", typo))
    line = line_of(path, typo)
    report = tmp_path / f"report.{fmt}"
    r = cli("check", str(folder), "--format", fmt, "-o", str(report))
    assert r.rc == 2, r.err
    text = report.read_text("utf-8")
    if fmt == "json":
        doc = json.loads(text)
        (error,) = doc["input_errors"]
        assert (error["location"], error["field"], error["code"], error["scenario"]) == (
            f"{path}:{line}",
            "spec.selecter",
            "unknown-field",
            "shop",
        )
        assert doc["summary"]["input_errors"] == 1
    elif fmt == "sarif":  # run's SARIF likewise: bad input stops it before the live pass
        ran = tmp_path / "run.sarif"
        assert cli("run", str(folder), "--format", fmt, "-o", str(ran)).rc == 2
        for sarif in (text, ran.read_text("utf-8")):
            (invocation,) = json.loads(sarif)["runs"][0]["invocations"]
            assert (invocation["executionSuccessful"], invocation["exitCode"]) == (False, 2)
            (note,) = invocation["toolExecutionNotifications"]
            assert (note["level"], note["descriptor"]["id"]) == ("error", "unknown-field")
            (where,) = note["locations"]
            assert where["physicalLocation"]["region"]["startLine"] == line
    else:
        suites = ET.fromstring(text)
        (suite,) = suites
        assert (suite.get("name"), suite.get("failures")) == ("shop", "1")
        (failure,) = suite.iter("failure")
        assert failure.get("type") == "input-error"
        assert failure.text and failure.text.startswith(f"{path}:{line}: spec.selecter: ")
        assert failure.text.endswith("[unknown-field]")


def test_a_fuzzer_fixture_declares_its_worlds_mistakes(tmp_path: Path, cli: CLI) -> None:  # noqa: F811
    """Drawn worlds hold invalid backendRefs on purpose: the written fixture declares
    the finding, so it passes check with a correct translator, as it must."""
    failure = Failure("models-agree", "a summary", one_route("svc-missing"))
    folder = write_found(tmp_path / "out", failure, "found-1", "a note")
    declared = yaml.safe_load((folder / "expected-findings.yaml").read_text("utf-8"))
    assert [(d["code"], d["file"], d["resource"]) for d in declared] == [
        ("EV905", "resources.yaml", "HTTPRoute ns-a/r0")
    ]
    r = cli("check", str(tmp_path / "out"))
    assert r.rc == 0, r.out
