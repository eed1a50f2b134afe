"""Where a request goes: the one way every command sends a case or a witness.

A case names a Gateway, not an address; a client reaches that Gateway at its
address, and when it is given only the address it sends that address as Host.
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
from verifier.semantics.request import Request, evolve, sent_to

if TYPE_CHECKING:
    from verifier.gatewayapi.resources import Resources


@dataclass(frozen=True)
class Destinations:
    """Each Gateway's address (``verifier.gatewayapi.addresses``), and the ports a proxy
    serves elsewhere (``--gateway-address NS/NAME=IP:80>10080``)."""

    addresses: Mapping[GatewayKey, str] = field(default_factory=dict)
    addressing: Addressing = field(default_factory=Addressing)

    @staticmethod
    def of(res: Resources, controller: str, addressing: Addressing) -> Destinations:
        return Destinations(gateway_addresses(res, controller, addressing), addressing)

    def sent(self, gateway: GatewayKey, request: Request) -> Request:
        """``request`` as it reaches ``gateway``: to its address, which is also the Host
        when the request names none, and on the port the proxy serves it on. A request
        already aimed there comes back as it is (the same object)."""
        sent = sent_to(request, self.addresses.get(gateway, request.address))
        if not self.addressing.ports:
            return sent
        proxy = self.addressing.proxy_port(gateway, sent.port)
        return sent if proxy == sent.port else evolve(sent, proxy_port=proxy)
