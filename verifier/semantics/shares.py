"""Shares of traffic a case expects (``status_ratio``, ``backend_ratio``,
``mirrored_ratio``) and the shares an Outcome predicts.

A live pass counts them over ``samples`` requests; a model's Outcome states them
exactly: a backend's share is its weight among the backends (``backend_ratio``
counts 2xx answers, which only backends give), the invalid weight is the share
answered with 500, the unavailable weight (backends with no ready endpoint) the
share answered with 503, and a mirror's weight is its share in parts per million. So
``check`` judges a split ratio offline, against the same ratio and tolerance
the live pass uses. Pure data and arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

from verifier.semantics.request import Backend, Outcome

PPM = 1_000_000
INVALID_STATUS = 500  # HTTPRouteRule.backendRefs: an invalid backend's share gets 500
# HTTPRouteRule.backendRefs: "When a HTTPBackendRef refers to a Service that has no
# ready endpoints, implementations SHOULD return a 503 for requests to that backend".
UNAVAILABLE_STATUS = 503


@dataclass(frozen=True)
class Ratio:
    ratio: float
    tolerance: float

    def holds(self, observed: float) -> bool:
        return abs(observed - self.ratio) <= self.tolerance

    def __str__(self) -> str:
        return f"{self.ratio}±{self.tolerance}"


@dataclass(frozen=True)
class PodRef:
    """An echo pod by name prefix, as in ``mirrored_to``."""

    namespace: str
    name: str

    def matches(self, namespace: str, service: str) -> bool:
        return namespace == self.namespace and service.startswith(self.name)


@dataclass(frozen=True)
class Shares:
    """The ratios a case states; empty when it states none."""

    status: tuple[tuple[int, Ratio], ...] = ()
    backend: tuple[tuple[str, Ratio], ...] = ()
    mirrored: tuple[tuple[PodRef, Ratio], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.status or self.backend or self.mirrored)


def status_shares(o: Outcome) -> dict[int, float]:
    """Each status's share of the answers ``o`` stands for: the forwarded share gets
    ``o.status``, the invalid share 500, the unavailable share 503. With no backend
    to forward to, the proxy answers every request itself with ``o.status``, unless
    both an invalid and an unavailable share are stated: then each gets its own."""
    forwarded = sum(b.weight for b in o.backends)
    total = forwarded + o.invalid_weight + o.unavailable_weight
    if (not o.backends and not (o.invalid_weight and o.unavailable_weight)) or (
        o.backends and forwarded == total
    ):
        return {o.status: 1.0}
    shares: dict[int, float] = {}
    for status, weight in (
        (o.status, forwarded),
        (INVALID_STATUS, o.invalid_weight),
        (UNAVAILABLE_STATUS, o.unavailable_weight),
    ):
        if weight:
            shares[status] = shares.get(status, 0.0) + weight / total
    return shares


def counted_for(b: Backend, prefixes: tuple[str, ...]) -> str | None:
    """The listed prefix an answer from ``b`` counts for: the longest one its name (or,
    where the xDS cannot tell Services sharing pods apart, any of theirs) starts with.
    So ``{cart: ..., cart-canary: ...}`` tells the two apart, though every cart-canary
    pod name also starts with ``cart``."""
    names = (b.name, *(a[1] for a in b.aliases))
    found = [p for p in prefixes if any(n.startswith(p) for n in names)]
    return max(found, key=len) if found else None


def backend_share(o: Outcome, prefix: str, prefixes: tuple[str, ...]) -> float:
    """The share of ``o``'s 2xx answers that count for ``prefix`` among ``prefixes``."""
    total = sum(b.weight for b in o.backends)
    if not (200 <= o.status < 300 and total):
        return 0.0
    return sum(b.weight for b in o.backends if counted_for(b, prefixes) == prefix) / total


def mirror_share(o: Outcome, pod: PodRef) -> float:
    return min(1.0, sum(m.weight for m in o.mirrors if pod.matches(m.namespace, m.name)) / PPM)


def share_problems(shares: Shares, outcome: Outcome) -> list[str]:
    """Why the shares ``outcome`` predicts miss the stated ratios; empty when they hold.
    An outcome that may be another (a runtime_fraction, a handshake that may fail)
    does not say how often: its shares cannot be predicted, which is a problem, not
    a pass."""
    if not shares:
        return []
    if outcome.otherwise is not None or outcome.may_refuse:
        why = "a runtime_fraction" if outcome.otherwise is not None else "a TLS handshake"
        return [f"shares not predictable: {why} decides how many requests get each answer"]
    problems: list[str] = []
    by_status = status_shares(outcome)
    for status, want in shares.status:
        share = by_status.get(status, 0.0)
        if not want.holds(share):
            problems.append(f"status {status} share {share:.2f}, expected {want}")
    prefixes = tuple(p for p, _ in shares.backend)
    for prefix, want in shares.backend:
        share = backend_share(outcome, prefix, prefixes)
        if not want.holds(share):
            problems.append(f"backend {prefix} share {share:.2f} of 2xx, expected {want}")
    for pod, want in shares.mirrored:
        share = mirror_share(outcome, pod)
        if not want.holds(share):
            problems.append(f"mirrored to {pod.name} in a share {share:.2f}, expected {want}")
    return problems
