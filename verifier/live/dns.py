"""A tiny authoritative DNS server for ``<svc>.<ns>.svc.cluster.local``.

The translator's non-mesh clusters are STRICT_DNS clusters dialling Service
names, exactly as the edge does in a cluster. To run them on one machine we do
not rewrite those names (that would change what is under test); we point
Envoy's c-ares resolver at this server instead, which answers each Service
name with the loopback IP of its echo backend. Unknown names get NXDOMAIN, so
a cluster dialling a name the harness did not expect fails loudly (no
endpoints, 503) instead of leaking to the host's resolver.

UDP and TCP are served on the same port (c-ares retries truncated answers
over TCP, and may be configured to use TCP only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections.abc import Mapping

from dnslib import QTYPE, RCODE, RR, A, DNSRecord

log = logging.getLogger(__name__)

TTL = 30


def service_fqdn(namespace: str, service: str, domain: str = "cluster.local") -> str:
    """The cluster DNS name of a Service, as kube-dns serves it."""
    return f"{service}.{namespace}.svc.{domain}"


def _answer(table: Mapping[str, str], data: bytes) -> bytes | None:
    """The wire reply to one query: A for known names, NODATA for other types, else NXDOMAIN."""
    try:
        query = DNSRecord.parse(data)
    except Exception:  # dnslib raises several types on garbage; a resolver never sends it
        log.debug("unparseable DNS query dropped")
        return None
    reply = query.reply()
    for question in query.questions:
        name = str(question.qname).rstrip(".").lower()
        ip = table.get(name)
        if ip is None:
            reply.header.rcode = RCODE.NXDOMAIN
        elif question.qtype in (QTYPE.A, QTYPE.ANY):
            reply.add_answer(RR(question.qname, QTYPE.A, rdata=A(ip), ttl=TTL))
        # Known name, other type (AAAA): NOERROR without answers, as kube-dns does.
    packed: bytes = reply.pack()
    return packed


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, table: Mapping[str, str]) -> None:
        self.table = table
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a datagram endpoint's transport

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        reply = _answer(self.table, data)
        if reply is not None and self.transport is not None:
            self.transport.sendto(reply, addr)


class DnsServer:
    """Answers A queries from ``table`` (lower-case FQDN without trailing dot -> IPv4).

    The table is live: entries added after ``start()`` are answered too, so the
    harness can start this concurrently with the echo backends whose IPs it
    only learns once they are bound.
    """

    def __init__(self, table: Mapping[str, str] | None = None, host: str = "127.0.0.1") -> None:
        self.table: dict[str, str] = {k.lower().rstrip("."): v for k, v in (table or {}).items()}
        self.host = host
        self.port = 0
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None

    async def start(self) -> DnsServer:
        """Bind UDP and TCP on one free port (retrying if TCP's half is taken)."""
        loop = asyncio.get_running_loop()
        for _attempt in range(20):
            udp, _ = await loop.create_datagram_endpoint(
                lambda: _Udp(self.table), local_addr=(self.host, 0), family=socket.AF_INET
            )
            port = int(udp.get_extra_info("sockname")[1])
            try:
                tcp = await asyncio.start_server(self._serve_tcp, self.host, port)
            except OSError:
                udp.close()
                continue
            self._udp, self._tcp, self.port = udp, tcp, port
            return self
        raise OSError("no port free for both UDP and TCP DNS")

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """RFC 1035 4.2.2: each message is prefixed by its two-byte length."""
        try:
            while True:
                size = struct.unpack("!H", await reader.readexactly(2))[0]
                reply = _answer(self.table, await reader.readexactly(size))
                if reply is None:
                    break
                writer.write(struct.pack("!H", len(reply)) + reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def resolve(self, name: str, timeout: float = 2.0) -> str | None:
        """Ask this server for ``name``'s A record over UDP, as Envoy's c-ares will:
        proof that it answers before an Envoy is pointed at it."""
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[bytes] = loop.create_future()

        class _Ask(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
                if not reply.done():
                    reply.set_result(data)

        transport, _ = await loop.create_datagram_endpoint(
            _Ask, remote_addr=(self.host, self.port), family=socket.AF_INET
        )
        try:
            transport.sendto(DNSRecord.question(name, "A").pack())
            answer = DNSRecord.parse(await asyncio.wait_for(reply, timeout))
        finally:
            transport.close()
        return next((str(r.rdata) for r in answer.rr if r.rtype == QTYPE.A), None)

    def add(self, name: str, ip: str) -> None:
        self.table[name.lower().rstrip(".")] = ip

    async def stop(self) -> None:
        if self._udp is not None:
            self._udp.close()
            self._udp = None
        if self._tcp is not None:
            self._tcp.close()
            await self._tcp.wait_closed()
            self._tcp = None

    async def __aenter__(self) -> DnsServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
