"""What the Envoy model works out from a snapshot alone, once, before any request.

The listener index and the route configurations the listeners use, compiled. check
builds it while a child process reads the YAML (``precompile``) and hands it to the
model built next on the same snapshot object.
"""

from __future__ import annotations

from dataclasses import dataclass

from verifier.semantics.envoy.config import CompiledRouteConfig
from verifier.semantics.envoy.listeners import ListenerIndex
from verifier.xds.snapshot import Snapshot


@dataclass(frozen=True)
class Compiled:
    """What the model works out from the snapshot alone: the listener index and the
    route configurations the listeners use, compiled (``CompiledRouteConfig``)."""

    listeners: ListenerIndex
    configs: dict[int, CompiledRouteConfig]  # by id of the RouteConfiguration


# What ``precompile`` made, handed to the next model built on the same snapshot object
# (by identity) and then forgotten: a later model compiles afresh, so one built after
# the snapshot's messages were edited in place (tests do) sees the edit.
_COMPILED: dict[int, tuple[Snapshot, Compiled]] = {}
_REMEMBERED = 4


def compiled(snapshot: Snapshot) -> Compiled:
    """The snapshot's ``Compiled``: precompiled for it (taken), else made now."""
    hit = _COMPILED.pop(id(snapshot), None)
    if hit is not None and hit[0] is snapshot:
        return hit[1]
    return _compile(snapshot)


def _compile(snapshot: Snapshot) -> Compiled:
    routes = {rc.name: rc for rc in snapshot.routes}
    secrets = {s.name: s for s in snapshot.secrets}
    found = Compiled(ListenerIndex.build(snapshot.listeners, routes, secrets), {})
    for entries in found.listeners.by_port.values():
        for bound in entries:
            for chain in [*bound.chains, *([bound.default] if bound.default else [])]:
                rc = chain.hcm.route_config if chain.hcm is not None else None
                if rc is not None and id(rc) not in found.configs:
                    found.configs[id(rc)] = CompiledRouteConfig.build(rc)
    return found


def precompile(snapshot: Snapshot) -> None:
    """``compiled(snapshot)`` now, if it can be: check runs it while a child process
    reads the YAML (0.4 s of 10,000 rules otherwise spent after). Whatever fails here
    fails again, and is reported, where the model is built."""
    try:
        found = _compile(snapshot)
    except Exception:  # raised again where the model is built, and handled there
        return
    if len(_COMPILED) >= _REMEMBERED:
        _COMPILED.pop(next(iter(_COMPILED)))
    _COMPILED[id(snapshot)] = (snapshot, found)
