"""An ADS client: subscribe to a control plane as the edge's node and keep what it serves.

``check`` must judge the xDS the edge really gets, and the only faithful way to get it
from a control plane is to ask as Envoy does: one ADS stream, Envoy's own type URLs,
wildcard clusters and listeners, then by name the endpoints, routes and secrets those
reference. Every response is answered as Envoy would (ACK, or NACK with the reason
when a resource does not decode), since a control plane that never hears back may
hold further types back. The pull ends when every referenced name has arrived and
nothing new has come for a settle period, or fails (naming what was still missing)
when the overall timeout expires: a read-only tool pointed at production must end.

The server is a peer, not a file, so it is bounded as one (``verifier.peers``): the
timeout covers the whole pull, a flood of versions that never settles included; the
bytes it sends count against ``--max-input-bytes`` (``verifier.xds.ads_wire``); and
each resource is read through the same layer as a file's JSON (``accept``), so bytes
that would crash a reader are the reason of a NACK, never an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final

from envoy_data_plane.envoy.config.core.v3 import Node
from envoy_data_plane.envoy.service.discovery.v3 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
)
from envoy_data_plane.google.protobuf import Any as AnyMessage
from envoy_data_plane.google.rpc import Status

from verifier.inputs import limits
from verifier.peers import (
    DEFAULT_TIMEOUT,
    Budget,
    PeerLimit,
    check_timeout,
    join_briefly,
    printable,
)
from verifier.xds.ads_accept import KIND, ORDER, WILDCARD, Held, Refused, accept
from verifier.xds.ads_wire import DELTA_PATH, SOTW_PATH, StreamEnded, open_stream
from verifier.xds.layout import (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    LISTENER_TYPE,
    ROUTE_TYPE,
    SECRET_TYPE,
)
from verifier.xds.snapshot import Snapshot

INVALID_ARGUMENT: Final = 3  # google.rpc.Code, what Envoy sends in its NACKs
DEFAULT_SETTLE: Final = 1.0
NACK_LIMIT: Final = 1000  # characters of a NACK's reason sent back to the server


class PullError(Exception):
    """The pull could not give a complete snapshot: unreachable, refused, or ended."""


@dataclass(frozen=True)
class PullOptions:
    node_id: str
    node_cluster: str = ""
    delta: bool = False
    timeout: float = DEFAULT_TIMEOUT  # the whole pull, connect to complete (flood included)
    settle: float = DEFAULT_SETTLE  # quiet period after completeness before the pull ends
    ssl: ssl.SSLContext | None = None
    max_bytes: int | None = None  # everything the server sends; None: --max-input-bytes


@dataclass(frozen=True)
class Nack:
    type_url: str
    nonce: str
    message: str

    def line(self) -> str:
        """The report line: the reason quotes the server's resources, so it is escaped."""
        return f"NACK sent for {printable(self.type_url, 200)}: {printable(self.message)}"


@dataclass
class _Type:
    names: set[str] = field(default_factory=set)  # subscribed (by name; wildcard types: none)
    held: dict[str, Held] = field(default_factory=dict)
    answered: bool = False  # a response of this type was accepted
    version: str = ""  # last accepted (SotW version_info, delta system_version_info)
    nonce: str = ""


@dataclass
class PullResult:
    snapshot: Snapshot
    versions: Mapping[str, str]
    nacks: list[Nack]


def tls_context(ca: str | None, cert: str | None, key: str | None) -> ssl.SSLContext:
    """A client TLS context for gRPC: ALPN h2, the CA to trust (system CAs when none),
    and a client certificate when the control plane asks for mTLS."""
    ctx = ssl.create_default_context(cafile=ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["h2"])
    return ctx


class _OutOfTime(Exception):
    """The deadline passed while the stream was still busy (a flood never idles)."""


@dataclass(frozen=True)
class _Read:
    """A response as decoded: its resources (name -> held), or why it is NACKed;
    neither for a type that was not asked for."""

    resp: Any
    got: dict[str, Held] | None = None
    refused: str | None = None


# --- the client ---------------------------------------------------------------------------


