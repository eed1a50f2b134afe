"""Mutation testing of the checker: plausible translator mistakes, applied to xDS.

``mutants(snapshot)`` applies every operator at every applicable site (at most ``MAX_SITES``
per operator, spread evenly and deterministically) and returns new snapshots; the input is
never modified (a mutant deep-copies the message it changes, path-copies its parents and
shares everything else). ``equivalent(original, mutant)`` is True only with a proof that no
request can distinguish the two (see ``verifier.mutate.proofs``); a mutant that is not proven
equivalent and that the checker does not flag is a survivor. Whatever the operator, a change
to one cluster that has no host before and after (an empty assignment, or DNS names of
Services with no ready endpoint, which the caller passes as ``hostless``) is equivalent:
Envoy answers 503 either way.

An ``Operator`` is a name, a doc (what it breaks, which rule should catch it, when it is
equivalent), ``sites(snapshot)`` listing where it applies, and ``prove(original, mutant)``;
``generate(snapshot)`` yields its capped mutants. Proofs are looked up by operator name, so
``equivalent`` knows only the operators in ``OPERATORS``.

Operators work on xDS from any source: this module never imports the translator.

Operators by xDS area, in ``verifier.mutate.operators``:

- ``routes``: matching and order.
- ``actions``: where a selected route sends requests, and its policies.
- ``filters``: what a selected route changes (headers, redirects, rewrites, CORS).
- ``clusters``: clusters and endpoints.
- ``listeners``: listeners, route configurations, domains.
- ``mesh``: a sidecar's outbound chains, passthrough, and another client's route table
  (``with_peers``); ``mesh_tls``: mesh clusters' identity and tunnel, inbound mTLS.

The proofs: ``verifier.mutate.proofs``, on the match algebra of ``verifier.mutate.algebra``
(with ``verifier.mutate.regex_prefixes`` for regex routes) and the scopes of
``verifier.mutate.scope``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from verifier.mutate.core import MAX_SITES, Mutant, Operator
from verifier.mutate.operators import (
    actions,
    clusters,
    filters,
    listeners,
    mesh,
    mesh_tls,
    routes,
)
from verifier.mutate.proofs import prove_hostless_cluster
from verifier.xds.snapshot import Snapshot

__all__ = [
    "MAX_SITES",
    "OPERATORS",
    "Mutant",
    "Operator",
    "equivalent",
    "mutants",
    "with_peers",
]

OPERATORS: Final[tuple[Operator, ...]] = (
    *routes.OPERATORS,
    *actions.OPERATORS,
    *filters.OPERATORS,
    *clusters.OPERATORS,
    *listeners.OPERATORS,
    *mesh.OPERATORS,
    *mesh_tls.OPERATORS,
)

_BY_NAME: Final[dict[str, Operator]] = {op.name: op for op in OPERATORS}


def with_peers(peers: Mapping[str, Snapshot]) -> tuple[Operator, ...]:
    """``OPERATORS``, with foreign-route-table given the other sidecars' xDS (by workload)."""
    found = mesh.with_peers(peers)
    return tuple(found if op.name == found.name else op for op in OPERATORS)


def mutants(
    snapshot: Snapshot, *, operators: tuple[Operator, ...] = OPERATORS, cap: int = MAX_SITES
) -> list[Mutant]:
    """Every mutant of ``snapshot``, operator by operator, in a deterministic order."""
    return [m for op in operators for m in op.generate(snapshot, cap=cap)]


def equivalent(original: Snapshot, mutant: Mutant, hostless: frozenset[str] = frozenset()) -> bool:
    """True only when it is proven that no request distinguishes the mutant from the original.

    ``hostless``: the DNS names of Services with no ready endpoint (the snapshot alone
    cannot say so); whatever a mutant does to a cluster with no host, it answers 503.
    """
    op = _BY_NAME.get(mutant.operator)
    if op is not None and op.prove(original, mutant):
        return True
    return op is not None and prove_hostless_cluster(original, mutant, hostless)
