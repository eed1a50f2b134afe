"""Requests biased to the boundaries of a world's matches.

The witness generator already sends each match's own request and its named
neighbours (one character short, a segment longer, the other case, ...).
The fuzzer adds drawn neighbours of those witnesses: a perturbation of one
part (path, header, query, method, host) of a drawn witness. They land where
translations go wrong (just inside or just outside a match) far more often
than uniform noise, and Hypothesis shrinks them like any other draw.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from hypothesis import strategies as st

from verifier.semantics import witness as wt
from verifier.semantics.request import Request, normalize_headers

from .worlds import HEADER_VALUES, METHODS, QUERY_VALUES

Perturb = Callable[[Request], Request | None]


def _path(req: Request, fn: Callable[[str], str]) -> Request | None:
    path = fn(req.path_only)
    if not path.startswith("/"):
        return None
    query = f"?{req.query}" if req.query else ""
    return dataclasses.replace(req, path=path + query)


def _query(req: Request, fn: Callable[[str], str]) -> Request:
    query = fn(req.query)
    return dataclasses.replace(req, path=req.path_only + (f"?{query}" if query else ""))


def _headers(req: Request, fn: Callable[[list[tuple[str, str]]], list[tuple[str, str]]]) -> Request:
    pairs = [(n, v) for n, vs in req.headers for v in vs]
    return dataclasses.replace(req, headers=normalize_headers(fn(pairs)))


def _swap_values(values: Sequence[str]) -> Callable[[str], str]:
    def swap(v: str) -> str:
        return values[(values.index(v) + 1) % len(values)] if v in values else values[0]

    return swap


def _each_header(
    fn: Callable[[str], str],
) -> Callable[[list[tuple[str, str]]], list[tuple[str, str]]]:
    return lambda pairs: [(n, fn(v)) for n, v in pairs]


def _each_query(fn: Callable[[str], str]) -> Callable[[str], str]:
    def each(query: str) -> str:
        parts = [p.partition("=") for p in query.split("&") if p]
        return "&".join(f"{k}={fn(v)}" for k, _, v in parts)

    return each


def _add_absent(
    extra: list[tuple[str, str]],
) -> Callable[[list[tuple[str, str]]], list[tuple[str, str]]]:
    def add(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
        sent = {n.lower() for n, _ in pairs}
        return pairs + [(n, v) for n, v in extra if n not in sent]

    return add


PERTURBATIONS: dict[str, Perturb] = {
    "path+slash": lambda r: _path(r, lambda p: p + "/"),
    "path+char": lambda r: _path(r, lambda p: p + "x"),
    "path+segment": lambda r: _path(r, lambda p: p.rstrip("/") + "/z"),
    "path-char": lambda r: _path(r, lambda p: p[:-1]),
    "path-upper": lambda r: _path(r, str.upper),
    "path-digits": lambda r: _path(r, lambda p: p.rstrip("/") + "/42"),
    "header-case": lambda r: _headers(r, _each_header(str.swapcase)),
    "header-value": lambda r: _headers(r, _each_header(_swap_values(HEADER_VALUES))),
    "header-drop": lambda r: _headers(r, lambda pairs: pairs[1:]),
    # Only names the request does not send: which value of a repeated header a
    # match reads is implementation-specific, so the spec decides nothing there.
    "header-add": lambda r: _headers(r, _add_absent([("x-a", "1"), ("x-b", "v")])),
    "query-drop": lambda r: _query(r, lambda q: q.partition("&")[2]),
    "query-case": lambda r: _query(r, _each_query(str.swapcase)),
    "query-value": lambda r: _query(r, _each_query(_swap_values(QUERY_VALUES))),
    "query-add": lambda r: _query(r, lambda q: "&".join(x for x in (q, "q=1&k=a") if x)),
    "method": lambda r: dataclasses.replace(
        r, method=METHODS[(METHODS.index(r.method) + 1) % 2] if r.method in METHODS else "GET"
    ),
    "host-port": lambda r: dataclasses.replace(r, host=f"{r.hostname}:{r.port}"),
    "host-upper": lambda r: dataclasses.replace(r, host=r.host.upper()),
    "host-sub": lambda r: dataclasses.replace(r, host=f"x.{r.hostname}"),
    "host-parent": lambda r: dataclasses.replace(r, host=r.hostname.partition(".")[2] or "test"),
    # wild.a.test -> wild.test: under a wider wildcard, outside the narrower one.
    "host-drop-label": lambda r: dataclasses.replace(r, host=_drop_second_label(r.hostname)),
}


def _drop_second_label(host: str) -> str:
    labels = host.split(".")
    return ".".join(labels[:1] + labels[2:]) if len(labels) > 2 else host


def merged(into: Request, other: Request, part: str) -> Request:
    """``into`` with ``other``'s method, headers or query added: a request two
    matches accept at once, where only precedence decides."""
    if part == "method":
        return dataclasses.replace(into, method=other.method)
    if part == "headers":
        pairs = [(n, v) for n, vs in into.headers for v in vs]
        sent = {n for n, _ in pairs}
        pairs += [(n, v) for n, vs in other.headers if n not in sent for v in vs]
        return dataclasses.replace(into, headers=normalize_headers(pairs))
    query = "&".join(q for q in (into.query, other.query) if q)
    return dataclasses.replace(into, path=into.path_only + (f"?{query}" if query else ""))


def rivals(witnesses: Sequence[wt.Witness]) -> list[tuple[int, int]]:
    """Pairs of witnesses of two different matches, sent to one Gateway, host and path:
    one with the other's conditions added is a request both matches accept, and
    only precedence (method, header count, query count, age, name, rule order)
    says which wins."""
    groups: dict[tuple[object, ...], list[int]] = {}
    for i, w in enumerate(witnesses):
        if w.route is not None:
            key = (w.gateway, w.request.port, w.request.hostname, w.request.path_only)
            groups.setdefault(key, []).append(i)
    return [
        (i, j)
        for members in groups.values()
        for i in members
        for j in members
        if (witnesses[i].route, witnesses[i].rule, witnesses[i].match)
        != (witnesses[j].route, witnesses[j].rule, witnesses[j].match)
    ]


@st.composite
def neighbours(draw: st.DrawFn, witnesses: Sequence[wt.Witness], count: int) -> list[wt.Witness]:
    """``count`` drawn perturbations of drawn witnesses, and ``count // 2`` crossings
    (one witness with another's method, headers or query), fewer when some do
    not apply."""
    if not witnesses:
        return []
    picks = draw(
        st.lists(
            st.tuples(st.integers(0, len(witnesses) - 1), st.sampled_from(sorted(PERTURBATIONS))),
            min_size=count,
            max_size=count,
        )
    )
    pairs = rivals(witnesses)
    crossings = (
        draw(
            st.lists(
                st.tuples(st.sampled_from(pairs), st.sampled_from(["method", "headers", "query"])),
                min_size=count // 2,
                max_size=count // 2,
            )
        )
        if pairs
        else []
    )
    out = []
    for (i, j), part in crossings:
        base, other = witnesses[i], witnesses[j]
        changed = merged(base.request, other.request, part)
        if changed != base.request:
            note = f"{part} of witness {j} added to: {base.note}".strip()
            out.append(dataclasses.replace(base, request=changed, note=note))
    for index, name in picks:
        base = witnesses[index]
        perturbed = PERTURBATIONS[name](base.request)
        if perturbed is None or perturbed == base.request:
            continue
        out.append(
            dataclasses.replace(base, request=perturbed, note=f"{name} of: {base.note}".strip())
        )
    return out
