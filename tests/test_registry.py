"""Meta-tests: the rule registry and the message catalogue stay consistent."""

from __future__ import annotations

import ast
from pathlib import Path

from verifier.rules import RULES

from verifier.features import ALL, CORE, EXTENDED, NOT_CHECKED
from verifier.findings import catalogue, retired
from verifier.live.runner import LIVE_CODES

RULES_DIR = Path(__file__).resolve().parent.parent / "rules"


def test_names_and_codes_are_unique() -> None:
    names = [r.name for r in RULES]
    codes = [c for r in RULES for c in r.codes]
    assert len(names) == len(set(names))
    assert len(codes) == len(set(codes))


def test_every_rule_is_documented_with_why_and_example() -> None:
    for rule in RULES:
        assert rule.doc.strip(), rule.name
        assert "Why it matters" in rule.doc, rule.name
        assert "Example" in rule.doc, rule.name
        assert rule.spec_ref, rule.name


def test_features_are_the_specs_names() -> None:
    for rule in RULES:
        assert rule.features, rule.name
        for f in rule.features:
            assert f in ALL, f"{rule.name}: unknown feature {f}"


def test_every_gateway_http_feature_has_a_rule() -> None:
    covered = {f for r in RULES for f in r.features}
    missing = sorted((CORE | EXTENDED) - covered)
    # Features with no behaviour visible in xDS alone are listed here with why.
    no_xds_behaviour = {
        # Timeouts on a backend attempt are covered by httproute-timeouts under
        # HTTPRouteRequestTimeout; the backend feature has the same rule.
        "HTTPRouteBackendTimeout",
        # Mirrors: one rule owns single, multiple and percentage mirrors.
        "HTTPRouteRequestMultipleMirrors",
        "HTTPRouteRequestPercentageMirror",
        # Redirect status codes are owned by httproute-redirect-status-code.
        "HTTPRoute303RedirectStatusCode",
        "HTTPRoute307RedirectStatusCode",
        "HTTPRoute308RedirectStatusCode",
        # Port 8080 is just a port: listener-per-gateway-port covers it.
        "GatewayPort8080",
    }
    # The rest no rule judges; features.NOT_CHECKED says why, docs/rules.md lists them.
    assert [f for f in missing if f not in no_xds_behaviour | set(NOT_CHECKED)] == []


def test_unchecked_features_are_profile_features_with_a_reason() -> None:
    covered = {f for r in RULES for f in r.features}
    for feature, why in NOT_CHECKED.items():
        assert feature in EXTENDED, feature
        assert feature not in covered, f"{feature} has a rule now: drop it from NOT_CHECKED"
        assert len(why) > 20, feature


def test_every_catalogue_code_is_used_or_retired() -> None:
    used = {c for r in RULES for c in r.codes}
    live = set(LIVE_CODES)  # the live pass's three-way verdicts (verifier/live/runner.py)
    for code in catalogue():
        if code in live:
            continue
        assert code in used or code in retired(), f"{code} is neither used by a rule nor retired"
    for code in used:
        assert code in catalogue(), f"{code} is not in messages.yaml"


def test_rules_are_listed_explicitly_not_discovered() -> None:
    """Every rule module is in RULES, and RULES lists nothing else."""
    modules = {
        p.stem
        for p in RULES_DIR.glob("*.py")
        if not p.stem.startswith("_") and p.stem not in {"ownership"}
    }
    listed = {r.check.__module__.rsplit(".", 1)[-1] for r in RULES}
    # disagreement rules share one check function; use the module attribute instead
    tree = ast.parse((RULES_DIR / "__init__.py").read_text(encoding="utf-8"))
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert modules <= imported | {"__init__"}, sorted(modules - imported)
    assert listed  # at least one rule


NEW_PARAMETERS = {
    "code",
    "rule",
    "file",
    "line",
    "resource",
    "xds_path",
    "request",
    "expected",
    "actual",
    "related",
}
DISAGREEMENT_PARAMETERS = {"diff", "note"}


def _fields(template: str) -> set[str]:
    import string

    return {f for _, f, _, _ in string.Formatter().parse(template) if f}


def test_templates_can_be_filled() -> None:
    """A template field named like a parameter of findings.new can never be filled."""
    for code, msg in catalogue().items():
        assert not _fields(msg.template) & NEW_PARAMETERS, code


def test_disagreement_rules_templates_use_only_what_they_pass() -> None:
    from verifier.rules.support.disagreement import disagreement_rule

    disagreement = disagreement_rule.__code__  # the shared check passes diff and note only
    assert disagreement
    for rule in RULES:
        if rule.check.__qualname__.startswith("disagreement_rule"):
            for code in rule.codes:
                assert _fields(catalogue()[code].template) <= DISAGREEMENT_PARAMETERS, code
