"""GET from a Kubernetes API server within a deadline and a byte budget, and read the
answer as any input is read.

An API server is a peer the tool does not control: a hostile or broken one answered
a page at 1 byte/s (under every per-read timeout, so none fired), sent a continue
token that never ended, nested an object 5,000 deep, or answered a list with
``items`` that was a string, null or a ``Status``, and the tool hung, crashed or
checked nothing and passed. So every request has a timeout from connecting to its
last byte (``--cluster-timeout``) and the whole read a deadline
(``--cluster-deadline``); an answer is at most --max-input-bytes, never compressed,
never a redirect followed; its bytes are decoded by ``verifier.inputs`` as a file's
are (UTF-8, depth, integers, lengths); and an answer without the shape asked for is
an error naming the server, the kind and the field. Each is exit 2: a read that
failed never lets the run pass.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode

from verifier.children import printable
from verifier.errors import InputError, InputErrors, clip
from verifier.gatewayapi.kubeconfig import Endpoint
from verifier.inputs import LIMIT_FLAGS, decode, limits, load_json

ERROR_BODY = 64 * 1024  # what is read of a non-2xx answer: enough for its Status


def connect_error(exc: BaseException) -> str:
    """Why a connection failed, in words: ``127.0.0.1:1: Connection refused``. aiohttp's
    own text holds the repr of an SSLContext and the OS error's raw args (a new user
    read ``ssl:<ssl.SSLContext object at 0x7f...> [Connect call failed ...]``)."""
    import errno
    import os

    import aiohttp

    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        why = str(exc.certificate_error)
    elif isinstance(exc, aiohttp.ClientConnectorError):
        oserr = exc.os_error
        code = oserr.errno
        why = os.strerror(code) if code and code in errno.errorcode else str(oserr)
    else:
        return printable(clip(str(exc) or type(exc).__name__))
    if isinstance(exc, aiohttp.ClientConnectorError):
        why = f"{exc.host}:{exc.port}: {why or type(exc.os_error).__name__}"
    return printable(clip(why))


class Status(Exception):
    """A non-2xx answer: its code, reason and the Status message, if it sent one."""

    def __init__(self, status: int, reason: str, message: str = "") -> None:
        words = f"{status} {reason}".strip() + (f": {message}" if message else "")
        super().__init__(words)
        self.status = status
        self.reason = reason
        self.message = message


class Api:
    """One API server, GET only, each request bounded by ``timeout`` and every request
    by the ``deadline`` (time.monotonic()). Synchronous for its callers: it owns an
    event loop, used by nothing else, until ``close``."""

    def __init__(self, endpoint: Endpoint, timeout: float, deadline: float) -> None:
        import aiohttp

        self.endpoint = endpoint
        self.where = f"cluster:{endpoint.context}"
        self.timeout = timeout
        self.deadline = deadline
        self.received = 0  # bytes of every answer so far
        self._loop = asyncio.new_event_loop()

        async def session() -> aiohttp.ClientSession:
            return aiohttp.ClientSession(
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=None),
            )

        self._session = self._loop.run_until_complete(session())

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.run_until_complete(self._session.close())
            self._loop.close()

    def error(self, code: str, message: str, kind: str = "") -> InputErrors:
        server = self.endpoint.server
        return InputErrors([InputError(self.where, 0, kind, code, f"{server}: {message}")])

    def get(
        self, path: str, query: Sequence[tuple[str, str]] = (), kind: str = ""
    ) -> dict[str, Any]:
        """The JSON object at ``path``; Status for a non-2xx answer; InputErrors for
        anything else (unreachable, too slow, too big, not a JSON object)."""
        url = self.endpoint.server + path + (f"?{urlencode(list(query))}" if query else "")
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self._late(path, kind)
        per_request = left >= self.timeout
        try:
            status, reason, body = self._loop.run_until_complete(
                asyncio.wait_for(self._fetch(url, path, kind), min(self.timeout, left))
            )
        except TimeoutError:
            if not per_request:
                raise self._late(path, kind) from None
            message = (
                f"GET {path}: no complete answer within {self.timeout:g}s "
                "(raise it with --cluster-timeout)"
            )
            raise self.error("timeout", message, kind) from None
        self.received += len(body)
        if not 200 <= status < 300:
            raise Status(status, reason, _status_message(body))
        return self._object(path, body, kind)

    def _late(self, path: str, kind: str) -> InputErrors:
        message = (
            f"GET {path}: the read of the cluster passed its deadline of "
            "--cluster-deadline seconds (raise it with --cluster-deadline)"
        )
        return self.error("timeout", message, kind)

    async def _fetch(self, url: str, path: str, kind: str) -> tuple[int, str, bytes]:
        import aiohttp
        from aiohttp.http_exceptions import HttpProcessingError

        headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
        if self.endpoint.authorization is not None:
            headers["Authorization"] = self.endpoint.authorization
        budget = limits().max_bytes
        try:
            async with self._session.get(
                url,
                headers=headers,
                allow_redirects=False,
                ssl=self.endpoint.tls if self.endpoint.tls is not None else True,
                server_hostname=self.endpoint.server_name,
                proxy=self.endpoint.proxy,
            ) as resp:
                ok = 200 <= resp.status < 300
                if 300 <= resp.status < 400:
                    where = printable(clip(resp.headers.get("Location", "")))
                    message = f"GET {path}: answered {resp.status} to {where}; not followed"
                    raise self.error("redirect", message, kind)
                encoding = resp.headers.get("Content-Encoding", "identity").lower()
                if ok and encoding not in ("identity", ""):
                    message = f"GET {path}: answered in {printable(clip(encoding))}, not asked for"
                    raise self.error("bad-answer", message, kind)
                if ok and resp.content_length is not None and resp.content_length > budget:
                    raise self._too_large(path, f"{resp.content_length:,} bytes", kind)
                body = bytearray()
                limit = budget if ok else ERROR_BODY
                async for chunk in resp.content.iter_any():
                    body += chunk
                    if len(body) > limit:
                        if not ok:
                            break  # enough of an error's words
                        raise self._too_large(path, f"more than {budget:,} bytes", kind)
                return resp.status, resp.reason or "", bytes(body[:limit])
        except (aiohttp.ClientError, HttpProcessingError, OSError, ValueError) as exc:
            why = connect_error(exc)
            message = f"cannot reach the API server (GET {path}): {why}"
            raise self.error("unreachable", message, kind) from None

    def _too_large(self, path: str, size: str, kind: str) -> InputErrors:
        flag = LIMIT_FLAGS["max_bytes"]
        message = (
            f"GET {path}: an answer of {size}, over the limit of "
            f"{limits().max_bytes:,} (raise it with {flag})"
        )
        return self.error("too-large", message, kind)

    def _object(self, path: str, body: bytes, kind: str) -> dict[str, Any]:
        """The answer decoded as a file is, and a JSON object that is not a Status."""
        where = f"{self.endpoint.server}{path}"
        try:
            data = load_json(decode(body, where), where)
        except InputErrors as exc:
            first = exc.errors[0]
            field = f"{first.field}: " if first.field else ""
            message = f"GET {path}: the answer {field}{first.message}"
            raise self.error(first.code, message, kind) from None
        if not isinstance(data, dict):
            message = f"GET {path}: the answer is a JSON {_json_type(data)}, not an object"
            raise self.error("bad-answer", message, kind)
        if data.get("kind") == "Status":
            said = printable(clip(str(data.get("message") or data.get("reason") or "")))
            message = f"GET {path}: the answer is a Status ({said or 'no message'}), not {kind}"
            raise self.error("bad-answer", message, kind)
        return data


def _status_message(body: bytes) -> str:
    """The ``message`` of a Status body, made printable and short; else nothing."""
    import json

    try:
        data = json.loads(body.decode("utf-8"))
    except (ValueError, RecursionError):
        return ""
    said = data.get("message") if isinstance(data, dict) else None
    return printable(clip(said)) if isinstance(said, str) else ""


def _json_type(value: Any) -> str:
    return {list: "array", str: "string", type(None): "null", bool: "boolean"}.get(
        type(value), "number"
    )


def json_type(value: Any) -> str:
    """How JSON names ``value``'s type, for errors about an answer's shape."""
    return "object" if isinstance(value, dict) else _json_type(value)
