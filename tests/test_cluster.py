"""--kubeconfig: a live cluster's objects judged exactly as the same objects in files.

No Kubernetes API server can run here, so every test talks to ``k8s_standin``, an
HTTP stand-in speaking the API's list/get wire format (paging, resourceVersion,
bearer tokens, 403 and 404 as the real server words them). What it cannot prove:
that a real API server answers exactly so (field defaults, conversion webhooks).
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from k8s_standin import StandIn, fixture_objects
from relay import splice

from verifier.cli import main
from verifier.findings import catalogue
from verifier.gatewayapi.cluster import LISTED, ClusterSource, read_cluster
from verifier.live.envoy_process import envoy_available

T = TypeVar("T")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
BASE = FIXTURES / "base"
# TLS Secrets, a CA ConfigMap, a ListenerSet, a ReferenceGrant, plain routing.
SCENARIOS = (
    "gateway-https-listener",
    "gateway-frontend-client-certificate-validation",
    "listener-set",
    "httproute-cross-namespace",
    "httproute-simple-same-namespace",
)
Serve = Callable[..., tuple[StandIn, str]]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    started: list[StandIn] = []

    def start(scenario: str, **kw: set[str]) -> tuple[StandIn, str]:
        standin = StandIn(fixture_objects([BASE, FIXTURES / scenario]), **kw).start()
        started.append(standin)
        return standin, str(standin.kubeconfig(tmp_path / f"kubeconfig-{len(started)}"))

    yield start
    for s in started:
        s.stop()


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _unplaced(note: str) -> str:
    """A note without the ``file:line: `` it starts with."""
    return note.split(": ", 1)[1]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_check_and_status_from_the_cluster_match_the_files(
    scenario: str, serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    _, kubeconfig = serve(scenario)
    cases = ["--cases", str(FIXTURES / scenario / "cases.yaml")]
    files = run(["check", "--format", "json", str(BASE), str(FIXTURES / scenario)], capsys)
    live = run(["check", "--format", "json", "--kubeconfig", kubeconfig, *cases], capsys)
    # The scenario's deliberate configuration mistakes (its expected-findings.yaml, which
    # a folder declares and a cluster cannot) are found in the cluster's objects alike.
    declared = FIXTURES / scenario / "expected-findings.yaml"
    entries = yaml.safe_load(declared.read_text()) if declared.is_file() else []
    got, want = json.loads(live[1]), json.loads(files[1])
    found = got["findings"]
    assert {(f["code"], f["resource"]) for f in found} == {
        (e["code"], e["resource"]) for e in entries
    }
    assert all(f["location"].startswith("cluster:standin/") for f in found)
    # Without --fail-on warning, only a declared error fails the cluster's check.
    errors = any(catalogue()[e["code"]].level == "error" for e in entries)
    assert (files[0], live[0]) == (0, 1 if errors else 0), live[2]
    if entries:
        return
    # Otherwise the same check, but for the scenario's name (the files' folder, the
    # cluster's --context, here none: "cluster"), and the input notes, which say the
    # same of each object, each at its own place (a file's line, the cluster's object).
    assert [s.pop("name") for s in got["scenarios"]] == ["cluster"]
    assert [s.pop("name") for s in want["scenarios"]] == [scenario]
    assert sorted(map(_unplaced, got.pop("input_notes", []))) == sorted(
        map(_unplaced, want.pop("input_notes", []))
    )
    assert got == want
    for fmt in ("text", "yaml"):
        want = run(["status", "--format", fmt, str(BASE), str(FIXTURES / scenario)], capsys)
        got = run(["status", "--format", fmt, "--kubeconfig", kubeconfig], capsys)
        assert got[:2] == want[:2]


def test_explain_reads_the_cluster(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = "gateway-https-listener"
    _, kubeconfig = serve(scenario)
    cases = ["--cases", str(FIXTURES / scenario / "cases.yaml"), "--format", "json"]
    want = run(["explain", str(BASE), str(FIXTURES / scenario), *cases], capsys)
    got = run(["explain", "--kubeconfig", kubeconfig, *cases], capsys)
    assert got[0] == want[0] == 0
    assert json.loads(got[1]) == json.loads(want[1])


def test_only_list_and_get_requests_and_secrets_only_by_name(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    standin, kubeconfig = serve("gateway-https-listener")
    assert run(["check", "--kubeconfig", kubeconfig], capsys)[0] == 0
    assert run(["status", "--kubeconfig", kubeconfig], capsys)[0] == 0
    assert standin.requests
    listed = {k.plural for k in LISTED}
    secrets_read = []
    for method, path, query in standin.requests:
        assert method == "GET", (method, path)
        assert set(query) <= {"limit", "continue"}, (path, query)  # never watch=true etc.
        segs = path.strip("/").split("/")
        if "secrets" in segs or "configmaps" in segs:
            # /api/v1/namespaces/NS/secrets/NAME: a get by name, never a list
            assert segs[:3] == ["api", "v1", "namespaces"] and len(segs) == 6, path
            secrets_read.append(path)
        elif segs[-1] in listed:
            assert "limit" in query, path  # lists are paged
        else:  # a Namespace by name (--namespace), nothing else
            assert segs[:3] == ["api", "v1", "namespaces"] and len(segs) == 4, path
    assert secrets_read  # the listeners' TLS Secrets were read, one by one


def test_secret_data_never_appears_in_any_output(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = "gateway-https-listener"
    standin, kubeconfig = serve(scenario)
    secrets = [o for o in standin.objects if o["kind"] == "Secret"]
    assert secrets
    needles = set()
    for s in secrets:
        for value in s["data"].values():
            needles.add(value[:40])
            needles.update(
                line for line in base64.b64decode(value).decode().splitlines()[1:3] if line
            )
    outputs = []
    for argv in (
        ["check", "--kubeconfig", kubeconfig],
        ["check", "--format", "json", "--kubeconfig", kubeconfig],
        ["check", "--format", "sarif", "--kubeconfig", kubeconfig],
        ["status", "--format", "yaml", "--kubeconfig", kubeconfig],
        ["status", "--kubeconfig", kubeconfig],
        ["explain", "--kubeconfig", kubeconfig, "--cases", str(FIXTURES / scenario / "cases.yaml")],
    ):
        code, out, err = run(argv, capsys)
        assert code == 0, err
        outputs.append(out + err)
    for text in outputs:
        for needle in needles:
            assert needle not in text


def test_paged_lists_read_every_object(serve: Serve) -> None:
    standin, kubeconfig = serve("httproute-cross-namespace")
    whole = read_cluster(ClusterSource(kubeconfig))
    n = len(standin.requests)
    paged = read_cluster(ClusterSource(kubeconfig, page_size=1))
    key = [(o.file, o.data) for o in whole.loaded.objects]
    assert [(o.file, o.data) for o in paged.loaded.objects] == key
    continued = [q for _m, _p, q in standin.requests[n:] if "continue" in q]
    assert len(continued) >= len(whole.loaded.objects) - len(LISTED)
    assert all(q["limit"] == ["1"] for _m, _p, q in standin.requests[n:] if "limit" in q)


def test_locations_name_the_cluster_object(serve: Serve) -> None:
    _, kubeconfig = serve("gateway-https-listener")
    read = read_cluster(ClusterSource(kubeconfig))
    files = {o.file for o in read.loaded.objects}
    assert "cluster:standin/GatewayClass/aether" in files or any(
        f.startswith("cluster:standin/GatewayClass/") for f in files
    )
    assert any(f.startswith("cluster:standin/Gateway/") for f in files)
    for o in read.loaded.objects:
        assert "managedFields" not in o.data["metadata"]
        notes = o.data["metadata"].get("annotations") or {}
        assert "kubectl.kubernetes.io/last-applied-configuration" not in notes or o.kind != "Secret"


@pytest.mark.parametrize(
    ("plural", "kind", "verb"),
    [("httproutes", "HTTPRoute", "list"), ("secrets", "Secret", "get")],
)
def test_forbidden_kind_is_exit_2_naming_kind_and_verb(
    plural: str, kind: str, verb: str, serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    _, kubeconfig = serve("gateway-https-listener", forbidden={plural})
    code, out, err = run(["check", "--kubeconfig", kubeconfig], capsys)
    assert code == 2
    assert out == ""
    assert kind in err and f"'{verb}'" in err and plural in err
    assert "Traceback" not in err


def test_missing_listenerset_crd_is_a_warning(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    _, kubeconfig = serve("gateway-https-listener", missing={"listenersets"})
    code, _out, err = run(["check", "--kubeconfig", kubeconfig], capsys)
    assert code == 0, err
    assert err.count("ListenerSet") == 1 and "note:" in err


def test_missing_required_crd_is_exit_2(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    _, kubeconfig = serve("gateway-https-listener", missing={"httproutes"})
    code, _out, err = run(["check", "--kubeconfig", kubeconfig], capsys)
    assert code == 2 and "HTTPRoute" in err and "404" in err


def test_namespace_restricts_namespaced_reads(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    standin, kubeconfig = serve("httproute-simple-same-namespace")
    run(["status", "--kubeconfig", kubeconfig, "--namespace", "edge-infra"], capsys)
    paths = [p for _m, p, _q in standin.requests]
    assert "/api/v1/namespaces" not in paths  # the one namespace is read by name
    assert "/api/v1/namespaces/edge-infra" in paths
    namespaced = {k.plural for k in LISTED if k.namespaced}
    for p in paths:
        if p.rsplit("/", 1)[-1] in namespaced:
            assert "/namespaces/edge-infra/" in p, p


def test_a_namespace_limited_read_judges_only_what_it_read(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --namespace the cluster's other namespaces are not read, so a backendRef
    into one (edge-web) names a Service and ReferenceGrants the input cannot know:
    it is not judged, while the one into a namespace read (edge-infra) is."""
    _, kubeconfig = serve("httproute-cross-namespace")
    scoped = ["--namespace", "edge-apps", "--namespace", "edge-infra"]
    code, out, err = run(["check", "--format", "json", "--kubeconfig", kubeconfig, *scoped], capsys)
    found = json.loads(out)["findings"]
    assert code == 1, err
    assert [(f["code"], f["actual"]["service"]) for f in found] == [
        ("EV908", "edge-infra/infra-backend-v2")
    ]


