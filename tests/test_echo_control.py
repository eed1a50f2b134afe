"""The echo's control endpoint, driven as Istio's tooling drives Istio's echo.

A client compiled in the test from Istio's echo proto (``istio_echo.compiled``: Google's
protobuf and grpcio, nothing of our generated module) calls our echo's ``ForwardEcho``
and ``Echo``; the answers are read with the upstream suites' parsing rules
(``istio_echo.parse_response``). Requests go from one of our echo backends to another,
on loopback; the same call through a real sidecar is in tests/test_sidecar_envoy.py.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from importlib.resources import files
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import pytest
from aiohttp import web
from google.protobuf import descriptor_pb2
from grpc_tools import protoc
from grpclib.client import Channel
from istio_echo import compiled, parse_multiple, parse_response

from verifier.live import echoproto
from verifier.live.echo import EchoBackend, EchoPort
from verifier.live.echoproto.proto import (
    Alpn,
    EchoTestServiceStub,
    ForwardEchoRequest,
    Hbone,
    Header,
    ProxyProtoVersion,
)
from verifier.live.forward import (
    DEFAULT_TIMEOUT_S,
    MAX_BODY,
    MAX_COUNT,
    UNSUPPORTED,
    Refused,
    body_lines,
    echo_lines,
    forward,
    plan,
)

CLIENT_IP, TARGET_IP = "127.0.0.61", "127.0.0.62"

Work = Callable[[EchoBackend, EchoBackend, Any, ModuleType], Awaitable[Any]]


async def _with_echoes(work: Work) -> Any:
    """The client pod's echo (with its control port) and a target echo ``echo-v1``; ``work``
    gets them, a grpcio stub on the control port and the compiled messages."""
    pb2, pb2_grpc = compiled()
    async with (
        EchoBackend("mesh-apps", "echo-v1", TARGET_IP, [EchoPort(0)]) as target,
        EchoBackend("mesh-apps", "client", CLIENT_IP, [EchoPort(0)], control=0) as client,
        grpc.aio.insecure_channel(f"{CLIENT_IP}:{client.control_port}") as channel,
    ):
        return await work(client, target, pb2_grpc.EchoTestServiceStub(channel), pb2)


def test_forward_echo_count_3_answers_three_responses_the_upstream_parser_reads() -> None:
    async def work(client: EchoBackend, target: EchoBackend, stub: Any, pb2: ModuleType) -> Any:
        url = f"http://{TARGET_IP}:{target.bound[0]}/api/v1?x=%2F"
        request = pb2.ForwardEchoRequest(
            count=3,
            url=url,
            method="PUT",
            message="HelloWorld",  # Istio's client always sends one; HTTP does not carry it
            headers=[
                pb2.Header(key="Host", value="echo.mesh-apps.svc.cluster.local"),
                pb2.Header(key="x-probe", value="forward"),
                pb2.Header(key="X-Multi", value="a"),
                pb2.Header(key="x-multi", value="b"),
            ],
        )
        return url, await stub.ForwardEcho(request, timeout=10), list(target.records), target.pod

    url, reply, records, pod = asyncio.run(_with_echoes(work))
    assert len(reply.output) == 3
    for index, output in enumerate(reply.output):
        lines = output.splitlines()
        assert all(line.startswith((f"[{index}] ", f"[{index} body] ")) for line in lines)
        assert f"[{index}] Url={url}" == lines[0]
        got = parse_response(output)
        assert got.code == "200"
        assert got.hostname.startswith("echo-v1-")  # the suite's compareRequest: a pod prefix
        assert got.host == "echo.mesh-apps.svc.cluster.local"
        assert (got.url, got.method, got.protocol) == ("/api/v1?x=%2F", "PUT", "HTTP/1.1")
        assert got.request_headers["X-Probe"] == ["forward"]
        assert got.request_headers["X-Multi"] == ["a", "b"]
        assert got.response_headers["Content-Type"] == "application/json"
        assert got.hostname == got.body["Hostname"] == pod
    # What the target really received: three requests, as the lines say.
    assert [(r.method, r.path, r.host) for r in records] == [
        ("PUT", "/api/v1?x=%2F", "echo.mesh-apps.svc.cluster.local")
    ] * 3
    # The `client` command prints each output and a newline: the suite splits on blank lines.
    stdout = "".join(f"{output}\n" for output in reply.output)
    assert [r.code for r in parse_multiple(stdout)] == ["200"] * 3


def test_qps_paces_the_requests_and_echo_answers_directly() -> None:
    async def work(client: EchoBackend, target: EchoBackend, stub: Any, pb2: ModuleType) -> Any:
        paced = pb2.ForwardEchoRequest(
            count=3, qps=20, url=f"http://{TARGET_IP}:{target.bound[0]}/"
        )
        await stub.ForwardEcho(paced, timeout=10)
        echoed = await stub.Echo(
            pb2.EchoRequest(message="HelloWorld"), metadata=(("x-caller", "test"),), timeout=5
        )
        return [r.at for r in target.records], echoed.message, client.pod, client.control_port

    times, message, pod, port = asyncio.run(_with_echoes(work))
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(times) == 3 and min(gaps) > 0.03  # 50 ms apart at 20 qps
    got = parse_response(message)
    assert (got.code, got.hostname, got.protocol, got.port) == ("200", pod, "GRPC", str(port))
    assert "Echo=HelloWorld" in message.splitlines()
    assert got.request_headers["X-Caller"] == ["test"]


def test_fields_this_echo_cannot_honour_are_refused_by_name() -> None:
    async def work(client: EchoBackend, target: EchoBackend, stub: Any, pb2: ModuleType) -> Any:
        good = f"http://{TARGET_IP}:{target.bound[0]}/"
        bad = {
            "http2": (pb2.ForwardEchoRequest(url=good, http2=True), "UNIMPLEMENTED"),
            "hbone": (
                pb2.ForwardEchoRequest(url=good, hbone=pb2.HBONE(address="x")),
                "UNIMPLEMENTED",
            ),
            "expectedResponse": (
                pb2.ForwardEchoRequest(url=good, expectedResponse={"value": "ok"}),
                "UNIMPLEMENTED",
            ),
            "fields 99": (
                pb2.ForwardEchoRequest(url=good, from_a_newer_istio="x"),
                "UNIMPLEMENTED",
            ),
            "url": (pb2.ForwardEchoRequest(url="https://example.test/"), "UNIMPLEMENTED"),
            "url: 'echo/'": (pb2.ForwardEchoRequest(url="echo/"), "INVALID_ARGUMENT"),
            "count": (pb2.ForwardEchoRequest(url=good, count=MAX_COUNT + 1), "INVALID_ARGUMENT"),
            "timeout_micros": (
                pb2.ForwardEchoRequest(url=good, timeout_micros=-1),
                "INVALID_ARGUMENT",
            ),
            "method": (pb2.ForwardEchoRequest(url=good, method="GET /"), "INVALID_ARGUMENT"),
        }
        answers = {}
        for name, (request, _) in bad.items():
            try:
                await stub.ForwardEcho(request, timeout=5)
                answers[name] = ("OK", "")
            except grpc.aio.AioRpcError as error:
                answers[name] = (error.code().name, error.details() or "")
        sent = len(target.records)
        # Failures of the requests themselves: nobody listens; an answer slower than the timeout.
        for name, request in {
            "UNAVAILABLE": pb2.ForwardEchoRequest(url=f"http://{TARGET_IP}:1/", count=2),
            "DEADLINE_EXCEEDED": pb2.ForwardEchoRequest(
                url=f"{good}?delay=5s", timeout_micros=200_000
            ),
        }.items():
            try:
                await stub.ForwardEcho(request, timeout=5)
                answers[name] = ("OK", "")
            except grpc.aio.AioRpcError as error:
                answers[name] = (error.code().name, error.details() or "")
        return {n: c for n, (_, c) in bad.items()}, answers, sent

    wanted, answers, sent = asyncio.run(_with_echoes(work))
    for name, code in wanted.items():
        assert answers[name][0] == code, (name, answers[name])
        assert answers[name][1].startswith(f"{name}:"), (name, answers[name])
    assert sent == 0  # a refused call sends nothing
    assert answers["UNAVAILABLE"][0] == "UNAVAILABLE"
    assert answers["UNAVAILABLE"][1].startswith("2/2 requests had errors")
    assert answers["DEADLINE_EXCEEDED"][0] == "DEADLINE_EXCEEDED"
    assert "only 0/1 requests completed" in answers["DEADLINE_EXCEEDED"][1]
    assert DEFAULT_TIMEOUT_S == 15.0  # Istio's default for timeout_micros 0


@functools.cache
def _declared() -> dict[int, tuple[str, str]]:
    """ForwardEchoRequest's fields in our echo.proto, compiled by protoc: number -> (name, type)."""
    proto_dir = Path(echoproto.__file__).parent
    out = Path(tempfile.mkdtemp(prefix="echo-desc-")) / "echo.desc"
    include = str(files("grpc_tools") / "_proto")
    args = ["protoc", f"-I{proto_dir}", f"-I{include}", f"--descriptor_set_out={out}", "echo.proto"]
    assert protoc.main(args) == 0
    ours = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]
    shutil.rmtree(out.parent)
    message = next(m for m in ours.message_type if m.name == "ForwardEchoRequest")
    return {f.number: (f.name, _KIND(f.type)[5:].lower()) for f in message.field}