class _Session:
    """One pull: the subscriptions, what is held, and the requests still to send."""

    def __init__(self, opts: PullOptions, budget: Budget) -> None:
        self.opts = opts
        self.budget = budget
        self.types = {url: _Type() for url in ORDER}
        self.outbox: asyncio.Queue[object] = asyncio.Queue()
        self.nacks: list[Nack] = []
        self.activity = asyncio.Event()
        self.first = True

    def node(self) -> Node | None:
        """Sent on the first request only, as Envoy does with set_node_on_first_message_only."""
        if not self.first:
            return None
        self.first = False
        return Node(id=self.opts.node_id, cluster=self.opts.node_cluster)

    def wanted(self) -> dict[str, set[str]]:
        """The names each by-name type should be subscribed to, given what is held."""
        out: dict[str, set[str]] = {ENDPOINT_TYPE: set(), ROUTE_TYPE: set(), SECRET_TYPE: set()}
        for url in WILDCARD:
            for held in self.types[url].held.values():
                for kind, name in held.refs:
                    out[kind].add(name)
        return out

    def missing(self) -> list[str]:
        """What the snapshot still lacks, as ``kind/name`` (``kind/*``: no response yet)."""
        out = []
        for url in WILDCARD:  # never answered, the type was not seen at all (delta too)
            if not self.types[url].answered:
                out.append(f"{KIND[url]}/*")
        for url, names in self.wanted().items():
            out += [f"{KIND[url]}/{n}" for n in sorted(names - set(self.types[url].held))]
        return out

    def decode(self, url: str, resources: Iterable[tuple[str, AnyMessage]]) -> dict[str, Held]:
        """Name -> held; raises Refused with the reason a NACK carries."""
        out: dict[str, Held] = {}
        items = list(resources)
        cap = limits().max_items
        if len(items) > cap:
            raise Refused(
                f"{len(items):,} resources in one response, over the limit of {cap:,} "
                "(raise it with --max-list-length)"
            )
        for i, (given, packed) in enumerate(items):
            if self.budget.left() <= 0:
                raise _OutOfTime
            name, held = accept(url, given, packed, f"{self.budget.peer}:{KIND[url]}[{i}]")
            if name in out:
                raise Refused(f"two resources named {printable(name, 200)!r} in one response")
            out[name] = held
        return out

    def nack(self, url: str, nonce: str, reason: str) -> Status:
        self.nacks.append(Nack(url, nonce, reason))
        return Status(code=INVALID_ARGUMENT, message=reason[:NACK_LIMIT])

    def read(self, raw: bytes) -> _Read:
        """One response, as bytes, decoded with its resources (``decode``): run on the
        decoding thread, since a peer's bytes can cost seconds to parse and no parse
        can be interrupted, while the deadline must hold (``_receive``). A message that
        is not a DiscoveryResponse (or a DeltaDiscoveryResponse) ends the pull, since
        no answer can name it."""
        kind = DeltaDiscoveryResponse if self.opts.delta else DiscoveryResponse
        try:
            resp = kind.parse(raw)
            url = str(resp.type_url)
        except Exception as exc:  # whatever betterproto raises on bad bytes
            raise StreamEnded(
                f"the server sent a message that is not a {kind.__name__} "
                f"({len(raw):,} bytes): {printable(exc, 200)}"
            ) from None
        if url not in self.types:
            return _Read(resp)  # a type not asked for: ignored, as Envoy ignores it
        if isinstance(resp, DeltaDiscoveryResponse):
            items = ((r.name, r.resource) for r in resp.resources if r.resource)
        else:
            items = (("", r) for r in resp.resources)
        try:
            return _Read(resp, self.decode(url, items))
        except Refused as exc:
            return _Read(resp, refused=str(exc))

    def on_response(self, read: _Read) -> None:
        """Answer a response ``read`` decoded (ACK or NACK) and keep what it holds."""
        if read.got is None and read.refused is None:
            return
        if isinstance(read.resp, DeltaDiscoveryResponse):
            self.on_delta(read.resp, read)
        else:
            self.on_sotw(read.resp, read)

    # --- SotW ---

    def start_sotw(self) -> None:
        for url in WILDCARD:
            self.outbox.put_nowait(DiscoveryRequest(node=self.node(), type_url=url))

    def on_sotw(self, resp: DiscoveryResponse, read: _Read) -> None:
        url = resp.type_url
        t = self.types[url]
        got = read.got
        if got is None:
            t.nonce = resp.nonce
            self.outbox.put_nowait(
                DiscoveryRequest(
                    type_url=url,
                    version_info=t.version,
                    response_nonce=resp.nonce,
                    resource_names=sorted(t.names),
                    error_detail=self.nack(url, resp.nonce, read.refused or ""),
                )
            )
            return
        if url in WILDCARD:
            t.held = got
        else:  # by-name types: a response may carry only some of the names
            t.held.update(got)
            t.held = {n: m for n, m in t.held.items() if n in t.names}
        t.answered, t.version, t.nonce = True, resp.version_info, resp.nonce
        self.outbox.put_nowait(
            DiscoveryRequest(
                type_url=url,
                version_info=resp.version_info,
                response_nonce=resp.nonce,
                resource_names=sorted(t.names),
            )
        )
        self.resubscribe_sotw()

    def resubscribe_sotw(self) -> None:
        for url, names in self.wanted().items():
            t = self.types[url]
            if names != t.names:
                t.names = set(names)
                t.held = {n: m for n, m in t.held.items() if n in names}
                self.outbox.put_nowait(
                    DiscoveryRequest(
                        node=self.node(),
                        type_url=url,
                        version_info=t.version,
                        response_nonce=t.nonce,
                        resource_names=sorted(names),
                    )
                )

    # --- delta ---

    def start_delta(self) -> None:
        for url in WILDCARD:
            self.outbox.put_nowait(
                DeltaDiscoveryRequest(
                    node=self.node(), type_url=url, resource_names_subscribe=["*"]
                )
            )

    def on_delta(self, resp: DeltaDiscoveryResponse, read: _Read) -> None:
        url = resp.type_url
        t = self.types[url]
        got = read.got
        if got is None:
            self.outbox.put_nowait(
                DeltaDiscoveryRequest(
                    type_url=url,
                    response_nonce=resp.nonce,
                    error_detail=self.nack(url, resp.nonce, read.refused or ""),
                )
            )
            return
        t.held.update(got)
        for name in resp.removed_resources:
            t.held.pop(name, None)
        t.answered, t.version, t.nonce = True, resp.system_version_info, resp.nonce
        self.outbox.put_nowait(DeltaDiscoveryRequest(type_url=url, response_nonce=resp.nonce))
        for by_name, names in self.wanted().items():
            bt = self.types[by_name]
            added, dropped = names - bt.names, bt.names - names
            if added or dropped:
                bt.names = set(names)
                for name in dropped:
                    bt.held.pop(name, None)
                self.outbox.put_nowait(
                    DeltaDiscoveryRequest(
                        node=self.node(),
                        type_url=by_name,
                        resource_names_subscribe=sorted(added),
                        resource_names_unsubscribe=sorted(dropped),
                    )
                )

    def result(self) -> PullResult:
        held = {url: [h.message for h in t.held.values()] for url, t in self.types.items()}
        snap = Snapshot(
            clusters=tuple(held[CLUSTER_TYPE]),  # type: ignore[arg-type]
            endpoints=tuple(held[ENDPOINT_TYPE]),  # type: ignore[arg-type]
            listeners=tuple(held[LISTENER_TYPE]),  # type: ignore[arg-type]
            routes=tuple(held[ROUTE_TYPE]),  # type: ignore[arg-type]
            secrets=tuple(held[SECRET_TYPE]),  # type: ignore[arg-type]
        )
        versions = {KIND[url]: t.version for url, t in self.types.items() if t.answered}
        return PullResult(snap, versions, list(self.nacks))

    def incomplete(self) -> PeerLimit:
        """The deadline's error: what was still missing, and what was NACKed on the way."""
        missing = self.missing() or ["(the snapshot was still changing)"]
        if not any(t.answered for t in self.types.values()) and not self.nacks:
            return self.budget.expired("no response")
        return PeerLimit(
            f"{self.budget.peer}: incomplete after {self.opts.timeout:g}s (raise it with "
            f"--timeout); still missing: {', '.join(missing)}{self.nacked()}",
            "timed-out",
        )

    def nacked(self) -> str:
        """Why each type was last NACKed, for the error of a pull that did not complete
        (the reason quotes the server: escaped)."""
        last = {KIND.get(n.type_url, "?"): n.message for n in self.nacks}
        return "".join(
            f"; NACKed {kind}: {printable(why, 300)}" for kind, why in sorted(last.items())
        )


