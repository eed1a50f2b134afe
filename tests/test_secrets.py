"""Key material never reaches anything the tool prints or writes for people.

Listener certificates travel to Envoy over SDS, named from the listener, as in
production; the config_dump ``translate`` writes, the golden files, every report
and every error show a key as ``[redacted]``, as Envoy's admin endpoint does.
These tests run every command on every fixture and grep what comes out for any
of the fixtures' private keys.
"""

from __future__ import annotations

import base64
import json
import stat
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml
from conftest import BASE, FIXTURES, rel, translate_scenario
from test_check_cli import CLI, cli  # noqa: F401

from verifier import pipeline
from verifier.live.bootstrap import BootstrapError, listener_secrets, local_bootstrap
from verifier.xds.codec import to_json_dict
from verifier.xds.snapshot import (
    REDACTED,
    Snapshot,
    bootstrap_for_validation,
    dumps,
    load_path,
    redacted,
)

if TYPE_CHECKING:
    from verifier.registry import Rule

SCENARIOS = sorted(p for p in FIXTURES.iterdir() if p.is_dir() and p != BASE)
HTTPS = FIXTURES / "gateway-https-listener"
CLIENT_CERTS = FIXTURES / "gateway-frontend-client-certificate-validation"


def _pem_keys() -> Iterator[str]:
    """Every private key the fixtures hold: Secret data, stringData and ``*.key`` files."""
    for path in sorted(FIXTURES.rglob("*")):
        if path.suffix == ".key":
            yield path.read_text(encoding="utf-8")
        elif path.suffix == ".yaml" and path.parent.name != "invalid-yaml-syntax":
            for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
                if not isinstance(doc, dict) or doc.get("kind") != "Secret":
                    continue
                for section, decode in (("data", True), ("stringData", False)):
                    value = (doc.get(section) or {}).get("tls.key")
                    if isinstance(value, str):
                        yield base64.b64decode(value).decode() if decode else value


def _markers() -> set[str]:
    """Strings that only key material contains: the PEM armour, and for each key a
    line of its body and the start of its base64 (how a Secret's ``data`` holds it)."""
    found = {"PRIVATE KEY"}
    for pem in _pem_keys():
        body = [ln for ln in pem.splitlines() if ln and not ln.startswith("-----")]
        found.add(body[1])
        found.add(base64.b64encode(pem.encode()).decode()[40:100])
    return found


MARKERS = _markers()


def assert_no_key(text: str, what: str) -> None:
    leaked = sorted(m[:20] for m in MARKERS if m in text)
    assert not leaked, f"{what} carries key material: {leaked}"


def test_the_markers_find_keys() -> None:
    """The grep below would see a key: fixtures have several, and the old inline form shows."""
    assert len(MARKERS) > 5
    snap = translate_scenario(HTTPS)
    raw = json.dumps([to_json_dict(s) for s in snap.secrets])
    with pytest.raises(AssertionError, match="carries key material"):
        assert_no_key(raw, "the unredacted secrets")


def test_listeners_name_their_certificates_and_the_key_travels_by_sds() -> None:
    snap = translate_scenario(HTTPS)
    listeners = json.dumps([to_json_dict(li) for li in snap.listeners])
    assert_no_key(listeners, "a listener")
    assert "tls_certificate_sds_secret_configs" in listeners
    names = {s.name for s in snap.secrets}
    assert names and all("/" in n for n in names), names
    for name in names:
        assert json.dumps(name) in listeners


def test_every_written_form_is_redacted_like_envoys_admin() -> None:
    snap = translate_scenario(HTTPS)
    dump = json.loads(dumps(snap))
    secrets = next(c for c in dump["configs"] if c["@type"].endswith("SecretsConfigDump"))
    entry = secrets["dynamic_active_secrets"][0]
    tls = entry["secret"]["tls_certificate"]
    assert tls["private_key"] == {"inline_string": REDACTED}
    assert "BEGIN CERTIFICATE" in tls["certificate_chain"]["inline_string"]  # not secret
    assert redacted({"keys": [{"inline_bytes": "a2V5"}]}) == {
        "keys": [{"inline_bytes": base64.b64encode(REDACTED.encode()).decode()}]
    }
    # A redacted dump still reads back (the models need the certificate, never the key).
    back, _ = load_path_text(dumps(snap))
    assert {s.name for s in back.secrets} == {s.name for s in snap.secrets}