_KIND = descriptor_pb2.FieldDescriptorProto.Type.Name
_METAS = ForwardEchoRequest._betterproto.meta_by_field_name  # type: ignore[attr-defined]


def test_generated_module_matches_echo_proto_and_istios_numbers() -> None:
    """Our committed module is what echo.proto says (regenerate with
    scripts/gen_echo_proto.sh), and echo.proto numbers the fields as Istio does."""
    declared = _declared()
    assert {m.number: m.proto_type for m in _METAS.values()} == {
        n: t for n, (_, t) in declared.items()
    }
    pb2, _ = compiled()
    for istio in pb2.ForwardEchoRequest.DESCRIPTOR.fields:
        if istio.name != "from_a_newer_istio":
            assert declared[istio.number] == (istio.name, _KIND(istio.type)[5:].lower())


def test_every_field_this_echo_does_not_do_is_refused_when_set() -> None:
    """Each field of ``UNSUPPORTED``, set as Istio reads it set (a message when present,
    an empty ``expectedResponse`` included), is refused by its proto name."""
    attribute = {_METAS[a].number: a for a in _METAS}
    number = {name: n for n, (name, _) in _declared().items()}
    present = {13: Alpn(value=[]), 21: "", 24: Hbone(), 27: Hbone(), 25: ProxyProtoVersion.V1}
    for field in UNSUPPORTED:
        kind = _declared()[number[field]][1]
        value = present.get(number[field], True if kind == "bool" else "x")
        request = ForwardEchoRequest(url="http://echo/", **{attribute[number[field]]: value})
        with pytest.raises(Refused) as refused:
            plan(request)
        assert refused.value.status.name == "UNIMPLEMENTED"
        assert refused.value.message.startswith(f"{field}: ")
    assert plan(ForwardEchoRequest(url="http://echo/")).count == 1


