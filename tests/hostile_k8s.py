"""An API server that lies, stalls and floods, for tests/test_hostile_cluster.py.

It answers as the stand-in does (``k8s_standin.reply``: the objects of the folders it
is given, paged, bearer token), except where the request's URL says otherwise: a
kubeconfig's ``server`` is ``http://127.0.0.1:PORT/h/<behaviour>``, the behaviour a
base64url JSON object drawn by the test, so one server process serves every drawn
peer at once and keeps no state (a paging lie counts in its own continue tokens).

A behaviour is ``{"plural": P, "how": H, ...}``: requests for kind P (``*`` every
kind) get misbehaviour H, the rest the honest answer. See ``_misbehave`` for the list.

    python tests/hostile_k8s.py DIR...   # prints its port, then serves until killed
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from aiohttp import web
from k8s_standin import _route, fixture_objects, reply


def url(base: str, behaviour: dict[str, Any]) -> str:
    """The server URL a kubeconfig names for one behaviour."""
    code = base64.urlsafe_b64encode(json.dumps(behaviour, sort_keys=True).encode()).decode()
    return f"{base}/h/{code}"


def _behaviour(code: str) -> dict[str, Any]:
    data = json.loads(base64.urlsafe_b64decode(code.encode()))
    assert isinstance(data, dict)
    return data


async def _raw(
    request: web.Request, status: int, body: bytes, **headers: str
) -> web.StreamResponse:
    resp = web.StreamResponse(
        status=status, headers={"Content-Type": "application/json", **headers}
    )
    resp.content_length = len(body)
    await resp.prepare(request)
    await resp.write(body)
    return resp


async def _forever(
    request: web.Request, first: bytes, more: bytes, pause: float
) -> web.StreamResponse:
    """A 200 whose body never ends (chunked), ``more`` every ``pause`` seconds."""
    resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    await resp.write(first)
    while True:
        await resp.write(more)
        await asyncio.sleep(pause)


_BOMB: list[bytes] = []


def _bomb() -> bytes:
    """64 MiB of spaces, gzipped to 64 KiB (made once)."""
    if not _BOMB:
        _BOMB.append(gzip.compress(b" " * (64 << 20), compresslevel=9))
    return _BOMB[0]


async def _misbehave(
    request: web.Request, b: dict[str, Any], code: int, body: dict[str, Any]
) -> web.StreamResponse:
    """The lie ``b["how"]`` told instead of the honest ``(code, body)``."""
    how = b["how"]
    honest = json.dumps(body).encode()
    if how == "items":  # items replaced by a value of the wrong shape, or dropped
        lie = dict(body)
        if b.get("drop"):
            lie.pop("items", None)
        else:
            lie["items"] = b["value"]
        return await _raw(request, 200, json.dumps(lie).encode())
    if how == "item":  # one more item that is no named object
        lie = {**body, "items": [b["value"], *body.get("items", [])]}
        return await _raw(request, 200, json.dumps(lie).encode())
    if how == "status":  # a Status failure body, with this HTTP status
        status = {"kind": "Status", "apiVersion": "v1", "status": "Failure"}
        status.update(message=b.get("message", "no"), reason="InternalError", code=b["code"])
        return await _raw(request, b["code"], json.dumps(status).encode())
    if how == "json":  # the whole answer some other JSON value
        return await _raw(request, 200, json.dumps(b["value"]).encode())
    if how == "bytes":  # the whole answer these bytes
        return await _raw(request, 200, base64.b64decode(b["data"]))
    if how == "deep":  # an item nested far deeper than any object (written as text:
        # json.dumps recurses, and gives up near Python's recursion limit)
        depth = b["depth"]
        spec = b'{"a": ' * depth + b"1" + b"}" * depth
        item = b'{"metadata": {"name": "deep"}, "spec": ' + spec + b"}"
        return await _raw(
            request,
            200,
            honest.replace(b'"items": [', b'"items": [' + item + b", ", 1).replace(b", ]", b"]"),
        )
    if how == "bigint":
        text = honest.replace(b'"items"', b'"n": ' + b"9" * b["digits"] + b', "items"', 1)
        return await _raw(request, 200, text)
    if how == "pages":  # a continue token that never ends: fresh each time, or the same
        given = parse_qs(request.query_string).get("continue", ["0"])[0]
        token = int(given) if given.isdigit() else 0
        lie = dict(body)
        lie["metadata"] = {"continue": str(token + 1) if b.get("fresh") else "again"}
        if not b.get("with_items"):
            lie["items"] = []
        return await _raw(request, 200, json.dumps(lie).encode())
    if how == "stall":  # nothing (before the headers, or after them) for ever
        if b.get("after_headers"):
            resp = web.StreamResponse(status=200)
            resp.content_length = len(honest)
            await resp.prepare(request)
            await resp.write(honest[: len(honest) // 2])
        await asyncio.sleep(3600)
    if how == "trickle":  # one byte every ``pause`` seconds
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.content_length = len(honest)
        await resp.prepare(request)
        for i in range(len(honest)):
            await resp.write(honest[i : i + 1])
            await asyncio.sleep(b["pause"])
        return resp
    if how == "flood":  # a body without end
        return await _forever(request, honest[:-1], b" " * 65536, 0)
    if how == "length":  # a Content-Length the body never reaches
        resp = web.StreamResponse(status=b.get("code", 200))
        resp.content_length = b["claims"]
        await resp.prepare(request)
        await resp.write(honest)
        await asyncio.sleep(3600)
    if how == "gzip":  # compressed though not asked for: a bomb
        return await _raw(request, 200, _bomb(), **{"Content-Encoding": "gzip"})
    if how == "redirect":
        resp = web.StreamResponse(status=b["code"], headers={"Location": b["to"]})
        await resp.prepare(request)
        return resp
    if how == "close":  # the connection dropped without an answer
        assert request.transport is not None
        request.transport.close()
        await asyncio.sleep(3600)
    if how == "headers":  # more headers than a client reads
        resp = web.StreamResponse(status=200)
        for i in range(b["count"]):
            resp.headers[f"X-H-{i}"] = "v" * b.get("width", 10)
        resp.content_length = len(honest)
        await resp.prepare(request)
        await resp.write(honest)
        return resp
    if how == "slow":  # honest, a little late: within every bound
        await asyncio.sleep(b["pause"])
        return await _raw(request, code, honest)
    raise ValueError(f"unknown misbehaviour {how!r}")


def app(objects: list[dict[str, Any]]) -> web.Application:
    async def handle(request: web.Request) -> web.StreamResponse:
        parts = request.path.split("/", 3)  # "", "h", behaviour, rest
        if len(parts) < 4 or parts[1] != "h":
            return await _raw(request, 404, b"{}")
        b = _behaviour(parts[2])
        path = "/" + parts[3]
        query = parse_qs(request.query_string)
        if b.get("how") == "pages":  # its tokens are its own: the honest page is the first
            query.pop("continue", None)
        code, body = reply(
            objects, request.method, path, query, request.headers.get("Authorization")
        )
        route = _route(path)
        plural = route[3] if route else ""
        if (
            b.get("how", "honest") != "honest"
            and b.get("plural") in ("*", plural)
            and (code == 200 or b["how"] in ("status", "slow"))
        ):
            return await _misbehave(request, b, code, body)
        return await _raw(request, code, json.dumps(body).encode())

    application = web.Application()
    application.router.add_route("*", "/{tail:.*}", handle)
    return application


async def _serve(dirs: list[Path]) -> None:
    runner = web.AppRunner(app(fixture_objects(dirs)), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert server is not None
    port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(port, flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_serve([Path(p) for p in sys.argv[1:]]))
