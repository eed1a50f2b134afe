"""One HTTP/1.1 exchange on a raw connection, as a pod's application makes it.

A mesh request is made on a socket of the client pod's own (``verifier.live.podnet``),
from a source port the caller picks, so an HTTP client library (its own pool and
connections) cannot make it. The request goes byte for byte as the case says, on a
connection of its own (``Connection: close``), and the response is read by its
framing and parsed by ``http.client``.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import io
import json
from typing import Any

from verifier.live.client import LiveResponse
from verifier.semantics.request import Request


class _Wire:
    """An HTTP response read whole from a closed connection (``http.client`` parses it:
    chunked bodies included)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def makefile(self, *_args: Any, **_kwargs: Any) -> io.BytesIO:
        return io.BytesIO(self.data)


def parse_response(request: Request, data: bytes) -> LiveResponse:
    if not data:
        return LiveResponse(request, 0, error="closed without a response")
    resp = http.client.HTTPResponse(_Wire(data))  # type: ignore[arg-type]
    try:
        resp.begin()
        body = resp.read()
    except (http.client.HTTPException, ValueError) as exc:
        return LiveResponse(request, 0, error=f"unreadable response: {exc!r}")
    headers = tuple(resp.getheaders())
    echo = None
    if "json" in (resp.getheader("content-type") or ""):
        with contextlib.suppress(ValueError):
            doc = json.loads(body)
            echo = doc if isinstance(doc, dict) and "pod" in doc else None
    return LiveResponse(request, resp.status, headers, echo, body)


async def read_response(reader: asyncio.StreamReader) -> bytes:
    """One HTTP/1.1 response, read to its end by its framing (Content-Length, chunked,
    else the connection's end): Envoy closes a connection after a local reply only
    once its delayed_close_timeout (1 s) has passed or the client has closed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        return exc.partial
    fields = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    if fields.get("content-length", "").isdigit():
        return head + await reader.readexactly(int(fields["content-length"]))
    if "chunked" not in fields.get("transfer-encoding", "").lower():
        return head + await reader.read()
    body = b""
    while True:
        size_line = await reader.readuntil(b"\r\n")
        body += size_line
        size = int(size_line.split(b";")[0].strip() or b"0", 16)
        body += await reader.readexactly(size + 2)
        if size == 0:
            return head + body


def wire_request(request: Request) -> bytes:
    lines = [f"{request.method} {request.path} HTTP/1.1", f"Host: {request.host}"]
    lines += [f"{k}: {v}" for k, vs in request.headers for v in vs]
    return ("\r\n".join([*lines, "Connection: close", "", ""])).encode("utf-8")