def test_unreachable_server_is_exit_2_in_bounded_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = tmp_path / "kubeconfig"
    for scheme in ("http", "https"):
        config.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
            f"clusters: [{{name: c, cluster: {{server: '{scheme}://127.0.0.1:{port}'}}}}]\n"
            "users: [{name: u, user: {token: t}}]\n"
            "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
        )
        argv = ["check", "--kubeconfig", str(config), "--cluster-timeout", "2"]
        code, _out, err = run(argv, capsys)
        assert code == 2 and "cannot reach the API server" in err and "Traceback" not in err
        # said plainly: host:port and the OS's words, no SSLContext repr nor raw args
        assert f"127.0.0.1:{port}: Connection refused [unreachable]" in err, err
        assert "SSLContext" not in err and "Connect call failed" not in err, err


def test_bad_kubeconfig_and_bad_combinations_are_exit_2(
    tmp_path: Path, serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad"
    bad.write_text("apiVersion: v1\nkind: Config\n")
    code, _out, err = run(["check", "--kubeconfig", str(bad)], capsys)
    assert code == 2 and f"{bad}: current-context:" in err
    code, _out, err = run(["check", "--kubeconfig", str(tmp_path / "absent")], capsys)
    assert code == 2
    _, kubeconfig = serve("gateway-https-listener")
    code, _out, err = run(["check", str(BASE), "--kubeconfig", kubeconfig], capsys)
    assert code == 2 and "not both" in err
    code, _out, err = run(["check", "--kubeconfig", kubeconfig, "--context", "nope"], capsys)
    assert code == 2 and "nope" in err
    # nothing to check in a cluster: no hint to load a scenario with its base (no files)
    for command in ("check", "status"):
        argv = [command, "--kubeconfig", kubeconfig, "--controller-name", "example.com/nope"]
        code, _out, err = run(argv, capsys)
        assert code == 2 and "[nothing-to-check]" in err and "fixtures/base" not in err, err
    code, _out, err = run(["status"], capsys)
    assert code == 2 and "--kubeconfig" in err
    code, _out, err = run(["status", str(BASE), "--namespace", "x"], capsys)
    assert code == 2 and "--kubeconfig" in err


def test_shipped_clusterrole_grants_exactly_what_is_read() -> None:
    import yaml

    from verifier.gatewayapi.cluster import CONFIG_MAP, SECRET

    role = yaml.safe_load(
        (FIXTURES.parent / "deploy" / "edge-verifier-clusterrole.yaml").read_text()
    )
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    want = {
        (k.api_version.rsplit("/", 1)[0] if "/" in k.api_version else "", k.plural, verb)
        for k in LISTED
        for verb in ("get", "list", "watch")
    } | {("", SECRET.plural, "get"), ("", CONFIG_MAP.plural, "get")}
    assert granted == want


# ------------------------------------------------- live, to the cluster's Gateway

REMOTE_SCENARIO = "httproute-request-header-modifier"  # every case to one Gateway
REMOTE_GATEWAY = ("edge-infra", "same-namespace")


class DataPlane:
    """A real Envoy running the scenario's xDS with echo backends (the embedded harness),
    in a thread of its own, standing in for the cluster's edge: the remote target sends
    to it as it would to a LoadBalancer address. ``forward`` also serves the Gateway's
    port 80 on a fresh loopback address, as a LoadBalancer would (root only)."""

    def __init__(self, paths: list[Path]) -> None:
        from verifier import pipeline
        from verifier.live.harness import EmbeddedHarness

        opts = pipeline.CheckOptions()
        (scn,) = pipeline.discover([str(p) for p in paths], opts)
        ctx, _ = pipeline.prepare(scn, opts)
        assert ctx is not None
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.harness = EmbeddedHarness(ctx.res, ctx.snapshot)
        self.call(self.harness.start())
        address = self.harness.gateway_addresses[REMOTE_GATEWAY]
        target = self.harness.target(address, 80)
        assert target is not None
        self.target = target
        self.forwarder: asyncio.Server | None = None

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def forward(self, ip: str) -> None:
        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await splice((reader, writer), await asyncio.open_connection(*self.target))

        async def start() -> asyncio.Server:
            return await asyncio.start_server(relay, ip, 80)

        self.forwarder = self.call(start())

    def stop(self) -> None:
        if self.forwarder is not None:
            self.forwarder.close()
        self.call(self.harness.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture(scope="module")
def data_plane() -> Iterator[DataPlane]:
    if not envoy_available():
        pytest.skip("no envoy binary")
    plane = DataPlane([BASE, FIXTURES / REMOTE_SCENARIO])
    yield plane
    plane.stop()


def _publish(standin: StandIn, gateway: tuple[str, str], address: str | None) -> None:
    """The Gateway's status as its controller would write it once a LoadBalancer exists."""
    for obj in standin.objects:
        meta = obj["metadata"]
        if obj["kind"] == "Gateway" and (meta["namespace"], meta["name"]) == gateway:
            if address is None:
                obj.pop("status", None)
            else:
                obj["status"] = {"addresses": [{"type": "IPAddress", "value": address}]}


def _remote_report(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, Any], str]:
    code, out, err = run(argv, capsys)
    return code, (json.loads(out) if out.strip() else {}), err


@pytest.mark.live
def test_live_sends_every_case_to_the_clusters_gateway(
    data_plane: DataPlane, serve: Serve, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    standin, kubeconfig = serve(REMOTE_SCENARIO)
    cases = str(FIXTURES / REMOTE_SCENARIO / "cases.yaml")
    ns, name = REMOTE_GATEWAY
    common = ["--kubeconfig", kubeconfig, "--gateway", f"{ns}/{name}", "--cases", cases]
    common += ["--format", "json", "--gateway-wait", "5"]
    runs = []
    # --gateway-address names where the Gateway is reached (here: where the data plane's
    # Envoy serves port 80), and status.addresses is then not needed.
    ip, port = data_plane.target
    override = ["--gateway-address", f"{ns}/{name}={ip}:80>{port}"]
    runs.append(_remote_report(["live", *common, *override], capsys))
    # status.addresses, as a LoadBalancer's: port 80 there is forwarded to the data plane.
    published = "127.0.80.80"
    try:
        data_plane.forward(published)
    except PermissionError:
        pass  # binding port 80 needs root; the override above has proved the sending
    else:
        _publish(standin, REMOTE_GATEWAY, published)
        runs.append(_remote_report(["live", *common], capsys))
        runs.append(_remote_report(["run", *common], capsys))
    want = len(load_yaml_cases(cases))
    for code, report, err in runs:
        assert code == 0, err
        results = report["cases"]
        assert len(results) == want
        assert all(r["passed"] and not r["skipped"] for r in results), results
        assert report["findings"] == []
        assert report["summary"]["rewritten"] is False
        # No access log of ours there: which route answered is not known, and said so
        # (the models' choice is never reported as the route that served it).
        assert report["summary"]["unattributed"] == sum(
            1 for r in results if r["observed"].get("status")
        )
        assert all(r["xds_route"] == "" for r in results)
        assert all(
            (r["attribution"]["state"], r["attribution"]["route"]) == ("unattributed", None)
            for r in results
            if r["observed"].get("status")
        )
    assert {method for method, _, _ in standin.requests} == {"GET"}
    # A case both models predict to fail is still retried here: a cluster's Gateway may
    # still be taking its configuration in (our own data plane sends it once).
    wrong = tmp_path / "wrong.yaml"
    first = Path(cases).read_text(encoding="utf-8").split("\n- name:")[0]
    wrong.write_text(first.replace("status: 200", "status: 404"), encoding="utf-8")
    argv = ["live", "--kubeconfig", kubeconfig, "--gateway", f"{ns}/{name}", *override]
    argv += ["--cases", str(wrong), "--format", "json", "--consistency-budget", "1.5"]
    code, report, err = _remote_report(argv, capsys)
    assert code == 1, err
    (result,) = report["cases"]
    assert (result["passed"], result["attempts"]) == (False, 2)


def load_yaml_cases(path: str) -> list[Any]:
    import yaml

    data = yaml.safe_load(Path(path).read_text())
    assert isinstance(data, list)
    return data


def test_live_waits_for_the_gateway_address_then_says_which_and_how_long(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    standin, kubeconfig = serve(REMOTE_SCENARIO)
    _publish(standin, REMOTE_GATEWAY, None)
    cases = str(FIXTURES / REMOTE_SCENARIO / "cases.yaml")
    argv = ["live", "--kubeconfig", kubeconfig, "--gateway", "edge-infra/same-namespace"]
    started = time.monotonic()
    code, _out, err = run([*argv, "--cases", cases, "--gateway-wait", "1"], capsys)
    assert code == 2
    assert time.monotonic() - started < 10
    assert "Gateway edge-infra/same-namespace has no address in status.addresses" in err
    assert "after waiting 1s (--gateway-wait)" in err
    gets = [p for m, p, _ in standin.requests if p.endswith("/gateways/same-namespace")]
    assert len(gets) >= 2  # polled, not asked once
    assert {m for m, _, _ in standin.requests} == {"GET"}
    # A Gateway the cluster does not have is said so at once.
    code, _out, err = run([*argv[:-1], "edge-infra/nope", "--cases", cases], capsys)
    assert code == 2 and "no such Gateway" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "give --cases FILE"),
        (["--cases", "x.yaml", "--gateway", "nope"], "expected NAMESPACE/NAME"),
    ],
)
def test_live_on_a_cluster_needs_cases_and_a_gateway(
    extra: list[str], message: str, serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    standin, kubeconfig = serve(REMOTE_SCENARIO)
    gateway = [] if "--gateway" in extra else ["--gateway", "edge-infra/same-namespace"]
    code, _out, err = run(["live", "--kubeconfig", kubeconfig, *gateway, *extra], capsys)
    assert code == 2
    assert message in err
    assert not standin.requests  # refused before anything was asked of the cluster
    code, _out, err = run(["live", str(BASE), "--gateway", "edge-infra/same-namespace"], capsys)
    assert code == 2 and "give --kubeconfig" in err
