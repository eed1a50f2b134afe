"""The echo's control endpoint: Istio's ``proto.EchoTestService`` over gRPC (grpclib).

Istio's test echo serves ``Echo`` and ``ForwardEcho`` on a gRPC port of its own, and a
test drives an in-mesh client through it (``verifier.live.forward``). Ours serves the
same service, from the same process as the echo's HTTP ports, on the echo's address,
so that the requests it forwards leave from the pod's address and the pod's capture
sees them. The message types are generated from ``echoproto/echo.proto``
(``scripts/gen_echo_proto.sh``); the service is mapped by hand, not through the
generated base class, because ``Echo`` answers with the caller's metadata and
address, which only the grpclib stream carries.
"""

from __future__ import annotations

import logging
import socket

import grpclib.const
import grpclib.server
from grpclib.exceptions import GRPCError

from verifier.live.echoproto.proto import (
    EchoRequest,
    EchoResponse,
    ForwardEchoRequest,
    ForwardEchoResponse,
)
from verifier.live.forward import ClusterResolver, Refused, SocketFactory, forward, plan

log = logging.getLogger(__name__)

SERVICE = "proto.EchoTestService"


class EchoControl:
    """The service of one echo (pod): ``pod`` is its ``Hostname``, ``ip`` the address its
    forwarded requests leave from (None: the kernel's choice), ``nameserver`` the
    cluster DNS its forwarded requests' names are resolved through (None: the host's)."""

    def __init__(
        self,
        namespace: str,
        pod: str,
        ip: str | None,
        sockets: SocketFactory | None = None,
        nameserver: tuple[str, int] | None = None,
    ) -> None:
        self.namespace = namespace
        self.pod = pod
        self.ip = ip
        self.sockets = sockets  # makes forwarded connections' sockets (a pod's own)
        self.nameserver = nameserver
        self.port = 0  # the bound control port, once serving

    async def echo(self, stream: grpclib.server.Stream[EchoRequest, EchoResponse]) -> None:
        """Istio's ``Echo``: the message back as ``Echo=``, with the caller's metadata as
        ``RequestHeader=`` lines and this echo's identity (``Hostname=`` the pod)."""
        request = await stream.recv_message()
        assert request is not None
        lines = [
            f"RequestHeader={key}:{value}"
            for key, value in (stream.metadata or {}).items()
            if not key.endswith("-bin") and isinstance(value, str)
        ]
        peer = stream.peer.addr()
        lines += [
            "StatusCode=200",
            f"ServicePort={self.port}",
            f"IP={peer[0] if peer else '0.0.0.0'}",
            "Proto=GRPC",
            f"Echo={request.message}",
            f"Namespace={self.namespace}",
            f"Hostname={self.pod}",
        ]
        await stream.send_message(EchoResponse(message="".join(f"{x}\n" for x in lines)))

    async def forward_echo(
        self, stream: grpclib.server.Stream[ForwardEchoRequest, ForwardEchoResponse]
    ) -> None:
        request = await stream.recv_message()
        assert request is not None
        try:
            resolver = None
            if self.nameserver is not None:
                resolver = ClusterResolver(self.nameserver, self.namespace, self.sockets)
            output = await forward(plan(request), self.ip, self.sockets, resolver)
        except Refused as refused:
            log.debug("%s: ForwardEcho %s refused: %s", self.pod, request.url, refused.message)
            raise GRPCError(refused.status, refused.message) from None
        await stream.send_message(ForwardEchoResponse(output=output))

    def __mapping__(self) -> dict[str, grpclib.const.Handler]:
        unary = grpclib.const.Cardinality.UNARY_UNARY
        return {
            f"/{SERVICE}/Echo": grpclib.const.Handler(self.echo, unary, EchoRequest, EchoResponse),
            f"/{SERVICE}/ForwardEcho": grpclib.const.Handler(
                self.forward_echo, unary, ForwardEchoRequest, ForwardEchoResponse
            ),
        }


async def serve(control: EchoControl, sock: socket.socket) -> grpclib.server.Server:
    """Serve ``control`` on the bound, listening ``sock``."""
    server = grpclib.server.Server([control])
    control.port = int(sock.getsockname()[1])
    await server.start(sock=sock)
    return server
