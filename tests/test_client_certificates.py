"""Client certificates as inputs: PEM fingerprints and the cases.yaml field."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
from conftest import FIXTURES

from verifier.semantics.cases import CaseError, parse_case
from verifier.semantics.pem import fingerprints

PKI = FIXTURES / "gateway-frontend-client-certificate-validation"


def _case(client_cert: object) -> dict[str, object]:
    return {
        "name": "c",
        "gateway": {"namespace": "edge-infra", "name": "client-validation", "port": 8451},
        "request": {"scheme": "https", "host": "a.example.com", "client_cert": client_cert},
    }


@pytest.mark.parametrize("letter", ["a", "b", "rogue"])
def test_fingerprint_is_sha256_of_the_der_openssl_reads(letter: str) -> None:
    pem = PKI / f"client-ca-{letter}.crt"
    der = subprocess.run(
        ["openssl", "x509", "-in", str(pem), "-outform", "DER"], capture_output=True, check=True
    ).stdout
    assert fingerprints(pem.read_text()) == (hashlib.sha256(der).hexdigest(),)


def test_a_bundle_gives_each_certificate_and_skips_a_broken_block() -> None:
    a, b = ((PKI / f"client-ca-{x}.crt").read_text() for x in "ab")
    broken = "-----BEGIN CERTIFICATE-----\n%%%\n-----END CERTIFICATE-----\n"
    assert fingerprints(a + broken + b) == fingerprints(a) + fingerprints(b)
    assert fingerprints("no PEM here") == ()


def test_case_client_cert_names_its_issuer_and_files() -> None:
    case = parse_case(
        _case({"issuer": "client-ca-a.crt", "cert": "client-a.crt", "key": "client-a.key"}),
        0,
        base_dir=str(PKI),
    )
    cert = case.request.client_cert
    assert cert is not None
    assert (cert.issuer,) == fingerprints((PKI / "client-ca-a.crt").read_text())
    assert (
        Path(cert.cert_file) == PKI / "client-a.crt" and Path(cert.key_file) == PKI / "client-a.key"
    )


@pytest.mark.parametrize(
    ("client_cert", "field", "says"),
    [
        ({"cert": "client-a.crt", "key": "client-a.key"}, ".issuer", "required"),
        ({"issuer": "missing.crt"}, ".client_cert", "unreadable file"),
        ({"issuer": "client-a.key"}, ".issuer", "holds no PEM certificate"),
        ({"issuer": "client-ca-a.crt", "cert": "client-a.crt"}, ".client_cert", "go together"),
        ({"issuer": "client-ca-a.crt", "pem": "x"}, ".pem", "expected only"),
        ("client-a.crt", ".client_cert", "expected"),
    ],
)
def test_bad_client_cert_is_a_case_error(client_cert: object, field: str, says: str) -> None:
    with pytest.raises(CaseError) as err:
        parse_case(_case(client_cert), 0, base_dir=str(PKI))
    assert err.value.field.startswith("[0].request.client_cert")
    assert err.value.field.endswith(field) and says in err.value.message
