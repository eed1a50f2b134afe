"""xDS resource names the edge uses; shared by the listener and route builders."""

from __future__ import annotations

from verifier.gatewayapi import model as m


def https_route_config_name(port: int, gw: m.Gateway, lst: m.GatewayListener) -> str:
    """Each HTTPS listener's filter chain has its own route table (421 detection)."""
    return f"edge-{port}-{listener_owner(gw, lst)}-{lst.name}".replace("/", "-")


def listener_owner(gw: m.Gateway, lst: m.GatewayListener) -> str:
    """``namespace/name`` of the resource that defines the listener: the Gateway, or
    the ListenerSet merged into it (listener names are unique only within one)."""
    ns, name = lst.listener_set or gw.meta.key
    return f"{ns}/{name}"


def listener_name(gateway: tuple[str, str], port: int) -> str:
    """Per-Gateway addressing: ``edge-<namespace>-<gateway>-<port>``, so a person reading
    LDS sees which Gateway a listener serves; it is also its HTTP route table's name."""
    return f"edge-{gateway[0]}-{gateway[1]}-{port}"


def certificate_secret_name(namespace: str, name: str) -> str:
    """The SDS name of a listener certificate: ``<namespace>/<name>`` of its Secret.
    The mesh's own secrets (``default``, ``ROOTCA``) have no slash, so they never clash."""
    return f"{namespace}/{name}"
