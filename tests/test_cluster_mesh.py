"""live --kubeconfig --mesh: mesh cases sent from a cluster's client pods, driven only
through the API server (its Pods and its port-forward), judged three ways.

No cluster runs here. The API-server stand-in (``k8s_standin``) serves the fixture's
objects, the Pods of its mesh, and the kubelet's WebSocket port-forward; behind the
port-forward runs the fixture's mesh as a cluster would run it (``cluster_mesh_world``:
real sidecars in a network namespace per pod, kube-proxy's DNAT, the cluster DNS),
the stand-in dialling 127.0.0.1:7070 inside the client pod as the kubelet does. So
``live --kubeconfig K --mesh --cases F`` finds each client's ready pod by listing Pods,
port-forwards to its echo, and every case goes ``ForwardEcho`` -> the pod's echo ->
the Service's cluster DNS name -> the pod's capture -> its real sidecar -> the backend.

What only a real cluster exercises (docs/mesh.md): a real kube-proxy and CNI, sidecar
injection, the kubelet's own port-forward (and SPDY, which kubectl uses), the cluster's
DNS, and a real RBAC.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_mesh_world import ClusterMeshWorld, cluster_mesh
from conftest import BASE, FIXTURES
from k8s_standin import StandIn, fixture_objects, pod_object

from verifier.cli import main
from verifier.gatewayapi.resources import load_resources
from verifier.live.dns import DnsServer
from verifier.live.envoy_process import envoy_available
from verifier.live.forward import ClusterResolver
from verifier.live.mesh_live import MeshAnswers, mesh_unavailable, parse_output
from verifier.live.mesh_pods import mesh_pods
from verifier.semantics.request import Backend

SCENARIO = FIXTURES / "mesh-basic"
CASES = SCENARIO / "cases.yaml"
EDGE_CASE = """\
- name: an-edge-case
  gateway: {namespace: edge-infra, name: same-namespace}
  request: {path: /}
  expect: {status: 404}
"""


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, Any, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip().startswith("{") else out, err


Serve = Callable[..., tuple[StandIn, str]]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    """Starts a stand-in serving the scenario's objects and ``pods``; stops it after."""
    started: list[StandIn] = []

    def start(pods: list[dict[str, Any]], **kw: Any) -> tuple[StandIn, str]:
        standin = StandIn([*fixture_objects([BASE, SCENARIO]), *pods], **kw).start()
        started.append(standin)
        return standin, str(standin.kubeconfig(tmp_path / f"kubeconfig-{len(started)}"))

    yield start
    for standin in started:
        standin.stop()


@pytest.fixture(scope="module")
def world() -> Iterator[ClusterMeshWorld]:
    if not envoy_available():
        pytest.skip("no envoy binary")
    missing = mesh_unavailable()
    if missing is not None:
        pytest.skip(missing)
    with cluster_mesh([BASE, SCENARIO]) as started:
        yield started


