"""Where a cluster's Gateway is reached: the address its controller publishes.

``live --kubeconfig --gateway NS/NAME`` sends the cases to the Gateway's first
``status.addresses`` entry. A LoadBalancer address can take minutes to appear after
an install (the aether conformance runner waits 180 s), so a missing one is polled
for, by GET (never a watch: the role stays get/list), each poll bounded as every
request to the API server is (``kubeapi``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from verifier.errors import InputError, InputErrors
from verifier.gatewayapi.cluster import LISTED, ClusterSource, connect, forbidden, unexpected
from verifier.gatewayapi.kubeapi import Api, Status

GATEWAY = LISTED[2]
POLL_INTERVAL = 1.0


def _published(gateway: dict[str, Any]) -> str | None:
    """The first address a controller wrote into the Gateway's status (an IP, or a
    hostname a load balancer was given), or None while it has written none."""
    status = gateway.get("status")
    addresses = status.get("addresses") if isinstance(status, dict) else None
    for entry in addresses if isinstance(addresses, list) else ():
        value = entry.get("value") if isinstance(entry, dict) else None
        if isinstance(value, str) and value:
            return value
    return None


def wait_for_gateway_address(
    source: ClusterSource,
    gateway: tuple[str, str],
    wait: float,
    *,
    interval: float = POLL_INTERVAL,
    sleep: Callable[[float], None] | None = None,
) -> str:
    """The address ``Gateway.status.addresses`` publishes, polled by GET until it has one.

    A LoadBalancer address can take minutes to appear after an install (the aether
    conformance runner waits 180 s), so a missing one is waited for; after ``wait``
    seconds it is an exit-2 error naming the Gateway and the wait, since the live pass
    would have nowhere to send its cases. A GET, never a watch: the role stays get/list.
    """
    pause = sleep or time.sleep
    deadline = time.monotonic() + wait
    # Each poll within --cluster-timeout; all of them within the wait (and one more poll).
    with connect(source, max(deadline, time.monotonic() + source.deadline)) as api:
        return _poll(api, gateway, (wait, deadline), interval, pause)


def _poll(
    api: Api,
    gateway: tuple[str, str],
    waiting: tuple[float, float],
    interval: float,
    pause: Callable[[float], None],
) -> str:
    """``wait_for_gateway_address``'s polls; ``waiting``: (the wait, when it ends)."""
    ns, name = gateway
    wait, deadline = waiting
    path = f"{GATEWAY.base}/namespaces/{quote(ns)}/{GATEWAY.plural}/{quote(name)}"
    where = f"{api.where}/Gateway/{ns}/{name}"
    while True:
        try:
            found = _published(api.get(path, kind=GATEWAY.kind))
        except Status as exc:
            if exc.status == 403:
                raise InputErrors([forbidden(api.where, "get", GATEWAY, ns)]) from None
            if exc.status == 404:
                message = f"--gateway {ns}/{name}: no such Gateway in the cluster"
                raise InputErrors(
                    [InputError(where, 0, "--gateway", "not-found", message)]
                ) from None
            raise InputErrors([unexpected(api.where, "get", GATEWAY, exc)]) from None
        if found is not None:
            return found
        left = deadline - time.monotonic()
        if left <= 0:
            message = (
                f"Gateway {ns}/{name} has no address in status.addresses after waiting "
                f"{wait:g}s (--gateway-wait); is its controller running and a load balancer "
                "available? --gateway-address NS/NAME=IP names one instead"
            )
            raise InputErrors([InputError(where, 0, "--gateway", "no-address", message)])
        pause(min(interval, left))
