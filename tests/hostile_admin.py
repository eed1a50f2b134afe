"""A hostile Envoy admin endpoint over raw HTTP/1.1, its misbehaviour drawn by Hypothesis.

What ``pull --admin`` and ``check --xds http://`` read is a config_dump; what this
server answers is one only as far as its plan says: the body damaged as files are
damaged (tests/damage.py), in another charset, with a 5,000-digit integer, nested
thousands deep, with fields of the wrong type, a private key in metadata, in an
unknown field of a DataSource or in ``error_state.details``, a rejected update
whose details forge a line of the tool's output; delivered with a lying or a
5 GB Content-Length, chunked forever, gzip-bombed, trickled a byte at a time, cut
short, or never; or not a 200 at all: a 500 with megabytes of body, a redirect to
the cloud's metadata address or back to itself.

Plain asyncio rather than aiohttp's server: every one of those is a byte the
server must be free to get wrong.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import gzip
import json
import time
from dataclasses import dataclass, field
from typing import Any, Final

from damage import DAMAGE, Damage, damaged, json_document
from hypothesis import strategies as st
from peer_words import KEY_FORMS, PEER_TEXT, weighted

METADATA_URL: Final = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"
BIG: Final = 5 * 10**9  # a Content-Length no answer should make anyone allocate


@dataclass(frozen=True)
class AdminPlan:
    status: int = 200
    charset: str | None = None
    length: str = "honest"  # honest, absent, short, long, huge, chunked, endless
    encoding: str = "identity"  # identity, gzip, bomb
    body: str = (
        "valid"  # valid, damaged, recoded, huge-int, deep, wrong-type, key, details, empty-configs
    )
    damage: Damage = ([], [])
    where: int = 0  # which place a drawn value goes
    form: int = 0  # which key form, charset, depth...
    words: str = ""
    delivery: str = "at-once"  # at-once, trickle, stall, close-early, silent
    location: str = METADATA_URL

    @property
    def honest(self) -> bool:
        return self == AdminPlan()


PLANS: st.SearchStrategy[AdminPlan] = st.builds(
    AdminPlan,
    status=weighted((14, 200), (1, 500), (1, 307), (1, 302), (1, 404)),
    charset=weighted(
        (8, None), (2, "utf-8"), (1, "utf-16"), (1, "latin-1"), (1, "x-unknown"), (1, "\x1b[31m")
    ),
    length=weighted(
        (8, "honest"),
        (2, "absent"),
        (1, "short"),
        (1, "long"),
        (1, "huge"),
        (2, "chunked"),
        (1, "endless"),
    ),
    encoding=weighted((12, "identity"), (1, "gzip"), (1, "bomb")),
    body=weighted(
        (3, "valid"),
        (5, "damaged"),
        (1, "recoded"),
        (1, "huge-int"),
        (1, "deep"),
        (2, "wrong-type"),
        (3, "key"),
        (2, "details"),
        (1, "empty-configs"),
    ),
    damage=DAMAGE,
    where=st.integers(0, 1000),
    form=st.integers(0, 1000),
    words=PEER_TEXT,
    delivery=weighted(
        (12, "at-once"), (1, "trickle"), (1, "stall"), (1, "close-early"), (1, "silent")
    ),
    location=st.sampled_from([METADATA_URL, "/config_dump?again", "\x1b[2J", ""]),
)


@dataclass
class Record:
    connected: float | None = None
    closed: float | None = None
    requests: list[bytes] = field(default_factory=list)  # request lines
    body: bytes = b""  # the body as sent (for an exit 0: what was read)
    proper: bool = False  # the answer was a complete, honest 200 of a readable config_dump


# --- the body ----------------------------------------------------------------------------------


def _dynamic_listener(doc: dict[str, Any]) -> dict[str, Any] | None:
    for config in doc.get("configs", []):
        if str(config.get("@type", "")).endswith("ListenersConfigDump"):
            entries = config.get("dynamic_listeners") or []
            return entries[0] if entries else None
    return None


def _with_key(doc: dict[str, Any], where: int, key: str) -> dict[str, Any]:
    """``doc`` with ``key`` where no field table expects one."""
    doc = copy.deepcopy(doc)
    clusters = next(
        (c for c in doc["configs"] if str(c.get("@type", "")).endswith("ClustersConfigDump")), None
    )
    place = where % 4
    if place == 0 and clusters:  # cluster metadata
        entry = (clusters.get("dynamic_active_clusters") or clusters.get("static_clusters"))[0]
        entry["cluster"]["metadata"] = {"filter_metadata": {"peer": {"k": key}}}
    elif place == 1:  # an unknown extra field of a DataSource beside its inline_string
        doc["configs"].append(_secrets({"inline_string": "[redacted]", "extra": key}))
    elif place == 2:  # private_key as a plain string
        doc["configs"].append(_secrets(key))
    else:  # quoted in a rejected update's details
        listener = _dynamic_listener(doc)
        if listener is not None:
            listener["error_state"] = {"details": f"bad key: {key}", "version_info": "2"}
    return doc


def _secrets(private_key: Any) -> dict[str, Any]:
    return {
        "@type": "type.googleapis.com/envoy.admin.v3.SecretsConfigDump",
        "dynamic_active_secrets": [
            {
                "name": "peer",
                "secret": {
                    "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
                    "name": "peer",
                    "tls_certificate": {"private_key": private_key},
                },
            }
        ],
    }


def body_of(plan: AdminPlan, valid: dict[str, Any]) -> bytes:
    """The body the plan sends (before any Content-Encoding)."""
    if plan.body == "damaged":
        text = json_document(valid)
        return damaged(text, plan.damage, valid, json_document, 2)
    if plan.body == "recoded":
        codec = ("utf-16", "utf-32", "latin-1")[plan.form % 3]
        doc = copy.deepcopy(valid)
        doc["configs"][0]["note"] = "caf\u00e9 \u00e9t\u00e9"
        return json.dumps(doc, ensure_ascii=False).encode(codec)
    if plan.body == "huge-int":
        return json_document(valid).replace(b"{", b'{"n": ' + b"7" * 5000 + b", ", 1)
    if plan.body == "deep":
        depth = 600 + plan.form * 5
        return b'{"configs": [' + b"[" * depth + b"]" * depth + b"]}"
    if plan.body == "wrong-type":
        doc = copy.deepcopy(valid)
        wrong = [7, "x", None, {"a": 1}, [1, 2]][plan.form % 5]
        config = doc["configs"][plan.where % len(doc["configs"])]
        sections = [k for k, v in config.items() if isinstance(v, list)] or ["@type"]
        config[sections[plan.where % len(sections)]] = wrong
        return json_document(doc)
    if plan.body == "key":
        return json_document(_with_key(valid, plan.where, KEY_FORMS[plan.form % len(KEY_FORMS)]))
    if plan.body == "details":
        doc = copy.deepcopy(valid)
        listener = _dynamic_listener(doc)
        if listener is not None:
            listener["error_state"] = {"details": plan.words, "version_info": plan.words[:20]}
        return json_document(doc)
    if plan.body == "empty-configs":
        return b'{"configs": []}'
    return json_document(valid)


def readable(body: bytes) -> bool:
    """What the tool may call a config_dump (the test's own reading, independent of
    the tool's): strict UTF-8 JSON, no key twice, no NaN, an object whose configs
    list holds a dump of xDS resources."""

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        if len({k for k, _ in pairs}) != len(pairs):
            raise ValueError("duplicate")
        return dict(pairs)

    def refuse(name: str) -> Any:
        raise ValueError(name)

    try:
        doc = json.loads(body.decode("utf-8"), object_pairs_hook=unique, parse_constant=refuse)
    except (ValueError, RecursionError):
        return False
    configs = doc.get("configs") if isinstance(doc, dict) else None
    if not isinstance(configs, list):
        return False
    return any(
        isinstance(c, dict) and str(c.get("@type", "")).endswith("ConfigDump")
        and not str(c.get("@type", "")).endswith("BootstrapConfigDump")
        for c in configs
    )  # fmt: skip


# --- the server --------------------------------------------------------------------------------


class HostileAdmin(asyncio.Protocol):
    def __init__(self, plan: AdminPlan, valid: dict[str, Any], record: Record) -> None:
        self.plan, self.valid, self.record = plan, valid, record
        self.inbox = bytearray()
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.record.connected = self.record.connected or time.monotonic()

    def connection_lost(self, exc: Exception | None) -> None:
        self.record.closed = time.monotonic()
        if self.task is not None:
            self.task.cancel()

    def data_received(self, data: bytes) -> None:
        self.inbox += data
        if b"\r\n\r\n" not in self.inbox or self.task is not None:
            return
        self.record.requests.append(bytes(self.inbox.split(b"\r\n", 1)[0]))
        self.task = asyncio.get_running_loop().create_task(self.answer())

    async def answer(self) -> None:
        plan, transport = self.plan, self.transport
        assert transport is not None
        if plan.delivery == "silent":
            return
        body = body_of(plan, self.valid)
        self.record.body = body
        sent = body
        headers = [f"HTTP/1.1 {plan.status} Whatever"]
        ctype = "application/json" + (f"; charset={plan.charset}" if plan.charset else "")
        headers.append(f"Content-Type: {ctype}")
        if plan.status in (301, 302, 307, 308):
            headers.append(f"Location: {plan.location}")
        if plan.encoding == "gzip":
            sent = gzip.compress(body)
            headers.append("Content-Encoding: gzip")
        elif plan.encoding == "bomb":
            sent = bomb()
            headers.append("Content-Encoding: gzip")
        if plan.status == 500:
            sent = b"\x1b[31m" + b"E" * (8 << 20)
        chunked = plan.length in ("chunked", "endless")
        if chunked:
            headers.append("Transfer-Encoding: chunked")
        elif plan.length != "absent":
            size = {"honest": len(sent), "short": max(0, len(sent) - 10), "long": len(sent) + 10,
                    "huge": BIG}[plan.length]  # fmt: skip
            headers.append(f"Content-Length: {size}")
        head = ("\r\n".join(headers) + "\r\n\r\n").encode("utf-8", "replace")
        self.record.proper = (
            plan.status == 200
            and plan.length in ("honest", "absent", "chunked")
            and plan.encoding == "identity"
            and plan.charset in (None, "utf-8")
            and plan.delivery in ("at-once", "trickle")
            and readable(body)
        )
        if plan.delivery == "stall":
            transport.write(head)
            return
        if chunked:
            payload = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in _parts(sent))
            payload += b"" if plan.length == "endless" else b"0\r\n\r\n"
        else:
            payload = sent
        if plan.delivery == "close-early":
            transport.write(head + payload[: len(payload) // 2])
            transport.close()
            return
        await self.write(head + payload)
        if plan.length == "endless":
            filler = b"4000\r\n" + b" " * 0x4000 + b"\r\n"
            while not transport.is_closing():
                transport.write(filler)
                await asyncio.sleep(0)
        if plan.length == "absent" and not transport.is_closing():
            transport.close()  # the end of the body is the end of the connection

    async def write(self, data: bytes) -> None:
        assert self.transport is not None
        if self.plan.delivery != "trickle":
            self.transport.write(data)
            return
        for at in range(0, len(data), 64):
            if self.transport.is_closing():
                return
            self.transport.write(data[at : at + 64])
            await asyncio.sleep(0.02)


@functools.cache
def bomb() -> bytes:
    """64 MiB of spaces in 64 KiB of gzip (made once: it takes the server a while)."""
    return gzip.compress(b" " * (64 << 20), compresslevel=9)


def _parts(data: bytes, size: int = 4096) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]
