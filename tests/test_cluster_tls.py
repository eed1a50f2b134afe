"""--kubeconfig over https, as real clusters are reached: the kubeconfig's CA only,
``tls-server-name``, client certificates from the kubeconfig or from an exec plugin.

The kubeconfig and its credentials are read by the tool itself now
(verifier/gatewayapi/kubeconfig.py), so what kubectl does with each field is held
here against the stand-in API server over TLS (a throw-away CA made with openssl; the
server's certificate names only ``kube.test``, so the connection is verified only
when ``tls-server-name`` is honoured; a certificate the CA signed stands for the
token, as client certificates do on an API server).
"""

from __future__ import annotations

import base64
import io
import json
import ssl
import subprocess
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import BASE, FIXTURES
from k8s_standin import StandIn, fixture_objects, pod_object

from verifier.cli import main

SCENARIO = FIXTURES / "httproute-simple-same-namespace"


def _openssl(folder: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)


def _issue(folder: Path, name: str, ext: str) -> None:
    (folder / f"{name}.ext").write_text(ext)
    key, csr, crt = f"{name}.key", f"{name}.csr", f"{name}.crt"
    _openssl(folder, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", key, "-out", csr, "-subj", f"/CN={name}")  # fmt: skip
    _openssl(folder, "x509", "-req", "-in", csr, "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", crt, "-days", "1", "-extfile", f"{name}.ext")  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pki")
    _openssl(folder, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "1", "-subj", "/CN=test CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign")  # fmt: skip
    _issue(folder, "server", "subjectAltName=DNS:kube.test\nextendedKeyUsage=serverAuth\n")
    _issue(folder, "client", "extendedKeyUsage=clientAuth\n")
    return folder


@pytest.fixture(scope="module")
def server(pki: Path) -> Iterator[StandIn]:
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(pki / "server.crt", pki / "server.key")
    tls.load_verify_locations(pki / "ca.crt")
    tls.verify_mode = ssl.CERT_OPTIONAL  # a token, or a client certificate
    standin = StandIn(fixture_objects([BASE, SCENARIO]), tls=tls).start()
    yield standin
    standin.stop()


def _data(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _check(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> tuple[int, str]:
    path.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        code = main(["check", "--kubeconfig", str(path), "--cluster-timeout", "5"])
    return code, err.getvalue()


def test_the_kubeconfig_ca_and_server_name_verify_the_server(
    pki: Path, server: StandIn, tmp_path: Path
) -> None:
    cluster = {"server": server.url, "certificate-authority-data": _data(pki / "ca.crt")}
    token = {"token": "stand-in-token"}
    code, err = _check(tmp_path / "kc", {**cluster, "tls-server-name": "kube.test"}, token)
    assert code == 0, err
    # Without the name the certificate is not for 127.0.0.1; with another CA, not ours.
    code, err = _check(tmp_path / "kc", cluster, token)
    assert code == 2 and "[unreachable]" in err and "Traceback" not in err
    other = {"server": server.url, "certificate-authority-data": _data(pki / "client.crt")}
    code, err = _check(tmp_path / "kc", {**other, "tls-server-name": "kube.test"}, token)
    assert code == 2 and "[unreachable]" in err
    # insecure-skip-tls-verify, as kubectl: no check at all (and never with a CA).
    code, err = _check(
        tmp_path / "kc", {"server": server.url, "insecure-skip-tls-verify": True}, token
    )
    assert code == 0, err
    code, err = _check(tmp_path / "kc", {**cluster, "insecure-skip-tls-verify": True}, token)
    assert code == 2 and "insecure-skip-tls-verify" in err


def test_client_certificates_from_the_kubeconfig_and_from_an_exec_plugin(
    pki: Path, server: StandIn, tmp_path: Path
) -> None:
    cluster = {
        "server": server.url,
        "certificate-authority": str(pki / "ca.crt"),
        "tls-server-name": "kube.test",
    }
    files = {"client-certificate": str(pki / "client.crt"), "client-key": str(pki / "client.key")}
    code, err = _check(tmp_path / "kc", cluster, files)
    assert code == 0, err
    data = {
        "client-certificate-data": _data(pki / "client.crt"),
        "client-key-data": _data(pki / "client.key"),
    }
    code, err = _check(tmp_path / "kc", cluster, data)
    assert code == 0, err
    status = {
        "clientCertificateData": (pki / "client.crt").read_text(),
        "clientKeyData": (pki / "client.key").read_text(),
    }
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential"}
    (tmp_path / "credential.json").write_text(json.dumps({**credential, "status": status}))
    plugin = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": "cat",
        "args": [str(tmp_path / "credential.json")],
        "provideClusterInfo": True,
    }
    code, err = _check(tmp_path / "kc", cluster, {"exec": plugin})
    assert code == 0, err
    # The key is a credential: never quoted, even when it is not one the server takes.
    code, err = _check(tmp_path / "kc", {**cluster, "certificate-authority": str(pki / "ca.crt")},
                       {**data, "client-key-data": _data(pki / "server.key")})  # fmt: skip
    assert code == 2 and "PRIVATE KEY" not in err and _data(pki / "server.key")[:40] not in err


def test_kubeconfig_files_merge_as_kubectl_merges_them(tmp_path: Path) -> None:
    """``a:b``: the first file to name an entry wins, as does the first current-context;
    a file a stanza names is relative to the kubeconfig that holds that stanza."""
    from verifier.errors import InputErrors
    from verifier.gatewayapi.kubeconfig import endpoint

    first, second = tmp_path / "one" / "config", tmp_path / "two" / "config"
    first.parent.mkdir()
    second.parent.mkdir()
    (second.parent / "token").write_text("  from-the-file \n")
    first.write_text(
        yaml.safe_dump(
            {
                "current-context": "x",
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "clusters": [{"name": "c", "cluster": {"server": "http://first:1/"}}],
            }
        )
    )
    second.write_text(
        yaml.safe_dump(
            {
                "current-context": "y",
                "contexts": [{"name": "y", "context": {"cluster": "c", "user": "v"}}],
                "clusters": [{"name": "c", "cluster": {"server": "http://second:2"}}],
                "users": [{"name": "u", "user": {"tokenFile": "token"}}],
            }
        )
    )
    found = endpoint(f"{first}:{second}", None, 1.0, 1e18)
    assert (found.context, found.server) == ("x", "http://first:1")
    assert found.authorization == "Bearer from-the-file"
    with pytest.raises(InputErrors) as caught:
        endpoint(f"{first}:{second}", "y", 1.0, 1e18)  # user v is nowhere
    (error,) = caught.value.errors
    line = 1 + second.read_text().splitlines().index("    user: v")
    assert (error.file, error.field, error.line) == (str(second), "contexts[0].context.user", line)


def test_the_mesh_port_forward_upgrade_carries_the_kubeconfig_tls_and_certificate(
    pki: Path, tmp_path: Path
) -> None:
    """``live --mesh``'s WebSocket port-forward is made as the reads are: the kubeconfig's
    CA and ``tls-server-name``, its client certificate (here the only credential); the
    server's 403 on the upgrade is then the RBAC message, not an unreachable server."""
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(pki / "server.crt", pki / "server.key")
    tls.load_verify_locations(pki / "ca.crt")
    tls.verify_mode = ssl.CERT_OPTIONAL
    mesh = FIXTURES / "mesh-basic"
    pods = [
        pod_object(ns, "client-0", f"10.244.9.{i}", {"app": "client"})
        for i, ns in enumerate(("mesh-apps", "mesh-client", "edge-web"), 1)
    ]
    objects = [*fixture_objects([BASE, mesh]), *pods]
    standin = StandIn(objects, tls=tls, forbidden={"pods/portforward"}).start()
    try:
        cluster = {
            "server": standin.url,
            "certificate-authority-data": _data(pki / "ca.crt"),
            "tls-server-name": "kube.test",
        }
        user = {
            "client-certificate-data": _data(pki / "client.crt"),
            "client-key-data": _data(pki / "client.key"),
        }
        config = tmp_path / "kc"
        config.write_text(
            yaml.safe_dump(
                {
                    "clusters": [{"name": "c", "cluster": cluster}],
                    "users": [{"name": "u", "user": user}],
                    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "x",
                }
            )
        )
        err = io.StringIO()
        argv = ["live", "--kubeconfig", str(config), "--mesh", "--cases", str(mesh / "cases.yaml")]
        with redirect_stdout(io.StringIO()), redirect_stderr(err):
            code = main(argv)
        assert code == 2, err.getvalue()
        assert "'create' on pods/portforward" in err.getvalue() and "403" in err.getvalue()
        upgrades = {p for _, p, _ in standin.requests if p.endswith("/portforward")}
        spaces = ("mesh-apps", "mesh-client", "edge-web")  # each client's pod, asked once
        assert upgrades == {f"/api/v1/namespaces/{ns}/pods/client-0/portforward" for ns in spaces}
    finally:
        standin.stop()
