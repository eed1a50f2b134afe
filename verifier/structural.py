"""Structural agreement: witnesses a host's decision lists answer without the models.

For a witness, each model says which decision list routes it (the spec model: a
Gateway, Listener and hostname; the Envoy model: a filter chain and virtual host),
and each list is compiled once (``verifier.semantics.decisions``). When both lists
are equal, entry by entry, the two models give the request the same answer, so
``check`` counts the witness as proven instead of asking. When they differ (another
encoding, a reordering, a mutant), the request's answer is still its first matching
entry's action on each side: where those two actions are equal (or neither list
matches, a 404 on both) it is proven too; the requests that reach the differing
region are asked as before.

The witness generator asks the same question of each request as it makes it
(``Structural.__call__``, ``witness.Settle``): a proven request is never made into a
witness (``Context.to_ask``), and only counted. Two lists holding the same entries in
another order are as good as equal where every pair they order apart is disjoint or
acts alike (``verifier.semantics.decision_order``).

Only a request both models route as sent is decided this way (``_plain``): no
client certificate, a lower-case Host (a port at most besides), a path and query that no
normalisation or decoding could change, one value per header and no header that
either model treats apart (hop-by-hop, CORS, gRPC, x-forwarded-*, x-envoy-*).
Every other witness is asked. ``EDGE_VERIFY_WITNESS_ONLY=1`` turns this off: every
witness is asked (the equivalence tests compare both ways).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from verifier.semantics import decision_order
from verifier.semantics import decisions as d
from verifier.semantics import witness as wt
from verifier.semantics.envoy import decisions as envoy_lists
from verifier.semantics.request import Request
from verifier.semantics.spec import decisions as spec_lists
from verifier.semantics.spec.model import NO_MATCH_STATUS, index_for

if TYPE_CHECKING:
    from verifier.check import Context

SWITCH = "EDGE_VERIFY_WITNESS_ONLY"

# Witnesses about the connection itself: asked whatever the lists say.
CONNECTION_FEATURES = frozenset({wt.FRONTEND, wt.MISDIRECTED, wt.LISTENER_SET})
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH"})
_TOKEN = r"[A-Za-z0-9_~-]+(?:\.[A-Za-z0-9_~-]+)*"
_PATH = re.compile(rf"(?:/{_TOKEN})+/?|/")
_QUERY = re.compile(rf"(?:{_TOKEN}(?:={_TOKEN})?(?:&|$))*")
_HOST = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*(:[0-9]{1,5})?")
_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
_VALUE = re.compile(r"[!-+\--~](?:[ !-+\--~]*[!-+\--~])?")  # printable, no comma
APART = frozenset(
    {
        "connection",
        "upgrade",
        "te",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "trailer",
        "host",
        "content-length",
        "content-type",
        "expect",
        "origin",
        "forwarded",
        "via",
        "x-request-id",
    }
)


def enabled() -> bool:
    return os.environ.get(SWITCH, "") != "1"


def _plain(r: Request) -> bool:
    """Whether both models route ``r`` as it was sent (module docstring). On the Envoy
    side this is ``envoy.decisions.untouched`` for such a request, as long as no header
    it carries is one of the route configuration's ``internal_only_headers``: its method
    and bytes pass the codec, a path of plain segments (no ``%``, no dot segment, no
    ``//``) is one no path option changes, and the HCM drops only ``x-envoy-*`` and
    internal-only headers (tests/test_structural.py holds that on every fixture)."""
    if r.source is not None or r.client_cert is not None or r.method not in METHODS:
        return False
    if r.scheme not in ("http", "https") or not _HOST.fullmatch(r.host):
        return False
    path, _, query = r.path.partition("?")
    if not _PATH.fullmatch(path) or not _QUERY.fullmatch(query):
        return False
    names = [p.split("=", 1)[0] for p in query.split("&") if p]
    if len(names) != len(set(names)):
        return False
    for name, values in r.headers:
        if (
            name in APART
            or name.startswith(("x-forwarded-", "x-envoy-", "access-control-"))
            or not _NAME.fullmatch(name)
            or len(values) != 1
            or not _VALUE.fullmatch(values[0])
        ):
            return False
    return True


@dataclass
class _Pair:
    spec: d.DecisionList
    envoy: d.DecisionList
    same: bool
    indexes: tuple[d.Index, d.Index] | None = None  # made when first needed


_Found = tuple[envoy_lists.Routing, _Pair] | None
_NO_HOST = _Pair(d.DecisionList(()), d.DecisionList(()), True)


class Structural:
    """The decision lists of one check context, compiled as witnesses need them."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.index = index_for(ctx.res)
        self._spec: dict[tuple[object, ...], d.DecisionList] = {}
        self._envoy: dict[tuple[int, int], d.DecisionList] = {}
        self._pairs: dict[tuple[object, ...], _Pair] = {}
        self._by_connection: dict[tuple[object, ...], _Found] = {}

    def _pair(self, gateway: tuple[str, str], r: Request) -> _Found:
        """The lists each model routes ``r``'s connection and Host by, if both do."""
        spec_at = spec_lists.routing_of(
            self.ctx.res, self.index, gateway, r, self.ctx.controller_name
        )
        routing, _why = envoy_lists.connection_routing(self.ctx.envoy, r)
        if routing is None:
            return None
        if isinstance(spec_at, int):
            # No Listener serves the Host: 404, as no virtual host does on Envoy's side.
            both_404 = spec_at == NO_MATCH_STATUS and routing.vhost is None
            return (routing, _NO_HOST) if both_404 else None
        gw, lst = spec_at
        spec_key = (gateway, lst.name, lst.port, lst.protocol, lst.hostname, r.hostname)
        key = (spec_key, routing.key)
        pair = self._pairs.get(key)
        if pair is None:
            envoy = self._envoy.get(routing.key)
            if envoy is None:
                envoy = self._envoy[routing.key] = envoy_lists.decision_list(
                    self.ctx.envoy, routing, r
                )
            spec = self._spec.get(spec_key)
            if spec is None and not envoy.comparable:
                spec = d.not_comparable("not compiled: the Envoy list is not comparable")
            elif spec is None:
                spec = self._spec[spec_key] = spec_lists.decision_list(
                    self.ctx.res, self.index, gw, lst, r.hostname
                )
            same = spec.same_as(envoy) or decision_order.equivalent(spec, envoy)
            pair = self._pairs[key] = _Pair(spec, envoy, same)
        return routing, pair

    def proven(self, w: wt.Witness) -> bool:
        """Whether the lists alone show both models answer ``w`` alike."""
        return self(w.gateway, w.request, w.feature)

    def __call__(self, gateway: tuple[str, str], request: Request, feature: str) -> bool:
        """``proven`` for a request to ``gateway``, stamped by ``Context.sent`` or not (as
        the witness generator makes it: ``witness.Settle``)."""
        r = request
        if feature in CONNECTION_FEATURES or not _plain(r):
            return False
        # Which lists route a request depends on its connection and Host alone.
        conn = (gateway, r.address, r.port, r.proxy_port, r.scheme, r.sni, r.host)
        if conn in self._by_connection:
            found = self._by_connection[conn]
        else:
            found = self._by_connection[conn] = self._pair(gateway, self.ctx.sent(gateway, r))
        if found is None:
            return False
        routing, pair = found
        if routing.config.internal_only and any(
            k in routing.config.internal_only for k, _ in r.headers
        ):
            return False  # else the HCM passes a plain request on as sent (``untouched``)
        if pair.same:
            return True
        if not (pair.spec.comparable and pair.envoy.comparable):
            return False
        # The lists differ somewhere: the request is answered alike when the entry each
        # side first matches acts alike (or neither matches: 404 on both).
        view = d.View.of(r.path, r.method, ((k, v) for k, vs in r.headers for v in vs))
        if pair.indexes is None:
            pair.indexes = (d.Index(pair.spec), d.Index(pair.envoy))
        i, j = pair.indexes[0].first_match(view), pair.indexes[1].first_match(view)
        if i is None or j is None:
            return i is None and j is None
        return pair.spec.entries[i].action == pair.envoy.entries[j].action