def _key_forms(tmp: Path) -> dict[str, str]:
    """One private key of each structure (PKCS#8, SEC1, PKCS#1, encrypted PKCS#8) in
    each form JSON can carry it: PEM text, base64 (either alphabet) of PEM and of DER,
    DER base64 wrapped after some words, hex of DER."""
    import subprocess

    pems = {"pkcs8": (CLIENT_CERTS / "client-a.key").read_text(encoding="utf-8")}
    made = {
        "sec1": ["ecparam", "-genkey", "-name", "prime256v1", "-noout"],
        "pkcs1": ["genrsa", "-traditional", "512"],
    }
    for name, args in made.items():
        pems[name] = subprocess.run(["openssl", *args], capture_output=True, check=True,
                                    text=True, timeout=30).stdout  # fmt: skip
    pems["encrypted"] = subprocess.run(
        ["openssl", "pkcs8", "-topk8", "-v2", "aes256", "-passout", "pass:x"],
        input=pems["sec1"], capture_output=True, check=True, text=True, timeout=30,
    ).stdout  # fmt: skip
    forms = {}
    for name, pem in pems.items():
        body = "".join(ln for ln in pem.splitlines() if not ln.startswith("-----"))
        der = base64.b64decode(body)
        forms[f"{name}-pem"] = pem
        forms[f"{name}-b64-pem"] = base64.b64encode(pem.encode()).decode()
        forms[f"{name}-b64url-pem"] = base64.urlsafe_b64encode(pem.encode()).decode().rstrip("=")
        forms[f"{name}-b64-der"] = base64.b64encode(der).decode()
        forms[f"{name}-wrapped"] = "the key " + "\n".join(
            body[i : i + 64] for i in range(0, len(body), 64)
        )
        forms[f"{name}-hex-der"] = der.hex()
    return forms


def test_a_key_is_redacted_by_content_wherever_it_sits(tmp_path: Path) -> None:
    """Issue 34: a peer's dump carried keys where no field table looks (cluster metadata,
    an unknown field beside a DataSource's, ``private_key`` as a plain string); each
    form of each kind of key is found there, and certificates are kept."""
    from verifier.secrets import holds_key, redact_text

    cert = (CLIENT_CERTS / "client-a.crt").read_text(encoding="utf-8")
    cert_der = base64.b64encode(base64.b64decode("".join(cert.splitlines()[1:-1]))).decode()
    for cert_form in (cert, base64.b64encode(cert.encode()).decode(), cert_der):
        assert not holds_key(cert_form)
    for name, key in _key_forms(tmp_path).items():
        assert holds_key(key), name
        doc = {
            "metadata": {"filter_metadata": {"peer": {"k": key}}},
            "tls_certificate": {"private_key": key, "certificate_chain": {"inline_string": cert}},
            "secret": {"private_key": {"inline_string": "x", "extra": key}},
            key: "a key as an object's key",
        }
        out = json.dumps(redacted(doc))
        assert not holds_key(out), name
        assert cert.splitlines()[1] in out  # the certificate stays
        assert REDACTED in redact_text(f"error: {key} was refused") and not holds_key(
            redact_text(f"error: {key} was refused")
        ), name


def load_path_text(text: str) -> tuple[Snapshot, object]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dump.json"
        path.write_text(text, encoding="utf-8")
        return load_path(path)


def test_goldens_carry_no_key() -> None:
    for golden in sorted(FIXTURES.glob("*/xds.*.golden.json")):
        assert_no_key(golden.read_text(encoding="utf-8"), str(golden))


def test_validate_mode_judges_the_certificate_a_redacted_dump_cannot_show() -> None:
    """``--mode validate`` never reads SDS, so the translator's certificates are inlined
    into its bootstrap (a bad key is caught); a dump's redacted ones stay references."""
    snap = translate_scenario(HTTPS)
    inlined = json.dumps(bootstrap_for_validation(snap))
    assert "tls_certificates" in inlined and "tls_certificate_sds_secret_configs" not in inlined
    back, _ = load_path_text(dumps(snap))
    kept = json.dumps(bootstrap_for_validation(back))
    assert "tls_certificate_sds_secret_configs" in kept
    assert_no_key(kept, "the bootstrap of a redacted dump")


def test_the_live_harness_writes_keys_only_to_private_files(tmp_path: Path) -> None:
    snap = translate_scenario(HTTPS)
    served = listener_secrets(snap)
    boot = local_bootstrap(snap, {}, {}, ("127.0.0.1", 53), served, tmp_path)
    assert_no_key(json.dumps(boot.config), "the live bootstrap")
    files = sorted(tmp_path.glob("sds-*.json"))
    assert files and all("PRIVATE KEY" in f.read_text() for f in files)
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    back, _ = load_path_text(dumps(snap))
    with pytest.raises(BootstrapError, match="redacted"):
        listener_secrets(back)


