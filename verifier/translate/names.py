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


# The sidecar's names (docs/mesh.md): listeners `outbound` (:15001) and `inbound`
# (:15008); a filter chain and a route table per captured Service port.
OUTBOUND = "outbound"
INBOUND = "inbound"
OUTBOUND_PORT = 15001


def service_port_name(namespace: str, service: str, port: int) -> str:
    """``<ns>/<svc>/<port>``: an outbound filter chain, and its virtual host."""
    return f"{namespace}/{service}/{port}"


def outbound_route_config_name(namespace: str, service: str, port: int) -> str:
    return f"{OUTBOUND}/{service_port_name(namespace, service, port)}"


def inbound_cluster_name(target_port: int) -> str:
    """The workload's own application port, reached on loopback."""
    return f"{INBOUND}/{target_port}"
