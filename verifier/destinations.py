"""Where a request goes: the one way every command sends a case or a witness.

A case names a Gateway, not an address; a client reaches that Gateway at its
address, and when it is given only the address it sends that address as Host.
A mesh case (a request with a ``source``) names a Service instead: its client
connects to the Service's ClusterIP and port (the Service's frontend) and, when
the case gives no Host, calls it by name, ``<svc>.<ns>.svc.cluster.local``
(docs/mesh.md).
`check` (``check.Context.sent``), `explain` (for ``--request`` and ``--cases``),
`live` (the cases and witnesses its check context aimed here;
``EmbeddedHarness.for_gateway`` for requests without a context) and the pytest
plugin (through `check` and `live`) all aim a request here, so the request the
models judge is the one Envoy is sent. When
`explain --cases` aimed its cases itself, a multi-Gateway input got them on
whichever listener took the port, with no Host: an answer neither `check` nor
`live` gives (tests/test_addressing.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from verifier.gatewayapi.addresses import Addressing, GatewayKey, gateway_addresses
from verifier.semantics.request import Request, evolve, sent_to, service_host

if TYPE_CHECKING:
    from verifier.gatewayapi.resources import Resources


@dataclass(frozen=True)
class Destinations:
    """Each Gateway's address (``verifier.gatewayapi.addresses``), the ports a proxy
    serves elsewhere (``--gateway-address NS/NAME=IP:80>10080``), and each Service's
    ClusterIP (where mesh requests to it go)."""

    addresses: Mapping[GatewayKey, str] = field(default_factory=dict)
    addressing: Addressing = field(default_factory=Addressing)
    cluster_ips: Mapping[tuple[str, str], str] = field(default_factory=dict)

    @staticmethod
    def of(res: Resources, controller: str, addressing: Addressing) -> Destinations:
        return Destinations(
            gateway_addresses(res, controller, addressing), addressing, cluster_ips(res)
        )

    def sent(self, parent: GatewayKey, request: Request) -> Request:
        """``request`` as it reaches ``parent``: a Gateway's address, which is also the
        Host when the request names none, on the port the proxy serves it on; for a mesh
        request (one with a ``source``), the Service ``parent``'s ClusterIP and port, with
        the Service's name as Host when the request names none. A request already aimed
        there comes back as it is (the same object)."""
        if request.source is not None:
            return self._to_service(parent, request)
        sent = sent_to(request, self.addresses.get(parent, request.address))
        if not self.addressing.ports:
            return sent
        proxy = self.addressing.proxy_port(parent, sent.port)
        return sent if proxy == sent.port else evolve(sent, proxy_port=proxy)

    def _to_service(self, service: tuple[str, str], request: Request) -> Request:
        address = self.cluster_ips.get(service, request.address)
        host = request.host or service_host(service[0], service[1], request.port)
        if address == request.address and host == request.host:
            return request
        return evolve(request, address=address, host=host)


def cluster_ips(res: Resources) -> dict[tuple[str, str], str]:
    """Each Service's ClusterIP, the address of its frontend. Headless Services
    (``clusterIP: None``) and Services given without one have none."""
    return {
        key: svc.cluster_ip
        for key, svc in res.services.items()
        if svc.cluster_ip and svc.cluster_ip != "None"
    }