def test_secret_values_are_not_quoted_in_errors(tmp_path: Path, cli: CLI) -> None:  # noqa: F811
    """A tls.key of the wrong type is reported without echoing its first characters."""
    docs = list(yaml.safe_load_all((HTTPS / "resources.yaml").read_text(encoding="utf-8")))
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "Secret":
            doc["data"]["tls.key"] = [doc["data"]["tls.key"]]
            doc["data"]["tls.crt"] = {"nested": doc["data"]["tls.key"][0]}
    (tmp_path / "resources.yaml").write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    for command in ("check", "translate", "status"):
        r = cli(command, rel(BASE), str(tmp_path))
        lines = r.error_lines()
        assert any("data.tls.key" in ln for ln in lines), lines
        assert_no_key(r.out + r.err, f"{command}'s errors")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.name)
def test_no_command_prints_a_key(scenario: Path, cli: CLI, tmp_path: Path) -> None:  # noqa: F811
    args = [rel(BASE), rel(scenario)]
    outputs = [cli("translate", *args), cli("status", *args, "--format", "yaml")]
    written = tmp_path / "xds.json"
    outputs.append(cli("translate", *args, "-o", str(written)))
    for run in outputs:
        assert_no_key(run.out + run.err, f"{scenario.name}: {run}")
    if written.exists():
        assert_no_key(written.read_text(encoding="utf-8"), f"{scenario.name}: translate -o")


Checked = dict[str, list[pipeline.ScenarioResult]]


@pytest.fixture(scope="module")
def checked() -> Checked:
    """``pipeline.check_all``'s results by its arguments, for this module's runs."""
    return {}


@pytest.fixture
def check_once(monkeypatch: pytest.MonkeyPatch, checked: Checked) -> None:
    """``check`` renders every format from one list of results (``cli.cmd_check``), so
    the formats of one input need those results once: the first run computes them, the
    others render the same ones. Everything after ``check_all`` runs every time."""
    check_all = pipeline.check_all

    def once(
        paths: Sequence[str],
        opts: pipeline.CheckOptions,
        rules: Sequence[Rule],
        progress: Callable[[int, int, pipeline.ScenarioResult], None] | None = None,
    ) -> list[pipeline.ScenarioResult]:
        key = repr((list(paths), opts, [r.name for r in rules]))
        if key not in checked:
            checked[key] = check_all(paths, opts, rules, progress)
        elif progress is not None:
            for i, result in enumerate(checked[key]):
                progress(i + 1, len(checked[key]), result)
        return checked[key]

    monkeypatch.setattr(pipeline, "check_all", once)


@pytest.mark.parametrize("fmt", ["text", "json", "sarif"])
def test_check_reports_carry_no_key(
    fmt: str,
    cli: CLI,  # noqa: F811
    check_once: None,
) -> None:
    r = cli("check", "fixtures/", "--format", fmt)
    assert r.rc == 0, r.err
    assert_no_key(r.out + r.err, f"check --format {fmt}")


def test_reports_on_foreign_xds_with_inline_keys_carry_no_key(
    cli: CLI,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Another translator may inline keys in its listeners; explain and check still
    print none of them, and mutate (which rewrites listeners) neither."""
    snap = translate_scenario(CLIENT_CERTS)
    doc = json.loads(dumps(snap))
    secrets = {s.name: to_json_dict(s)["tls_certificate"] for s in snap.secrets}

    def inline(node: object) -> None:
        if isinstance(node, dict):
            refs = node.pop("tls_certificate_sds_secret_configs", None)
            if refs:
                node["tls_certificates"] = [secrets[r["name"]] for r in refs]
            for value in node.values():
                inline(value)
        elif isinstance(node, list):
            for value in node:
                inline(value)

    inline(doc)
    doc["configs"] = [c for c in doc["configs"] if "Secrets" not in c["@type"]]
    xds = tmp_path / "foreign.json"
    xds.write_text(json.dumps(doc), encoding="utf-8")
    assert "PRIVATE KEY" in xds.read_text()
    args = [rel(BASE), rel(CLIENT_CERTS), "--xds", str(xds)]
    cases = rel(CLIENT_CERTS / "cases.yaml")
    runs = [
        cli("check", *args, "--format", "json"),
        cli("explain", *args, "--cases", cases, "--format", "json"),
        cli(
            "explain",
            *args,
            "--request",
            "GET https://secure.example.com:8451/",
            "--gateway",
            "edge-infra/client-validation",
        ),
        cli("mutate", *args, "--format", "json"),
    ]
    for run in runs:
        assert run.rc in (0, 1), run.err
        assert_no_key(run.out + run.err, f"{run}")