async def _receive(session: _Session, host: str, port: int) -> None:
    """Read responses until the stream ends (always by raising)."""
    opts = session.opts
    path = DELTA_PATH if opts.delta else SOTW_PATH
    loop = asyncio.get_running_loop()
    wire = await open_stream(host, port, path, session.budget, opts.ssl)
    sender = asyncio.create_task(_send(session, wire))
    try:
        if opts.delta:
            session.start_delta()
        else:
            session.start_sotw()
        decoding = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ads-decode")
        try:
            while True:
                raw = await wire.receive()
                # Off the loop, so that the deadline holds through a parse of hostile bytes
                # (a parse cannot be interrupted; the thread is left to end on its own).
                read = await loop.run_in_executor(decoding, session.read, raw)
                session.on_response(read)
                session.activity.set()
                if session.budget.left() <= 0:
                    raise _OutOfTime
        finally:
            decoding.shutdown(wait=False, cancel_futures=True)
            join_briefly(decoding)
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        wire.close()


async def _send(session: _Session, wire: Any) -> None:
    while (item := await session.outbox.get()) is not None:
        await wire.send(bytes(item))  # type: ignore[call-overload]


async def _until_complete(session: _Session) -> None:
    """Return once nothing is missing and no response came for a whole settle period."""
    while True:
        await session.activity.wait()
        session.activity.clear()
        if session.missing():
            continue
        try:
            await asyncio.wait_for(session.activity.wait(), session.opts.settle)
        except TimeoutError:
            if not session.missing():
                return