@pytest.mark.live
def test_mesh_cases_pass_through_the_clusters_pods_and_sidecars(
    world: ClusterMeshWorld, serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    standin, kubeconfig = serve(world.pod_objects(), portforward=world.connect)
    argv = ["live", "--kubeconfig", kubeconfig, "--mesh", "--cases", str(CASES)]
    code, report, err = run([*argv, "--format", "json", "--mesh-wait", "5"], capsys)
    assert code == 0, err
    results = report["cases"]
    assert len(results) == 4 and all(r["passed"] and not r["skipped"] for r in results)
    # run: check of the cluster's objects, then the same live pass.
    code, _, err = run(["run", *argv[1:], "--mesh-wait", "5"], capsys)
    assert code == 0, err
    assert "4 passed, 0 failed" in err and "(the cluster's mesh, from pods " in err
    assert report["findings"] == []
    clients = sorted(f"{p.namespace}/{p.name}" for p in world.pods if p.client in world.clients)
    assert report["summary"]["remote"] == f"mesh, from pods {', '.join(clients)}"
    assert report["summary"]["rewritten"] is False
    for r in results:  # every answer from the pod the case names, judged three ways
        assert r["spec_agrees"] is True
        assert r["request"].count("from ") == 1 and " (from " in r["request"], r["request"]
        # No access log of ours in a cluster: never the model's route.
        assert (r["attribution"]["state"], r["xds_route"]) == ("unattributed", "")
    sidecar = [r for r in results if r["name"] != "client-outside-the-mesh-reaches-echo"]
    assert all(r["envoy_model_agrees"] is True for r in sidecar)
    # Read only through the API: Pods listed, the client pods port-forwarded, all GETs.
    assert {m for m, _, _ in standin.requests} == {"GET"}
    forwarded = {p.split("/")[-2] for _, p, q in standin.requests if p.endswith("/portforward")}
    assert forwarded == {p.name for p in world.pods if p.client in world.clients}, forwarded
    assert all(
        q == {"ports": ["7070"]} for _, p, q in standin.requests if p.endswith("/portforward")
    )

    # A case whose expectation the answer does not meet fails (exit 1), said at it.
    wrong = tmp_path / "wrong.yaml"
    first = CASES.read_text().split("\n- name:")[0]
    wrong.write_text(first.replace("backend: echo,", "backend: echo-v2,"))
    argv = ["live", "--kubeconfig", kubeconfig, "--mesh", "--cases", str(wrong)]
    argv += ["--format", "json", "--consistency-budget", "1.5"]
    code, report, err = run(argv, capsys)
    assert code == 1, err
    (result,) = report["cases"]
    assert not result["passed"] and result["attempts"] >= 1
    # All three agree the answer is echo's: the case is what is wrong.
    assert [f["code"] for f in report["findings"]] == ["EV801"]

    # A ForwardEcho that errors (here: the echo's request set times out) is a failed
    # case with the echo's words, not a pass and not a crash.
    argv = ["live", "--kubeconfig", kubeconfig, "--mesh", "--cases", str(CASES)]
    argv += ["--format", "json", "--request-timeout", "0.001", "--consistency-budget", "0.5"]
    code, report, err = run(argv, capsys)
    assert code == 1, err
    assert not any(r["passed"] for r in report["cases"])
    assert all("ForwardEcho: request set timed out" in r["problems"][0] for r in report["cases"])


@pytest.mark.live
def test_a_port_forward_to_a_port_nothing_serves_is_exit_2_naming_it(
    world: ClusterMeshWorld, serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    _, kubeconfig = serve(world.pod_objects(), portforward=world.connect)
    argv = ["live", "--kubeconfig", kubeconfig, "--mesh", "--cases", str(CASES)]
    code, _, err = run([*argv, "--mesh-control-port", "7071"], capsys)
    assert code == 2, err
    assert "--mesh-control-port" in err and "7071" in err
    assert "connection refused" in err.lower()  # the kubelet's words, passed on


def _fake_pods(ready: bool) -> list[dict[str, Any]]:
    """The mesh's client pods, as Pod objects, with nothing behind them."""
    labels = {"app": "client"}
    return [
        pod_object(ns, f"client-5d4c3b2a1f-{i}", f"10.244.9.{i}", labels, ready)
        for i, ns in enumerate(("mesh-apps", "mesh-client", "edge-web"), 1)
    ]


def test_a_client_that_never_gets_a_ready_pod_is_exit_2_within_the_wait(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    standin, kubeconfig = serve(_fake_pods(ready=False))
    argv = ["live", "--kubeconfig", kubeconfig, "--mesh", "--cases", str(CASES)]
    started = time.monotonic()
    code, _, err = run([*argv, "--mesh-wait", "1"], capsys)
    assert code == 2, err
    assert time.monotonic() - started < 10
    assert "workload mesh-apps/client has no Running pod" in err and "--mesh-wait" in err
    lists = [p for _, p, _ in standin.requests if p == "/api/v1/namespaces/mesh-apps/pods"]
    assert len(lists) >= 2  # polled, not asked once
    assert not any(p.endswith("/portforward") for _, p, _ in standin.requests)


def test_a_refused_port_forward_is_exit_2_naming_the_rbac_verb(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    standin, kubeconfig = serve(_fake_pods(ready=True), forbidden={"pods/portforward"})
    argv = ["live", "--kubeconfig", kubeconfig, "--mesh", "--cases", str(CASES)]
    code, _, err = run(argv, capsys)
    assert code == 2, err
    assert "'create' on pods/portforward" in err and "(403 Forbidden)" in err
    assert "Invalid response status" not in err  # aiohttp's words, not the server's
    assert "Traceback" not in err
    assert any(p.endswith("/portforward") for _, p, _ in standin.requests)


def test_a_server_that_stalls_the_port_forward_does_not_hang_the_run(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    standin, kubeconfig = serve(_fake_pods(ready=True), stall_portforward=True)
    argv = ["live", "--kubeconfig", kubeconfig, "--mesh", "--cases", str(CASES)]
    started = time.monotonic()
    code, _, err = run([*argv, "--cluster-timeout", "1"], capsys)
    assert code == 2, err
    assert time.monotonic() - started < 10
    assert "no echo control service" in err
    assert any(p.endswith("/portforward") for _, p, _ in standin.requests)


@pytest.mark.parametrize(
    ("lie", "said"),
    [
        ("wrong-port", "opened for port 7071, not 7070"),
        ("text-message", "a TEXT message"),
        ("third-channel", "channel 5 (one port asked)"),
        ("flood", "more than 100,000 bytes"),
    ],
)
def test_a_port_forward_that_breaks_the_protocol_is_exit_2_saying_how(
    lie: str, said: str, serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    _, kubeconfig = serve(_fake_pods(ready=True), lie=lie)
    argv = ["live", "--kubeconfig", kubeconfig, "--mesh", "--cases", str(CASES)]
    started = time.monotonic()
    code, _, err = run([*argv, "--cluster-timeout", "1", "--max-input-bytes", "100000"], capsys)
    assert code == 2, err
    assert time.monotonic() - started < 10
    assert said in err and "Traceback" not in err


def test_mesh_needs_a_cluster_and_mesh_cases(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["live", str(BASE), str(SCENARIO), "--mesh"], capsys)
    assert code == 2 and "give --kubeconfig" in err
    code, _, err = run(["live", str(BASE), str(SCENARIO), "--mesh-wait", "3"], capsys)
    assert code == 2 and "--mesh-wait goes with --mesh" in err
    standin, kubeconfig = serve(_fake_pods(ready=True))
    edge = tmp_path / "edge.yaml"
    edge.write_text(EDGE_CASE)
    argv = ["live", "--kubeconfig", kubeconfig, "--mesh", "--cases", str(edge)]
    code, _, err = run(argv, capsys)
    assert code == 2 and "--mesh sends mesh cases" in err and str(edge) in err
    assert "fixtures/base" not in err  # no scenario's base: the input is a cluster
    # refused before the cluster is asked anything (a new user's run listed it all first)
    assert standin.requests == []
    code, _, err = run(["live", "--kubeconfig", kubeconfig, "--cases", str(CASES)], capsys)
    assert code == 2 and "--gateway NS/NAME" in err and "--mesh" in err


def test_the_forwarders_resolver_follows_a_pods_search_path() -> None:
    """A pod's echo resolves a Service's name as the pod would: through the cluster DNS,
    the search path first (kubelet's ndots:5)."""
    table = {"echo.mesh-apps.svc.cluster.local": "10.96.41.3"}

    async def work() -> None:
        async with DnsServer(table) as dns:
            resolver = ClusterResolver((dns.host, dns.port), "mesh-apps")
            for name in ("echo", "echo.mesh-apps", "echo.mesh-apps.svc.cluster.local"):
                (found,) = await resolver.resolve(name, 80)
                assert (found["host"], found["port"]) == ("10.96.41.3", 80)
                assert found["hostname"] == name
            with pytest.raises(OSError, match="no such host"):
                await resolver.resolve("nope", 80)

    asyncio.run(work())
    resolver = ClusterResolver(("169.254.1.1", 53), "mesh-apps")
    assert resolver.names("echo") == [
        "echo.mesh-apps.svc.cluster.local",
        "echo.svc.cluster.local",
        "echo.cluster.local",
        "echo",
    ]
    assert resolver.names("echo.mesh-apps.svc.cluster.local.") == [
        "echo.mesh-apps.svc.cluster.local"
    ]


def test_the_shipped_mesh_role_grants_what_the_mesh_pass_asks() -> None:
    """Pods listed (never watched, never written), and the port-forward, by either verb an
    API server checks for its WebSocket upgrade."""
    from verifier.gatewayapi.pods import MESH_ROLE

    role = yaml.safe_load((FIXTURES.parent / MESH_ROLE).read_text())
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    pf = "pods/portforward"
    assert granted == {("", "pods", "list"), ("", pf, "get"), ("", pf, "create")}


def test_an_echo_that_omits_its_namespace_is_named_by_its_pod() -> None:
    """Istio's echo may not write ``Namespace=``: the answering pod is then the one pod of
    that name read, and named by the Service whose endpoints hold it."""
    res = load_resources([str(BASE), str(SCENARIO)])
    pods = {(p.namespace, p.name): p for p in mesh_pods(res)}
    v1 = next(p for p in pods.values() if p.workload == "echo-v1")
    (request,) = [c.request for c in load_ctx_cases() if c.name.endswith("echo-v1")]
    lines = ["[0] StatusCode=200", "[0 body] Host=h", "[0 body] URL=/", "[0 body] Method=GET"]
    resp = parse_output(request, "\n".join([*lines, f"[0 body] Hostname={v1.name}"]))
    echo_v1 = Backend("mesh-apps", "echo-v1", 80)
    assert MeshAnswers(res, pods).named(resp, [echo_v1]).backends == (echo_v1,)
    del pods[(v1.namespace, v1.name)]  # a pod not read is not guessed at
    assert MeshAnswers(res, pods).named(resp, [echo_v1]).backends == ()


def load_ctx_cases() -> list[Any]:
    from verifier import pipeline

    opts = pipeline.CheckOptions()
    (scn,) = pipeline.discover([str(BASE), str(SCENARIO)], opts)
    ctx, _ = pipeline.prepare(scn, opts)
    assert ctx is not None
    return list(ctx.mesh_cases)
