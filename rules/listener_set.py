"""Listeners from ListenerSets serve exactly as the spec merges them into their Gateway.

Why it matters: a ListenerSet lets a team add listeners to a Gateway it does not own
(GEP-1713), so the edge must take them only when the Gateway's ``allowedListeners``
admits the ListenerSet's namespace ("By default, Gateways do not allow ListenerSet
attachment"), must let an earlier listener win a conflict ("1. "parent" Gateway 2.
ListenerSet ordered by creation time ... 3. ... by "{namespace}/{name}""), and must
attach to a ListenerSet's listeners only the Routes whose parentRef names that
ListenerSet ("a route attaching to the Gateway ... MUST NOT attach to any listeners
in the child ListenerSets"). Each ListenerSet listener is probed on its hostname and
on a host no Route names.

Example: ListenerSet ``edge-apps/not-allowed`` names Gateway
``edge-infra/listener-set-parent``, which admits only its own namespace, yet the xDS
binds its port 8173: a request there gets 404 from Envoy where the spec says nothing
listens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from verifier.check import Comparison, Context
from verifier.findings import Finding
from verifier.gatewayapi.load import Location
from verifier.registry import Rule

NAME = "listener-set"
CODE = "EV225"


def _listener_of(c: Comparison, ctx: Context) -> tuple[str, Location] | None:
    """The ListenerSet listener on the request's port: (resource label, where in its
    YAML); the one the witness names when it names one."""
    req = c.request
    found: list[tuple[bool, str, Location]] = []
    for key in sorted(ctx.res.listener_sets):
        ls = ctx.res.listener_sets[key]
        if (ls.parent_namespace, ls.parent_name) != c.witness.gateway:
            continue
        for lst in ls.listeners:
            if lst.port == req.port:
                named = c.witness.note.startswith(
                    f"ListenerSet {key[0]}/{key[1]} listener {lst.name}:"
                )
                label = f"ListenerSet {key[0]}/{key[1]}"
                found.append((not named, label, ls.meta.where(f"{lst.path}.port")))
    if not found:
        return None
    _, label, where = min(found, key=lambda f: f[0])
    return label, where


def check(ctx: Context) -> Iterable[Finding]:
    for c in ctx.disagreements.get(NAME, []):
        finding = ctx.comparison_finding(CODE, NAME, c)
        found = _listener_of(c, ctx)
        if found is not None:
            resource, where = found
            finding = dataclasses.replace(
                finding,
                file=where.file,
                line=where.line,
                resource=resource,
            )
        yield finding


RULE = Rule(
    NAME,
    (CODE,),
    ("ListenerSet",),
    "https://gateway-api.sigs.k8s.io/reference/spec/#listenerset",
    (__doc__ or "").strip(),
    check,
    reads_models=True,
)