def test_an_istio_echo_answer_passes_through_and_an_echo_basic_one_is_rewritten() -> None:
    """What Istio's echo answers is already its lines: passed on as they came. Ours (and
    echo-basic's) JSON becomes the lines Istio's echo would have answered with."""
    istio = b"ServiceVersion=v1\nServicePort=8080\nHost=a.b\nURL=/x\nHostname=echo-v1-abc\n"
    lines = body_lines("text/plain", istio)
    assert lines == istio.decode().splitlines()
    basic = {
        "path": "/x?y=1",
        "host": "a.b",
        "method": "GET",
        "proto": "HTTP/1.1",
        "headers": {"X-B": ["2"], "X-A": ["1", "3"]},
        "namespace": "ns",
        "pod": "echo-v2-abc",
    }
    got = parse_response("".join(f"[0 body] {line}\n" for line in echo_lines(basic)))
    assert (got.hostname, got.host, got.url) == ("echo-v2-abc", "a.b", "/x?y=1")
    assert (got.method, got.protocol) == ("GET", "HTTP/1.1")
    assert got.request_headers == {"X-A": ["1", "3"], "X-B": ["2"]}
    assert body_lines("application/json", json.dumps(basic).encode()) == echo_lines(basic)
    assert body_lines("application/json", b'{"other": 1}') == ['{"other": 1}']


