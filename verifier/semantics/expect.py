"""What a case expects, and whether an Outcome meets it.

Fields mean what Gateway API conformance's ExpectedResponse means
(docs/cases.md). ``unmet`` judges one answer: a model's, or one live
sample's; ``model_unmet`` also judges the shares of traffic a model's answer
states (``verifier.semantics.shares``), which a live pass counts over samples.
Pure: parsing is ``verifier.semantics.cases``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from verifier.semantics.request import Headers, Outcome, Request
from verifier.semantics.shares import (
    PodRef,
    Ratio,
    Shares,
    mirror_share,
    share_problems,
    status_shares,
)

HeaderLists = tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True)
class Expectation:
    statuses: tuple[int, ...] = (200,)
    backends: tuple[str, ...] = ()  # acceptable pod-name prefixes
    namespace: str | None = None
    request_host: str | None = None
    request_path: str | None = None
    request_headers: Headers = ()
    request_absent: tuple[str, ...] = ()
    response_headers: Headers = ()
    response_absent: tuple[str, ...] = ()
    redirect: Mapping[str, Any] | None = None
    request_method: str | None = None
    valid_header_values: HeaderLists = ()  # response header: any one of these values
    header_lists: HeaderLists = ()  # response header: a comma-separated list, as a set
    mirrored_to: tuple[PodRef, ...] = ()
    not_mirrored_to: tuple[PodRef, ...] = ()
    status_ratio: tuple[tuple[int, Ratio], ...] = ()
    backend_ratio: tuple[tuple[str, Ratio], ...] = ()
    mirrored_ratio: tuple[tuple[PodRef, Ratio], ...] = ()

    @property
    def shares(self) -> Shares:
        return Shares(self.status_ratio, self.backend_ratio, self.mirrored_ratio)


def possible_statuses(outcome: Outcome) -> set[int]:
    """Every status some request of those ``outcome`` stands for gets (its shares)."""
    statuses = {outcome.status, *status_shares(outcome)}
    if outcome.may_refuse:
        statuses.add(0)  # NO_RESPONSE: the handshake may fail
    return statuses


def _check_headers(
    kind: str, expected: Headers, absent: tuple[str, ...], actual: Headers
) -> list[str]:
    have = dict(actual)
    problems = []
    for name, values in expected:
        got = have.get(name)
        if got is None:
            problems.append(f"{kind} header {name!r} missing (expected {list(values)})")
        elif list(got) != list(values) and ",".join(got) != ",".join(values):
            problems.append(f"{kind} header {name!r} is {list(got)}, expected {list(values)}")
    for name in absent:
        if name.lower() in have:
            problems.append(f"{kind} header {name!r} present, expected absent")
    return problems


DEFAULT_PORTS = {"http": 80, "https": 443}


def _check_redirect(want: Mapping[str, Any], outcome: Outcome, request: Request) -> list[str]:
    """Omitted scheme/path mean the request's; omitted port the scheme's default."""
    red = outcome.redirect
    if red is None:
        return ["no redirect, expected one"]
    scheme = str(want.get("scheme", request.scheme))
    expected = {
        "scheme": scheme,
        "host": want.get("host", red.host),
        "port": int(want.get("port") or DEFAULT_PORTS.get(scheme, 0)),
        "path": str(want.get("path", request.path_only)),
    }
    # Host names compare case-insensitively, as outcome_diff compares the models'
    # (found by the fuzzer: Envoy writes Location's host lower-cased, the spec model
    # keeps the request's, and a case recorded from either must accept the other).
    return [
        f"redirect {key} {getattr(red, key)!r}, expected {value!r}"
        for key, value in expected.items()
        if (_folded(getattr(red, key)) if key == "host" else getattr(red, key))
        != (_folded(value) if key == "host" else value)
    ]


def _folded(host: object) -> object:
    return host.lower() if isinstance(host, str) else host


def model_unmet(expect: Expectation, outcome: Outcome, request: Request) -> list[str]:
    """``unmet``, and the shares a model's outcome states (one outcome stands for every
    sample) against the ratios the case expects."""
    return unmet(expect, outcome, request) + share_problems(expect.shares, outcome)


def unmet(expect: Expectation, outcome: Outcome, request: Request) -> list[str]:
    """Why ``outcome`` does not meet ``expect``; empty when it does. Every outcome the
    request may get must meet it (a route with a runtime_fraction answers only some)."""
    problems = _unmet(expect, outcome, request)
    for other in outcome.possibilities()[1:]:
        problems += [
            f"when a runtime_fraction passes the request on: {p}"
            for p in _unmet(expect, other, request)
        ]
    return problems


def _unmet(expect: Expectation, outcome: Outcome, request: Request) -> list[str]:
    problems: list[str] = []
    statuses = possible_statuses(outcome)
    if not statuses <= set(expect.statuses):
        problems.append(f"status {sorted(statuses)}, expected {list(expect.statuses)}")
    if expect.backends:
        names = [b.name for b in outcome.backends]
        stray = [n for n in names if not any(n.startswith(p) for p in expect.backends)]
        if not names or stray:
            problems.append(f"backends {names}, expected {list(expect.backends)}")
    if expect.namespace is not None and any(
        b.namespace != expect.namespace for b in outcome.backends
    ):
        problems.append(
            f"backend namespace {sorted({b.namespace for b in outcome.backends})}, "
            f"expected {expect.namespace}"
        )
    fwd = outcome.request
    wanted = {
        "host": expect.request_host,
        "path": expect.request_path,
        "method": expect.request_method,
    }
    if any(v is not None for v in wanted.values()) or expect.request_headers:
        if fwd is None:
            problems.append("the request was not forwarded to a backend")
        else:
            problems += [
                f"backend saw {key} {getattr(fwd, key)!r}, expected {value!r}"
                for key, value in wanted.items()
                if value is not None and getattr(fwd, key) != value
            ]
    if fwd is not None:
        problems += _check_headers(
            "request", expect.request_headers, expect.request_absent, fwd.headers
        )
    problems += _check_headers(
        "response", expect.response_headers, expect.response_absent, outcome.response_headers
    )
    if expect.redirect is not None:
        problems += _check_redirect(expect.redirect, outcome, request)
    problems += _check_header_values(expect, outcome)
    return problems + _check_mirrors(expect, outcome)


def _check_header_values(expect: Expectation, outcome: Outcome) -> list[str]:
    problems = []
    have = {k: ",".join(v) for k, v in outcome.response_headers}
    for name, allowed in expect.valid_header_values:
        if have.get(name) not in allowed:
            problems.append(
                f"response header {name!r} is {have.get(name)!r}, expected one of {list(allowed)}"
            )
    for name, items in expect.header_lists:
        got = {x.strip() for x in have.get(name, "").split(",") if x.strip()}
        if got != set(items):
            problems.append(
                f"response header {name!r} lists {sorted(got)}, expected {sorted(items)}"
            )
    return problems


def _check_mirrors(expect: Expectation, outcome: Outcome) -> list[str]:
    """A mirror must copy every request (a model's share of 1, or a copy seen live)."""
    problems = []
    mirrored = [(m.namespace, m.name) for m in outcome.mirrors]
    for pod in expect.mirrored_to:
        share = mirror_share(outcome, pod)
        if share == 0:
            problems.append(f"not mirrored to {pod.namespace}/{pod.name} (mirrors: {mirrored})")
        elif share < 1:
            problems.append(
                f"mirrored to {pod.namespace}/{pod.name} in a share {share:.2f} of requests, "
                "expected every request"
            )
    for pod in expect.not_mirrored_to:
        if mirror_share(outcome, pod) > 0:
            problems.append(f"mirrored to {pod.namespace}/{pod.name}, expected not")
    return problems
