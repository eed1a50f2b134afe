"""What the echo backend does with a request, for models that need a backend.

Some expectations depend on the backend rather than on configuration: echo
waits for ``?delay=``, sets the response headers named in
``X-Echo-Set-Header`` and completes WebSocket handshakes. The Envoy model takes
such a reply as input; this builds it from the request the same way
``verifier.live.echo`` behaves, so model and live runs agree on the backend.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import replace

from verifier.gatewayapi.resources import Resources
from verifier.semantics.envoy.model import BackendReply
from verifier.semantics.request import Outcome, Request, apply_response_ops, headers_from_mapping

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 section 1.3

# Go's time.ParseDuration units, as the conformance echo backend reads ?delay=.
_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(text: str) -> float | None:
    """Seconds in a Go ``time.ParseDuration`` string ("2s", "1m30s", "100ms"); None if invalid."""
    if text in ("0", ""):
        return 0.0 if text == "0" else None
    pos, total = 0, 0.0
    for m in _GO_DURATION.finditer(text):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _GO_UNITS[m.group(2)]
        pos = m.end()
    return total if pos == len(text) else None


def go_canonical(name: str) -> str:
    """Go's CanonicalMIMEHeaderKey: what echo-basic's ``headers`` keys look like."""
    if not re.fullmatch(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+", name):
        return name
    return "-".join(p[:1].upper() + p[1:].lower() for p in name.split("-"))


_STATUS_URI = re.compile(r"/status/(\d\d\d)")


def echo_status(path: str, request_uri: str) -> int | None:
    """The status echo-basic's own handlers answer with, or None for an echo.

    ``path`` is the URL path (no query), ``request_uri`` the request target as
    sent: ``/health`` is 200; any path under ``/status/`` is the three digits of
    an exact ``/status/NNN`` target, else 400 (echo-basic's ``statusHandler``).
    """
    if path == "/health":
        return 200
    if path.startswith("/status/"):
        found = _STATUS_URI.fullmatch(request_uri)
        return int(found.group(1)) if found else 400
    return None


def echo_reply(request: Request) -> BackendReply:
    status = echo_status(request.path.partition("?")[0], request.path)
    if status is not None:
        return BackendReply(status if status != 200 else None, (), 0)
    latency_ms = 0
    for part in request.query.split("&"):
        name, _, value = part.partition("=")
        if name == "delay":
            seconds = parse_go_duration(value)
            latency_ms = int((seconds or 0.0) * 1000)
    pairs: list[tuple[str, str]] = []
    for raw in request.header("x-echo-set-header"):
        for item in raw.split(","):
            name, sep, value = item.partition(":")
            if sep:
                pairs.append((name.strip(), value.strip()))
    status = None
    key = request.header("sec-websocket-key")
    if request.header("upgrade") and key:
        accept = base64.b64encode(hashlib.sha1((key[0] + WS_GUID).encode()).digest()).decode()
        pairs += [("sec-websocket-accept", accept), ("upgrade", "websocket")]
        status = 101
    return BackendReply(status, headers_from_mapping(dict(pairs)) if pairs else (), latency_ms)


def spec_client_view(res: Resources, request: Request, outcome: Outcome) -> Outcome:
    """What the client sees when the spec model's outcome meets the echo backend.

    The spec model answers for the gateway; echo adds its own behaviour: a
    forwarded request whose ``?delay=`` is past the deadline gets the
    gateway's 504; a WebSocket handshake to a ``kubernetes.io/ws`` Service port
    is answered 101 (RFC 6455); response header operations apply on top of
    the headers echo sets.
    """
    if outcome.status != 200 or outcome.request is None:
        return outcome
    fwd = outcome.request
    reply = echo_reply(replace(request, path=fwd.path, headers=fwd.headers))
    final = apply_response_ops(reply.headers, outcome.response_header_ops)
    out = replace(outcome, response_headers=final)
    deadlines = [t for t in (out.request_timeout_ms, out.backend_timeout_ms) if t]
    if reply.latency_ms and deadlines and reply.latency_ms > min(deadlines):
        return Outcome(504)
    if reply.status is not None and reply.status != 101:
        return replace(out, status=reply.status)  # /status/NNN: echo-basic's own answer
    if reply.status == 101 and _app_protocols(res, out) == {"kubernetes.io/ws"}:
        ws = tuple((k, v) for k, v in reply.headers if k in ("sec-websocket-accept", "upgrade"))
        return replace(out, status=101, response_headers=ws)
    return out


def _app_protocols(res: Resources, outcome: Outcome) -> set[str | None]:
    found: set[str | None] = set()
    for b in outcome.backends:
        svc = res.services.get((b.namespace, b.name))
        if svc is not None:
            found |= {p.app_protocol for p in svc.ports if p.port == b.port}
    return found