def test_a_long_answer_arrives_whole_and_one_past_the_cap_fails_the_call() -> None:
    """An answer written in many pieces is read to its end, line by line; one over
    ``MAX_BODY`` fails the request (and so the call), never cut short in silence."""

    async def pieces(request: web.Request) -> web.StreamResponse:
        count, size = int(request.query["n"]), int(request.query["size"])
        response = web.StreamResponse()
        await response.prepare(request)
        for index in range(count):
            await response.write(f"Line{index}=".encode() + b"y" * size + b"\n")
            await asyncio.sleep(0)
        return response

    async def run() -> tuple[list[str], str]:
        app = web.Application()
        app.router.add_get("/pieces", pieces)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, TARGET_IP, 0).start()
        url = f"http://{TARGET_IP}:{runner.addresses[0][1]}/pieces"
        try:
            whole = await forward(plan(ForwardEchoRequest(url=f"{url}?n=300&size=2000")))
            with pytest.raises(Refused) as refused:
                await forward(plan(ForwardEchoRequest(url=f"{url}?n=600&size=2000")))
            return whole, refused.value.message
        finally:
            await runner.cleanup()

    whole, refused = asyncio.run(run())
    body = [line for line in whole[0].splitlines() if line.startswith("[0 body] ")]
    assert len(body) == 300 and body[-1].startswith("[0 body] Line299=")
    assert f"over {MAX_BODY} bytes" in refused


def test_our_generated_client_is_read_by_a_server_of_istios_proto() -> None:
    """The other way round: a grpcio server of the proto compiled in the test (an Istio
    echo's shape) reads what our generated stub sends, field by field, and its answer
    reads back through our types."""
    pb2, pb2_grpc = compiled()
    seen: list[Any] = []

    class Istio(pb2_grpc.EchoTestServiceServicer):  # type: ignore[misc, name-defined]
        async def ForwardEcho(self, request: Any, context: Any) -> Any:
            seen.append(request)
            return pb2.ForwardEchoResponse(output=[f"[{i}] StatusCode=200\n" for i in range(3)])

    async def run() -> list[str]:
        server = grpc.aio.server()
        pb2_grpc.add_EchoTestServiceServicer_to_server(Istio(), server)
        port = server.add_insecure_port(f"{CLIENT_IP}:0")
        await server.start()
        channel = Channel(CLIENT_IP, port)
        try:
            reply = await EchoTestServiceStub(channel).forward_echo(
                ForwardEchoRequest(
                    count=3,
                    qps=7,
                    timeout_micros=2_500_000_000,
                    url="http://echo/x",
                    headers=[Header(key="Host", value="h"), Header(key="x-a", value="1")],
                    message="HelloWorld",
                    method="POST",
                    expected_response="",
                    hbone=Hbone(address="10.0.0.1:15008"),
                ),
                timeout=5,
            )
            return list(reply.output)
        finally:
            channel.close()
            await server.stop(None)

    output = asyncio.run(run())
    assert output == [f"[{i}] StatusCode=200\n" for i in range(3)]
    (got,) = seen
    assert (got.count, got.qps, got.timeout_micros) == (3, 7, 2_500_000_000)
    assert (got.url, got.message, got.method) == ("http://echo/x", "HelloWorld", "POST")
    assert [(h.key, h.value) for h in got.headers] == [("Host", "h"), ("x-a", "1")]
    assert got.HasField("expectedResponse") and got.expectedResponse.value == ""
    assert got.hbone.address == "10.0.0.1:15008" and not got.http2
