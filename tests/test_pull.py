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
from envoy_data_plane.envoy.config.core.v3 import Address, SocketAddress
from envoy_data_plane.envoy.config.listener.v3 import Listener
from verifier.rules import RULES

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


def _bad_listener(snap: Snapshot) -> tuple[Snapshot, str]:
    """A listener Envoy must refuse (an address that is no IP); the rest unchanged.
    A listener, not a cluster: Envoy records ``error_state`` for rejected listeners
    (clusters' is "not implemented" in Envoy's API)."""
    bad = Listener.parse(bytes(snap.listeners[0]))
    bad.address = Address(socket_address=SocketAddress(address="not-an-ip", port_value=0))
    listeners = [bad, *snap.listeners[1:]]
    changed = Snapshot(snap.clusters, snap.endpoints, listeners, snap.routes, snap.secrets)
    return changed, bad.name


@pytest.mark.live
def test_pull_admin_holds_the_served_resources_and_reports_a_rejected_update(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_ads import answers, envoy_on, scenario, served_types

    from verifier.live.envoy_process import envoy_available
    from verifier.xds.layout import LISTENER_TYPE

    if not envoy_available():
        pytest.skip("no envoy binary")
    snap = scenario("httproute-header-matching")
    server = AdsServer(snap)
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"

    async def run() -> tuple[int, int, str]:
        async with envoy_on(server, tmp_path, delta=False) as envoy:
            await answers(server, served_types(server, snap))
            admin = f"http://{envoy.admin}"
            # main runs its own event loop: in a thread, while this one serves Envoy.
            first = await asyncio.to_thread(main, ["pull", "--admin", admin, "-o", str(good)])
            changed, _ = _bad_listener(snap)
            versions = server.update(changed)
            nack = await answers(server, {LISTENER_TYPE: versions[LISTENER_TYPE]})
            assert not nack[LISTENER_TYPE].accepted
            second = await asyncio.to_thread(main, ["pull", "--admin", admin, "-o", str(bad)])
            return first, second, nack[LISTENER_TYPE].message

    first, second, message = asyncio.run(asyncio.wait_for(run(), 60))
    err = capsys.readouterr().err
    assert first == 0
    pulled, _ = load_path(good)
    for kind in ("listeners", "routes"):
        assert {resource_name(m) for m in getattr(pulled, kind)} == {
            resource_name(m) for m in getattr(snap, kind)
        }, kind
    # The admin dump also holds the bootstrap's static ADS cluster.
    assert {c.name for c in snap.clusters} <= {c.name for c in pulled.clusters}
    assert second == 1
    _, name = _bad_listener(snap)
    line = next(
        x for x in err.splitlines() if x.startswith(f"edge-verify: error: listeners/{name}:")
    )
    assert "Envoy rejected the update" in line
    assert "not-an-ip" in line and "not-an-ip" in message, (line, message)


@pytest.mark.live
def test_check_xds_on_a_live_envoys_admin_is_clean_when_the_config_is_right() -> None:
    """A real Envoy's /config_dump holds what no route names (the bootstrap's cluster
    for the xDS server) and what Envoy fills in (EDS hosts with their health and
    weights): neither is a finding, so ``--fail-on warning``, as the docs recommend
    for CI, passes on a right config. A mesh scenario: EDS, SDS and the ADS cluster.
    The check runs beside Envoy, in its namespace, against its admin URL, as a user
    checks a running edge; the same dump still judged an unused dynamic cluster
    (tests/test_check_cli.py)."""
    import io
    import os
    from contextlib import redirect_stderr, redirect_stdout

    from verifier.live.envoy_process import envoy_available
    from verifier.live.harness import EmbeddedHarness
    from verifier.live.isolated import with_isolated_harness
    from verifier.live.replay import load_scenario

    if not envoy_available() or os.geteuid() != 0:
        pytest.skip("needs the envoy binary and a network namespace (root)")
    scenario = FIXTURES / "httproute-mesh-backend"
    res, snap = load_scenario(scenario)

    def check(admin: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        argv = ["check", str(FIXTURES / "base"), str(scenario), "--xds", f"http://{admin}"]
        with redirect_stdout(out), redirect_stderr(err):
            rc = main([*argv, "--fail-on", "warning"])
        return rc, out.getvalue(), err.getvalue()

    async def beside_envoy(harness: EmbeddedHarness) -> tuple[int, str, str]:
        assert harness.envoy is not None and harness.envoy.admin is not None
        return await asyncio.to_thread(check, harness.envoy.admin)  # main has its own loop

    done = asyncio.run(with_isolated_harness(res, snap, beside_envoy, fallback=False))
    rc, out, err = done.value
    assert (rc, err) == (0, ""), out + err
    assert out.splitlines()[-1] == (
        f"edge-verify check: 0 errors, 0 warnings, {len(RULES)} rules run, 0 skipped"
    )
