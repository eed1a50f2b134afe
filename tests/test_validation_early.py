"""Envoy's validate on the file as written (``verifier.xds.validation``) judges what
the decoded snapshot's bootstrap would have.

``check --xds FILE`` asks Envoy about the user's own JSON from its first instant,
before envoy-data-plane is imported. That is only right if the bootstrap made from
the JSON as written is the one made from the decoded snapshot: compared here as
Bootstrap messages, field by field, for every fixture's xDS (redacted secrets), the
same resources unredacted (certificates inlined), their foreign re-encoding, and
both again in camelCase. Then Envoy gives both the same verdict, and ``check`` uses
the early one.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import BASE, FIXTURES, REPO_ROOT, translate_scenario
from foreign import reencode
from test_check_cli import CLI, cli  # noqa: F401
from test_rules_xds import REJECTED
from verifier.rules import envoy_accepts_config

from verifier.gatewayapi.resources import load_resources
from verifier.xds import layout, validation
from verifier.xds.codec import from_json_dict, to_json_dict, type_url_of
from verifier.xds.snapshot import (
    KINDS,
    Snapshot,
    _message_class,
    bootstrap_for_validation,
    envoy_validate,
    find_envoy,
    load_path,
    to_config_dump,
)

SCENARIOS = sorted(p.name for p in FIXTURES.iterdir() if (p / "xds.routes.golden.json").is_file())
TLS = [name for name in SCENARIOS if (FIXTURES / name / "xds.secrets.golden.json").is_file()]
needs_envoy = pytest.mark.skipif(find_envoy() is None, reason="no envoy binary")


def _bootstrap(doc: dict[str, Any]) -> Any:
    from envoy_data_plane.envoy.config.bootstrap.v3 import Bootstrap

    msg, notes = from_json_dict(Bootstrap, doc)
    assert notes == []
    return msg


def _camel(doc: Any) -> Any:
    """Every field name in camelCase, as proto3 JSON writes it by default."""
    if isinstance(doc, list):
        return [_camel(v) for v in doc]
    if isinstance(doc, dict):
        return {k if k.startswith("@") else layout.camel(k): _camel(v) for k, v in doc.items()}
    return doc


def _unredacted(snap: Snapshot) -> list[dict[str, Any]]:
    """A list of resources, secrets' keys included (as a translator would print them)."""
    return [
        to_json_dict(m, with_type=True) for kind in (*KINDS, "secrets") for m in getattr(snap, kind)
    ]


def _same_bootstrap(path: Path) -> Any:
    snap, notes = load_path(path)
    assert notes == []  # what the loader skips, Envoy would still read: not comparable
    decoded = _bootstrap(bootstrap_for_validation(snap))
    as_written = _bootstrap(validation.static_bootstrap(validation.raw_resources(path)))
    assert as_written == decoded
    return as_written


def test_the_type_urls_are_the_message_classes() -> None:
    assert {type_url_of(_message_class(url)): kind for url, kind in layout.KIND_OF.items()} == (
        layout.KIND_OF
    )


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_fixture_gives_the_same_bootstrap_both_ways(name: str, tmp_path: Path) -> None:
    _same_bootstrap(FIXTURES / name)
    snap, _ = load_path(FIXTURES / name)
    res = load_resources([str(BASE), str(FIXTURES / name)])
    foreign = to_config_dump(reencode(snap, res))
    for label, doc in (("foreign", foreign), ("camel", _camel(to_config_dump(snap)))):
        path = tmp_path / f"{label}.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        _same_bootstrap(path)
    camel_foreign = tmp_path / "camel-foreign.json"
    camel_foreign.write_text(json.dumps(_camel(foreign)), encoding="utf-8")
    _same_bootstrap(camel_foreign)


@pytest.mark.parametrize("name", TLS)
@pytest.mark.parametrize("casing", ["snake", "camel"])
def test_certificates_are_inlined_both_ways(name: str, casing: str, tmp_path: Path) -> None:
    doc: Any = _unredacted(translate_scenario(FIXTURES / name))
    path = tmp_path / "resources.json"
    path.write_text(json.dumps(_camel(doc) if casing == "camel" else doc), encoding="utf-8")
    boot = _same_bootstrap(path)
    chains = [c for li in boot.static_resources.listeners for c in li.filter_chains]
    assert any(c.transport_socket is not None for c in chains)
    assert "tls_certificates" in json.dumps(
        validation.static_bootstrap(validation.raw_resources(path))
    )


def test_a_missing_route_config_is_the_same_rejection(tmp_path: Path) -> None:
    doc = to_config_dump(translate_scenario(FIXTURES / "httproute-simple-same-namespace"))
    for config in doc["configs"]:
        config.pop("dynamic_route_configs", None)
    path = tmp_path / "xds.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    snap, _ = load_path(path)
    with pytest.raises(ValueError) as decoded:
        bootstrap_for_validation(snap)
    with pytest.raises(ValueError) as as_written:
        validation.static_bootstrap(validation.raw_resources(path))
    assert str(as_written.value) == str(decoded.value)


