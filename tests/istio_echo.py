"""A client of Istio's echo control service that owes nothing to our generated module,
and the output parser of the upstream suites.

``compiled()`` compiles ``ISTIO_ECHO`` (the part of Istio's ``pkg/test/echo/proto/
echo.proto`` these tests use, written down here from Istio's field names and numbers,
plus one field from "a newer Istio" that our echo cannot know) with protoc, in the test,
into Google's protobuf classes and grpcio stubs. A wrong field number or type in our
``echo.proto``, or a betterproto2 encoding that differs from Google's, shows up as a
call that fails or an answer that does not read.

``parse_response`` reads one response as the Gateway API conformance suite's
``conformance/utils/echo/parse.go`` (a copy of Istio's ``pkg/test/echo/parse.go``)
does: each field is the first ``Field=(.*)`` anywhere in the text, case-sensitive
(the request id's match is not); every ``RequestHeader=K:V`` adds a value, a
``ResponseHeader=K:V`` replaces it; ``body] K=V`` lines are the raw body.
``parse_multiple`` splits a ``client`` command's stdout on blank lines and keeps the
sections that have a ``Hostname`` or a status code, as ``parseMultipleResponses``.
"""

from __future__ import annotations

import functools
import importlib
import re
import sys
import tempfile
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from types import ModuleType

ISTIO_ECHO = """
syntax = "proto3";
package proto;
import "google/protobuf/wrappers.proto";

service EchoTestService {
  rpc Echo (EchoRequest) returns (EchoResponse);
  rpc ForwardEcho (ForwardEchoRequest) returns (ForwardEchoResponse);
}
message EchoRequest { string message = 1; }
message EchoResponse { string message = 1; }
message Header { string key = 1; string value = 2; }
message HBONE { string address = 9; }
message ForwardEchoRequest {
  int32 count = 1;
  int32 qps = 2;
  int64 timeout_micros = 3;
  string url = 4;
  repeated Header headers = 5;
  string message = 6;
  bool http2 = 7;
  string method = 9;
  google.protobuf.StringValue expectedResponse = 21;
  HBONE hbone = 24;
  string from_a_newer_istio = 99;
}
message ForwardEchoResponse { repeated string output = 1; }
"""


@functools.cache
def compiled() -> tuple[ModuleType, ModuleType]:
    """``(messages, grpcio stubs)`` compiled from ``ISTIO_ECHO`` by protoc, once a process."""
    from grpc_tools import protoc

    out = Path(tempfile.mkdtemp(prefix="istio-echo-"))
    (out / "istio_echo.proto").write_text(ISTIO_ECHO)
    include = str(files("grpc_tools") / "_proto")  # google/protobuf/wrappers.proto
    args = ["protoc", f"-I{out}", f"-I{include}", f"--python_out={out}"]
    done = protoc.main([*args, f"--grpc_python_out={out}", str(out / "istio_echo.proto")])
    assert done == 0, "protoc failed on ISTIO_ECHO"
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("istio_echo_pb2"), importlib.import_module(
            "istio_echo_pb2_grpc"
        )
    finally:
        sys.path.remove(str(out))


_FIELDS = {  # Response attribute -> the field name in the output, as parse.go lists them
    "method": "Method",
    "protocol": "Proto",
    "alpn": "Alpn",
    "version": "ServiceVersion",
    "port": "ServicePort",
    "code": "StatusCode",
    "host": "Host",
    "hostname": "Hostname",
    "url": "URL",
    "cluster": "Cluster",
    "ip": "IP",
}


@dataclass
class Response:
    raw: str
    id: str = ""
    method: str = ""
    protocol: str = ""
    alpn: str = ""
    version: str = ""
    port: str = ""
    code: str = ""
    host: str = ""
    hostname: str = ""
    url: str = ""
    cluster: str = ""
    ip: str = ""
    request_headers: dict[str, list[str]] = field(default_factory=dict)
    response_headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, str] = field(default_factory=dict)


def parse_response(output: str) -> Response:
    out = Response(raw=output)
    found = re.search(r"(?i)X-Request-Id=(.*)", output)
    if found:
        out.id = found.group(1)
    for attribute, name in _FIELDS.items():
        found = re.search(re.escape(name) + "=(.*)", output)
        if found:
            setattr(out, attribute, found.group(1))
    for value in re.findall(r"RequestHeader=(.*)", output):
        key, sep, rest = value.partition(":")
        if sep:
            out.request_headers.setdefault(_canonical(key), []).append(rest)
    for value in re.findall(r"ResponseHeader=(.*)", output):
        key, sep, rest = value.partition(":")
        if sep:
            out.response_headers[_canonical(key)] = rest
    for line in output.split("\n"):
        parts = line.split("body] ")
        if len(parts) == 2 and "=" in parts[1]:
            key, _, value = parts[1].partition("=")
            out.body[key] = value
    return out


def parse_multiple(stdout: str) -> list[Response]:
    sections = (parse_response(s.strip()) for s in stdout.split("\n\n") if s.strip())
    return [r for r in sections if r.hostname or r.code]


def _canonical(name: str) -> str:
    """Go's http.Header keys (Add/Set canonicalise them)."""
    return "-".join(part[:1].upper() + part[1:].lower() for part in name.split("-"))
