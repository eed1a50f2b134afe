"""Hostile clients of ``edge-verify serve``, drawn by Hypothesis, then one honest one.

``serve`` answers whoever connects. A client may NACK whatever it gets with words
that forge a line of serve's output or drive the terminal, introduce itself with
such a node id, ask for types that do not exist or for 20,000 names, answer with
stale nonces, send bytes that are no request or no HTTP/2 at all, send more than
the byte budget in one message, or hold its stream open and say nothing. None of
that may change what the next client gets: after the hostile ones, an honest
client (the tool's own ADS client) must receive the whole snapshot, clusters first.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Final

from envoy_data_plane.envoy.config.core.v3 import Node
from envoy_data_plane.envoy.service.discovery.v3 import DiscoveryRequest, DiscoveryResponse
from envoy_data_plane.google.rpc import Status
from hypothesis import strategies as st
from peer_words import PEER_TEXT

from verifier.peers import Budget
from verifier.xds.ads_client import PullOptions, PullResult, pull
from verifier.xds.ads_wire import SOTW_PATH, open_stream
from verifier.xds.layout import CLUSTER_TYPE, LISTENER_TYPE, ROUTE_TYPE

KINDS: Final = (
    "nack-all", "node-text", "unknown-type", "many-names", "stale-nonce",
    "not-a-request", "garbage", "http1", "hold", "huge", "heavy",
)  # fmt: skip


@dataclass(frozen=True)
class ClientPlan:
    kind: str
    words: str = ""
    data: bytes = b""
    count: int = 0


CLIENT = st.builds(
    ClientPlan,
    kind=st.sampled_from(KINDS),
    words=PEER_TEXT,
    data=st.binary(max_size=100),
    count=st.integers(1, 20_000),
)
CLIENTS = st.lists(CLIENT, min_size=1, max_size=3).map(tuple)


async def _raw(port: int, data: bytes) -> None:
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    with contextlib.suppress(Exception):
        await writer.drain()
    writer.close()


async def hostile(port: int, plan: ClientPlan, held: list[object]) -> None:
    """One hostile client, over within a second; ``hold`` stays open (in ``held``)."""
    if plan.kind == "garbage":
        await _raw(port, plan.data or b"\x00")
        return
    if plan.kind == "http1":
        await _raw(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + plan.data)
        return
    wire = await open_stream("127.0.0.1", port, SOTW_PATH, Budget("serve", 1.0, 1 << 20), None)
    if plan.kind == "hold":
        held.append(wire)
        return
    try:
        await asyncio.wait_for(_converse(wire, plan), 1.0)
    except Exception:  # the server may well hang up on a client like this
        pass
    finally:
        wire.close()


async def _converse(wire: object, plan: ClientPlan) -> None:
    send, receive = wire.send, wire.receive  # type: ignore[attr-defined]
    node = Node(id=plan.words if plan.kind == "node-text" else "hostile")
    if plan.kind == "not-a-request":
        await send(b"\xff" + plan.data)
        return
    if plan.kind == "heavy":  # under the budget, costly to parse: empty nodes, or unknown fields
        await send((b"\x12\x00" if plan.count % 2 else b"x\x01") * (plan.count * 20))
        return
    if plan.kind == "huge":  # 2 MiB in one message: serve cuts the connection off at 1 MiB
        await send(b"\x0a" + b"x" * (2 << 20))
        return
    if plan.kind == "unknown-type":
        await send(bytes(DiscoveryRequest(node=node, type_url=f"type.googleapis.com/{plan.words}")))
        return
    if plan.kind == "many-names":
        names = [f"n{i}" for i in range(plan.count)]
        await send(bytes(DiscoveryRequest(node=node, type_url=ROUTE_TYPE, resource_names=names)))
        return
    for url in (CLUSTER_TYPE, LISTENER_TYPE):
        await send(bytes(DiscoveryRequest(node=node, type_url=url)))
    for _ in range(4):  # NACK (or answer with a stale nonce) whatever comes, while it comes
        try:
            resp = DiscoveryResponse.parse(await asyncio.wait_for(receive(), 0.1))
        except TimeoutError:
            return
        nonce = "stale" if plan.kind == "stale-nonce" else resp.nonce
        message = plan.words or "rejected"
        await send(
            bytes(
                DiscoveryRequest(
                    type_url=resp.type_url,
                    response_nonce=nonce,
                    resource_names=[],
                    error_detail=Status(code=3, message=message),
                )
            )
        )


async def honest(port: int) -> PullResult:
    """What an honest client gets now: the tool's own pull, as a plain Envoy would ask."""
    opts = PullOptions("honest-envoy", timeout=3.0, settle=0.05, max_bytes=1 << 20)
    return await pull("127.0.0.1", port, opts)
