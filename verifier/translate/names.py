"""xDS resource names the edge uses; shared by the listener and route builders."""

from __future__ import annotations

from verifier.gatewayapi import model as m


def https_route_config_name(port: int, gw: m.Gateway, lst: m.GatewayListener) -> str:
    """Each HTTPS listener's filter chain has its own route table (421 detection)."""
    return f"edge-{port}-{gw.meta.namespace}-{gw.meta.name}-{lst.name}"