@needs_envoy
@pytest.mark.parametrize("case", ["accepted", *sorted(REJECTED)])
def test_envoy_gives_the_same_verdict_both_ways(case: str, tmp_path: Path) -> None:
    if case == "accepted":
        snap = translate_scenario(FIXTURES / "gateway-https-listener")
    else:
        snap = REJECTED[case]()
    path = tmp_path / "resources.json"
    path.write_text(json.dumps(_unredacted(snap)), encoding="utf-8")
    ok, output = envoy_validate(snap)
    early_ok, early_output = validation.validate_resources(validation.raw_resources(path))
    assert early_ok == ok == (case == "accepted")
    if not ok:
        error = envoy_accepts_config.envoy_error
        assert error(early_output) == error(output)


@needs_envoy
@pytest.mark.parametrize("source", ["file", "stdin"])
def test_check_xds_reports_the_early_verdict(
    cli: CLI,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    source: str,
) -> None:
    """The rule reads the answer about the file (or standard input, read at the start
    for it): asking about the snapshot would fail."""
    monkeypatch.chdir(REPO_ROOT)
    path = tmp_path / "xds.json"
    path.write_text(json.dumps(_unredacted(REJECTED["EV601"]())), encoding="utf-8")
    given, location = str(path), f"{path}:1"
    if source == "stdin":
        stdin = io.TextIOWrapper(io.BytesIO(path.read_bytes()), encoding="utf-8")
        monkeypatch.setattr(sys, "stdin", stdin)
        given, location = "-", "<stdin>:1"

    def not_asked(_snap: Snapshot) -> tuple[bool, str]:
        raise AssertionError("the snapshot was validated again")

    monkeypatch.setattr(envoy_accepts_config, "envoy_validate", not_asked)
    done = cli(
        "check",
        str(BASE),
        str(FIXTURES / "httproute-mesh-backend"),
        "--xds",
        given,
        "--format",
        "json",
    )
    found = [f for f in json.loads(done.out)["findings"] if f["code"] == "EV101"]
    assert done.rc == 1
    assert len(found) == 1 and "RE2 program size" in found[0]["message"]
    assert found[0]["location"] == location  # the file Envoy was asked about
    assert validation._early == {} and validation._adopted == {}  # nothing left running


def test_a_stream_is_read_by_the_check_alone(tmp_path: Path) -> None:
    """``--xds /dev/stdin``: an early child reading it would leave nothing for the check."""
    import subprocess
    import sys

    xds = to_config_dump(translate_scenario(FIXTURES / "httproute-simple-same-namespace"))
    done = subprocess.run(
        [sys.executable, "-m", "verifier.cli", "check", str(BASE),
         str(FIXTURES / "httproute-simple-same-namespace"), "--xds", "/dev/stdin",
         "--format", "json"],
        input=json.dumps(xds), capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)["summary"]
    assert summary["errors"] == 0 and summary["rules_run"] > 40


@needs_envoy
@pytest.mark.parametrize("fmt", ["text", "json", "sarif"])
def test_a_parse_error_quotes_no_key(
    cli: CLI,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fmt: str,
) -> None:
    """Envoy quotes the whole bootstrap it could not parse, and the listeners' keys are
    inlined in it (a fresh-clone trial found the key in EV101): only the reason stays."""
    monkeypatch.chdir(REPO_ROOT)
    scenario = FIXTURES / "gateway-https-listener"
    doc = _unredacted(translate_scenario(scenario))
    assert "PRIVATE KEY" in json.dumps(doc)  # the file does hold the key
    next(d for d in doc if d["@type"] == layout.CLUSTER_TYPE)["connect_timeout"] = "5 seconds"
    path = tmp_path / "xds.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    done = cli("check", str(BASE), str(scenario), "--xds", str(path), "--format", fmt)
    assert done.rc == 1
    assert "connect_timeout" in done.out and "duration" in done.out  # Envoy's reason
    assert "PRIVATE KEY" not in done.out + done.err
    if fmt != "sarif":  # SARIF also carries every rule's documentation
        assert "dns_lookup_family" not in done.out and len(done.out) < 20_000  # no echo


def test_keys_are_cut_from_any_envoy_output() -> None:
    pem = "-----BEGIN EC PRIVATE KEY-----\\nMHcCAQEE\\n-----END EC PRIVATE KEY-----"
    assert validation.without_secrets(f'bytes: "{pem}" rest') == 'bytes: "[redacted]" rest'
    assert validation.without_secrets("cut: -----BEGIN PRIVATE KEY-----\nMIIE") == "cut: [redacted]"
    echoed = 'Unable to parse JSON as proto (INVALID_ARGUMENT: bad (offset 3): x): {\n "a": 1\n}'
    assert validation.without_secrets(echoed) == (
        "Unable to parse JSON as proto (INVALID_ARGUMENT: bad (offset 3): x)"
    )
