"""``edge-verify pull`` and ``--xds ads://`` against real servers.

The ADS side runs against our own ADS server (verifier/xds/ads.py) serving a translated
fixture, in a thread of its own so the command under test runs exactly as a user runs it
(``main``, its own event loop). The admin side runs against a real Envoy fed by that
server. Waits are bounded by hard timeouts only; no assertion is about time.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from ssl import Purpose, SSLContext, create_default_context

import pytest
from conftest import FIXTURES, translate_scenario
from envoy_data_plane.envoy.config.cluster.v3 import Cluster

from verifier.cli import main
from verifier.xds.ads import AdsServer
from verifier.xds.ads_client import PullError, PullOptions, pull, tls_context
from verifier.xds.codec import to_json_dict
from verifier.xds.snapshot import Snapshot, load_path, resource_name

KINDS = ("clusters", "endpoints", "listeners", "routes")
MODES = [pytest.param(False, id="sotw"), pytest.param(True, id="delta")]
FIXTURE_NAMES = ["httproute-header-matching", "gateway-https-listener"]
WAIT = 20.0


def same_resources(got: Snapshot, served: Snapshot) -> None:
    """Per type, the same resources; secrets by name (a written pull redacts keys)."""
    for kind in KINDS:
        mine = {resource_name(m): to_json_dict(m) for m in getattr(got, kind)}
        theirs = {resource_name(m): to_json_dict(m) for m in getattr(served, kind)}
        assert mine == theirs, kind
    assert {s.name for s in got.secrets} == {s.name for s in served.secrets}


@contextmanager
def serving(snap: Snapshot, ssl: SSLContext | None = None) -> Iterator[tuple[AdsServer, str]]:
    """Our ADS server on its own loop in a thread; yields it and HOST:PORT."""
    server = AdsServer(snap)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        host, port = asyncio.run_coroutine_threadsafe(server.start(ssl=ssl), loop).result(WAIT)
        yield server, f"{host}:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(WAIT)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT)
        loop.close()


@pytest.mark.parametrize("delta", MODES)
@pytest.mark.parametrize("fixture", FIXTURE_NAMES)
def test_pull_ads_writes_exactly_the_served_snapshot(
    tmp_path: Path, fixture: str, delta: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = translate_scenario(FIXTURES / fixture)
    out = tmp_path / "pulled.json"
    with serving(snap) as (server, where):
        argv = ["pull", "--ads", where, "--node-id", "edge", "--settle", "0.2", "-o", str(out)]
        assert main([*argv, *(["--delta"] if delta else [])]) == 0, capsys.readouterr().err
    pulled, skipped = load_path(out)
    assert not skipped
    same_resources(pulled, snap)
    assert not server.nacks and server.answers, "every response was ACKed"
    if fixture == "gateway-https-listener":
        assert pulled.secrets, "the listener certificates came over SDS"
        assert "PRIVATE KEY-----" not in out.read_text(), "keys are redacted"


def _pki(tmp: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1 (an IP SAN, as a client
    checking the address it dialled needs)."""
    ca_key, ca, key, csr, cert = (tmp / n for n in ("ca.key", "ca.crt", "s.key", "s.csr", "s.crt"))
    ext = tmp / "s.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\n", encoding="utf-8")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=WAIT)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca),
        "-subj", "/CN=throwaway-ca", "-days", "2")  # fmt: skip
    run("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
        "-subj", "/CN=ads")  # fmt: skip
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-out", str(cert), "-days", "2", "-extfile", str(ext))  # fmt: skip
    return ca, cert, key


@pytest.mark.parametrize("delta", MODES)
def test_pull_ads_over_tls(tmp_path: Path, delta: bool) -> None:
    ca, cert, key = _pki(tmp_path)
    server_ctx = create_default_context(Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    server_ctx.set_alpn_protocols(["h2"])
    snap = translate_scenario(FIXTURES / "gateway-https-listener")
    out = tmp_path / "pulled.json"
    with serving(snap, server_ctx) as (_, where):
        argv = ["pull", "--ads", where, "--node-id", "edge", "--tls-ca", str(ca), "-o", str(out)]
        assert main([*argv, "--settle", "0.2", *(["--delta"] if delta else [])]) == 0
        # Without the CA the server's certificate is not trusted: no snapshot, exit 2.
        opts = PullOptions("edge", timeout=WAIT, ssl=tls_context(None, None, None))
        host, port = where.rsplit(":", 1)
        with pytest.raises(PullError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify"):
            asyncio.run(pull(host, int(port), opts))
    same_resources(load_path(out)[0], snap)


def test_pull_ads_unreachable_is_exit_2_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with serving(Snapshot()) as (_, where):
        pass  # the port was just ours and is now closed
    out = tmp_path / "never.json"
    code = main(["pull", "--ads", where, "--node-id", "edge", "--timeout", "5", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{where}: --ads: ADS at {where}:" in err and "[unreachable]" in err, err
    assert not out.exists()


def test_pull_ads_names_what_never_arrived(capsys: pytest.CaptureFixture[str]) -> None:
    """The mesh's SDS secrets come from its agent, not the control plane: a pull that
    cannot complete says which names it waited for, and exits 2 at --timeout."""
    snap = translate_scenario(FIXTURES / "httproute-mesh-backend")
    with serving(snap) as (_, where):
        code = main(["pull", "--ads", where, "--node-id", "edge", "--timeout", "3"])
    err = capsys.readouterr().err
    assert code == 2
    assert "still missing: secrets/ROOTCA, secrets/default" in err, err


def test_check_xds_ads_source_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    scenario = FIXTURES / "httproute-header-matching"
    snap = translate_scenario(scenario)
    with serving(snap) as (_, where):
        code = main(["check", str(FIXTURES / "base"), str(scenario), "--format", "json",
                     "--xds", f"ads://{where}?node=edge"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["findings"] == []


def test_check_xds_unreachable_ads_is_an_input_error(capsys: pytest.CaptureFixture[str]) -> None:
    with serving(Snapshot()) as (_, where):
        pass
    scenario = FIXTURES / "httproute-header-matching"
    code = main(["check", str(FIXTURES / "base"), str(scenario),
                 "--xds", f"ads://{where}?node=edge&timeout=5"])  # fmt: skip
    assert code == 2
    assert "[unreachable]" in capsys.readouterr().err


def test_ads_url_without_node_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    scenario = FIXTURES / "httproute-header-matching"
    code = main(["check", str(FIXTURES / "base"), str(scenario), "--xds", "ads://127.0.0.1:1"])
    assert code == 2
    assert "?node=ID" in capsys.readouterr().err


def _bad_cluster(snap: Snapshot) -> Snapshot:
    """A cluster Envoy must refuse (a negative connect_timeout); the rest unchanged."""
    bad = Cluster.parse(bytes(snap.clusters[0]))
    bad.connect_timeout = None
    doc = to_json_dict(bad)
    doc["connect_timeout"] = "-1s"
    from verifier.xds.codec import from_json_dict

    parsed, _ = from_json_dict(Cluster, doc)
    clusters = [parsed, *snap.clusters[1:]]
    return Snapshot(clusters, snap.endpoints, snap.listeners, snap.routes, snap.secrets)