def budget_for(host: str, port: int, opts: PullOptions) -> Budget:
    max_bytes = opts.max_bytes if opts.max_bytes is not None else limits().max_bytes
    return Budget(f"ADS at {host}:{port}", opts.timeout, max_bytes)


async def pull(host: str, port: int, opts: PullOptions, budget: Budget | None = None) -> PullResult:
    """The snapshot the control plane at ``host``:``port`` serves to node ``opts.node_id``,
    within ``budget`` (by default ``opts``' timeout and byte budget from now)."""
    budget = budget if budget is not None else budget_for(host, port, opts)
    session = _Session(opts, budget)
    receiver = asyncio.create_task(_receive(session, host, port))
    done = asyncio.create_task(_until_complete(session))
    try:
        finished, _ = await asyncio.wait(
            {receiver, done}, timeout=budget.left(), return_when=asyncio.FIRST_COMPLETED
        )
        if done in finished:
            return session.result()
        if receiver in finished:
            exc = receiver.exception()
            if isinstance(exc, PeerLimit):
                raise exc
            if isinstance(exc, StreamEnded):
                raise PullError(f"{budget.peer}: {exc}{session.nacked()}") from None
            if isinstance(exc, ssl.SSLError):
                raise PullError(f"{budget.peer}: TLS: {printable(exc.reason or exc)}") from None
            if isinstance(exc, OSError):
                raise PullError(f"{budget.peer}: {printable(exc.strerror or exc)}") from None
            if not isinstance(exc, _OutOfTime):
                raise PullError(f"{budget.peer}: {type(exc).__name__}: {printable(exc)}")
        raise session.incomplete()
    finally:
        session.outbox.put_nowait(None)
        for task in (receiver, done):
            task.cancel()
        await asyncio.wait({receiver, done}, timeout=1.0)
        for task in (receiver, done):
            if task.done() and not task.cancelled():
                with contextlib.suppress(BaseException):
                    task.exception()


_URL_PARAMETERS: Final = ("node", "cluster", "delta", "timeout", "settle")


def parse_ads_url(url: str) -> tuple[str, int, PullOptions]:
    """``ads://HOST:PORT?node=ID[&cluster=C][&delta=1][&timeout=S][&settle=S]`` -> where
    and how."""
    from urllib.parse import parse_qs, urlsplit

    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    unknown = sorted(set(query) - set(_URL_PARAMETERS))
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "ads" or not parts.hostname or port is None:
        raise PullError(f"{url}: expected ads://HOST:PORT?node=ID[&cluster=C][&delta=1]")
    if unknown:
        known = ", ".join(_URL_PARAMETERS)
        raise PullError(f"{url}: unknown parameter {printable(unknown[0], 100)!r} ({known})")
    if not query.get("node"):
        raise PullError(f"{url}: say which node to pull as: ?node=ID")
    try:
        timeout = check_timeout(float(query.get("timeout", DEFAULT_TIMEOUT)))
    except ValueError:
        raise PullError(f"{url}: timeout must be a finite number of seconds above 0") from None
    try:
        settle = float(query.get("settle", DEFAULT_SETTLE))
    except ValueError:
        settle = -1.0
    if not 0 <= settle < timeout:
        raise PullError(f"{url}: settle must be a number of seconds from 0 to the timeout")
    opts = PullOptions(
        node_id=query["node"],
        node_cluster=query.get("cluster", ""),
        delta=query.get("delta", "0") not in ("", "0", "false"),
        timeout=timeout,
        settle=settle,
    )
    return parts.hostname, port, opts
