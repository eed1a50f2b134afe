"""Matches that never get traffic: an identical match of another rule always wins.

Two HTTPRoutes (or two rules of one) that write the same match for the same hostname
on the same Listener do not share its requests. HTTPRouteRule.matches: "If ties still
exist across multiple Routes, matching precedence MUST be determined in order of the
following criteria, continuing on ties: * The oldest Route based on creation
timestamp. * The Route appearing first in alphabetical order by
"{namespace}/{name}". If ties still exist within an HTTPRoute, matching precedence
MUST be granted to the FIRST matching rule (in list order)". So one of them takes
every request both accept, and the other is dead configuration: usually a copy of a
route left behind, or a canary that was meant to differ by a header.

Built on the spec model's own readings: the Routes a Listener serves and their
effective hostnames (``spec.index``, from ``attachment_problem`` and
``effective_hostnames``), the valid rules (``rule_problem``), what makes two matches
accept the same requests (``match.effective_headers``/``effective_query_params``, a
PathPrefix's trailing ``/`` ignored) and which one wins (``match.PRECEDENCE``). A
match is reported only where it loses everywhere it is served: on every programmed
Listener and for every hostname it is served under, an identical match of another
rule wins. A duplicate within one rule sends its requests to the same rule and is not
a loss. Pure, like the rest of the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verifier.gatewayapi.model import Gateway, HTTPRoute, RouteMatch, RouteRule
from verifier.gatewayapi.resources import Resources
from verifier.semantics.spec.hostnames import normalize_host
from verifier.semantics.spec.index import IndexedMatch, SpecIndex
from verifier.semantics.spec.listeners import describe, gateway_problem, listener_problem
from verifier.semantics.spec.listenersets import merged_gateway
from verifier.semantics.spec.match import (
    Candidate,
    deciding_criterion,
    effective_headers,
    effective_query_params,
    precedence_key,
)
from verifier.semantics.spec.model import index_for

# Every placement of a match shares the hostname it is filed under: the hostname
# criteria of PRECEDENCE tie, and the rest decide.
SAME_HOSTNAME = (0, 0)


@dataclass(frozen=True)
class Placed:
    """One match of one rule, where a report would place it."""

    route: HTTPRoute
    rule: RouteRule
    match_index: int
    match: RouteMatch

    @property
    def key(self) -> tuple[str, str, int, int]:
        meta = self.route.meta
        return (meta.namespace, meta.name, self.rule.index, self.match_index)

    def describe(self) -> str:
        ns, name, rule, match = self.key
        return f"HTTPRoute {ns}/{name} rule {rule} match {match}"


@dataclass(frozen=True)
class Unreached:
    """A match that never gets traffic, the match that takes it, where (the first
    Listener and hostname both are served on) and the precedence criterion that
    decides between them."""

    loser: Placed
    winner: Placed
    gateway: tuple[str, str]
    listener: str
    hostname: str
    criterion: str


def match_key(match: RouteMatch) -> tuple[Any, ...]:
    """Equal for two matches that accept exactly the same requests as written: the
    path ("When specified, a trailing `/` is ignored" for PathPrefix), the method,
    and the header (names case-insensitive) and query matches the spec considers (the
    first of each name), in any order."""
    path = match.path
    value = path.value.rstrip("/") if path.type == "PathPrefix" else path.value
    headers = frozenset((h.name.lower(), h.type, h.value) for h in effective_headers(match))
    queries = frozenset((q.name, q.type, q.value) for q in effective_query_params(match))
    return (path.type, value, match.method, headers, queries)


def _placed(im: IndexedMatch) -> Placed:
    return Placed(im.served.route, im.rule, im.match_index, im.match)


def _candidate(p: Placed) -> Candidate:
    return Candidate(p.route, p.rule, p.match_index, p.match, SAME_HOSTNAME)


# (gateway, listener described, hostname as served): one place a match is served.
_Where = tuple[tuple[str, str], str, str]


def _groups(res: Resources, gw: Gateway, index: SpecIndex) -> dict[tuple[Any, ...], list[Placed]]:
    """The matches served on each programmed Listener of ``gw``, grouped by where they
    are served and what they accept."""
    groups: dict[tuple[Any, ...], list[Placed]] = {}
    for lst in gw.listeners:
        if listener_problem(res, gw, lst) is not None:
            continue  # it serves nothing: no match there gets traffic either way
        for im in index.listener(res, gw, lst).matches():
            for hostname in dict.fromkeys(_normal(h) for h in im.served.effective):
                where = (gw.meta.key, describe(lst), hostname)
                groups.setdefault((where, match_key(im.match)), []).append(_placed(im))
    return groups


def _normal(hostname: str) -> str:
    """A hostname as precedence compares it ("" is any host)."""
    return normalize_host(hostname) if hostname else ""


def unreached_matches(res: Resources, controller_name: str) -> list[Unreached]:
    """Every match of a valid rule that an identical match of another rule beats
    wherever it is served (module docstring), in the order of the Routes' keys."""
    index = index_for(res)
    served: dict[tuple[str, str, int, int], list[_Where]] = {}
    lost: dict[tuple[str, str, int, int], list[tuple[_Where, Placed, Placed]]] = {}
    for key in sorted(res.gateways):
        gw = res.gateways[key]
        if gateway_problem(res, gw, controller_name) is not None:
            continue
        for (where, _accepts), placed in _groups(res, merged_gateway(res, gw), index).items():
            winner = min(placed, key=lambda p: precedence_key(_candidate(p)))
            for p in placed:
                served.setdefault(p.key, []).append(where)
                if p.key[:3] != winner.key[:3]:
                    lost.setdefault(p.key, []).append((where, p, winner))
    out = []
    for match in sorted(lost):
        losses = lost[match]
        if len(losses) < len(served[match]):
            continue  # it wins, or is alone, somewhere
        (gateway, listener, hostname), loser, winner = losses[0]
        criterion = deciding_criterion(_candidate(winner), _candidate(loser))
        out.append(Unreached(loser, winner, gateway, listener, hostname, criterion))
    return out
