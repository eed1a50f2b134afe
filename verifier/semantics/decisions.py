"""Decision lists: a host's routing as a first-match list of (predicate, action).

Both models compile what they would do for one host into this normal form: the spec
model from a (Gateway, Listener, hostname), in the spec's precedence order; the Envoy
model from a (route configuration, virtual host), in the xDS's order. Two lists that
are equal, entry by entry, answer every request routed by them the same way, so
``check`` need not ask the models about such a host's route-matching witnesses
(``verifier.structural``). Neither model may borrow the other's compilation: this
module is the neutral ground they share, and it imports neither (nor the translator).

The normal form states its semantics here, not in either model:

* ``PathPred``: ``exact`` (the path without its query equals ``value``),
  ``segment_prefix`` (equals ``value`` or starts with ``value + "/"``; ``value`` has
  no trailing ``/``), ``prefix`` (starts with ``value``, character by character),
  ``regex`` (RE2 full match of ``value``). All case-sensitive: a case-insensitive
  matcher has no normal form, and its list is not comparable.
* ``ValuePred``: a header (name lower-cased, as names are case-insensitive; several
  values are compared joined with ",") or a query parameter (name as written,
  case-sensitive; the first value), ``exact`` or ``regex`` (RE2 full match), values
  case-sensitive. Presence-only and inverted matchers have no normal form.
* ``Action``: what the proxy answers or forwards, without the parts that copy the
  request through (host, path and method are passed on unchanged; an action that
  rewrites or redirects has no normal form yet). ``HeaderEffect`` says what happens
  to one header name: whether the client's values are dropped, then which values
  are appended, as each model works it out with its own header code.

A list a model cannot state in full in this form carries ``why_not`` and is never
equal to anything: the host's witnesses are then asked as before.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import re2

from verifier.semantics.path_match import first_segment, full_match, path_accepts, regex_segment
from verifier.semantics.request import Headers, Outcome, apply_response_ops

PATH_KINDS = frozenset({"exact", "segment_prefix", "prefix", "regex"})
VALUE_KINDS = frozenset({"exact", "regex"})

# Envoy's route timeout when none is set; the spec model's outcome uses the same
# default (check.deadline), so both lists state a deadline in these terms.
DEFAULT_TIMEOUT_MS = 15_000


# RE2 patterns that say no more than a string: characters that are never syntax, and
# syntax characters escaped with a backslash (how translators quote a literal).
_LITERAL = re2.compile(r"(?:[A-Za-z0-9_~/%:@!,;=' -]|\\[.+*?()\[\]{}|^$\\/-])+")
_ESCAPE = re2.compile(r"\\(.)")
_SEGMENT_PREFIX = re2.compile(r"(.*[^/])\(/\.\*\)\?")
_PREFIX = re2.compile(r"(.*)\.\*")


def _unanchored(pattern: str) -> str:
    """``pattern`` without a leading ``^`` and an unescaped trailing ``$``: under a full
    match (the only way either side reads a regex here) the text's start and end are
    the only places they can match, so they say nothing."""
    if pattern.startswith("^"):
        pattern = pattern[1:]
    if pattern.endswith("$") and (len(pattern) - len(pattern[:-1].rstrip("\\"))) % 2 == 1:
        pattern = pattern[:-1]
    return pattern


def literal(pattern: str) -> str | None:
    """The one string an RE2 full match of ``pattern`` accepts, when it is a string of
    characters that are never syntax or are escaped, perhaps anchored (a regex written
    for an exact value: ``^/api/v1\\.json$``)."""
    return _text(_unanchored(pattern))


def _text(bare: str) -> str | None:
    """The string ``bare`` (no anchors) stands for, if it holds no syntax."""
    if not bare or not _LITERAL.fullmatch(bare):
        return None
    return str(_ESCAPE.sub(lambda m: m.group(1), bare))


def value_pred(name: str, kind: str, value: str) -> ValuePred:
    """A value predicate, a literal regex stated as the exact match it is."""
    if kind == "regex":
        text = literal(value)
        if text is not None:
            return ValuePred(name, "exact", text)
    return ValuePred(name, kind, value)


def path_pred(kind: str, value: str) -> PathPred:
    """A path predicate in its one normal form: a literal regex is ``exact``,
    ``LITERAL(/.*)?`` (how another translator writes a PathPrefix) is
    ``segment_prefix`` and ``LITERAL.*`` is ``prefix`` (exact for the paths
    ``verifier.structural`` decides by them, which hold no newline)."""
    if kind == "regex":
        text = literal(value)
        if text is not None:
            return PathPred("exact", text)
        bare = _unanchored(value)
        found = _SEGMENT_PREFIX.fullmatch(bare)
        text = _text(found.group(1)) if found is not None else None
        if text is not None and text.startswith("/"):
            return PathPred("segment_prefix", text)
        found = _PREFIX.fullmatch(bare)
        text = _text(found.group(1)) if found is not None else None
        if text is not None and text.startswith("/"):
            return PathPred("prefix", text)
    return PathPred(kind, value)


@dataclass(frozen=True)
class PathPred:
    kind: str
    value: str


@dataclass(frozen=True)
class ValuePred:
    name: str
    kind: str
    value: str


@dataclass(frozen=True)
class Predicate:
    path: PathPred
    method: str | None = None
    headers: tuple[ValuePred, ...] = ()  # sorted by name, one per name
    query: tuple[ValuePred, ...] = ()  # sorted by name, one per name


@dataclass(frozen=True)
class HeaderEffect:
    name: str  # lower-cased
    drops: bool  # the client's values are removed
    appends: tuple[str, ...]  # then these values are added, in order


@dataclass(frozen=True, order=True)
class Backend:
    namespace: str
    name: str
    port: int
    weight: int


@dataclass(frozen=True)
class Action:
    """What a matched request gets. Weights are reduced to their smallest equal
    proportions (90/10 and 9/1 split traffic alike)."""

    status: int
    backends: tuple[Backend, ...] = ()
    invalid_weight: int = 0
    unavailable_weight: int = 0
    forwarded: bool = False
    request_headers: tuple[HeaderEffect, ...] = ()
    response_headers: tuple[tuple[str, tuple[str, ...]], ...] = ()
    response_removed: tuple[str, ...] = ()
    response_effects: tuple[HeaderEffect, ...] = ()
    mirrors: tuple[Backend, ...] = ()
    deadline_ms: float = math.inf


@dataclass(frozen=True)
class Entry:
    predicate: Predicate
    action: Action
    # The model's own name for the entry (a RouteRef): for tests and traces, not equality.
    source: Any = field(default=None, compare=False)


@dataclass(frozen=True)
class DecisionList:
    entries: tuple[Entry, ...] = ()
    why_not: str = ""  # set: the list is not comparable

    @property
    def comparable(self) -> bool:
        return not self.why_not

    def same_as(self, other: DecisionList) -> bool:
        """Equal, entry by entry, and both comparable: the same answer to every request."""
        return self.comparable and other.comparable and self.entries == other.entries


def not_comparable(why: str) -> DecisionList:
    return DecisionList((), why)


def deadline_ms(request_ms: int | None, backend_ms: int | None) -> float:
    """How long the client may wait for the backend (0 disables a timeout): with no
    retries the overall and per-attempt timeouts act as one deadline."""
    overall = DEFAULT_TIMEOUT_MS if request_ms is None else request_ms
    limits = [t for t in (overall, backend_ms) if t]
    return float(min(limits)) if limits else math.inf


def reduced(
    backends: Iterable[tuple[str, str, int, int]], *others: int
) -> tuple[tuple[Backend, ...], tuple[int, ...]]:
    """Backends merged per Service port and all weights divided by their common divisor."""
    merged: dict[tuple[str, str, int], int] = {}
    for ns, name, port, weight in backends:
        merged[(ns, name, port)] = merged.get((ns, name, port), 0) + weight
    divisor = math.gcd(*merged.values(), *others) or 1
    out = tuple(Backend(*key, weight=w // divisor) for key, w in sorted(merged.items()) if w)
    return out, tuple(o // divisor for o in others)


SENTINEL = "\x00client"  # a value no configuration sets: the client's own


def header_effects(
    names: Iterable[str],
    absent: Mapping[str, tuple[str, ...]],
    present: Mapping[str, tuple[str, ...]],
) -> tuple[HeaderEffect, ...] | None:
    """The effect on each of ``names`` from two runs of a model's header code: on a
    request without them (``absent``) and on one carrying each once with ``SENTINEL``
    (``present``). None when the effect depends on whether the header was there
    (add-if-absent, overwrite-if-exists): no normal form."""
    out = []
    for name in sorted(set(names)):
        with_it = present.get(name, ())
        kept = bool(with_it) and with_it[0] == SENTINEL
        appended = with_it[1:] if kept else with_it
        if SENTINEL in appended or absent.get(name, ()) != appended:
            return None
        if kept or appended:
            out.append(HeaderEffect(name, not kept, appended))
        else:
            out.append(HeaderEffect(name, True, ()))
    return tuple(e for e in out if e.drops or e.appends)


def with_effects(effects: Iterable[HeaderEffect], headers: Headers) -> Headers:
    """The request headers ``headers`` as an action with these effects forwards them:
    what ``HeaderEffect`` means, stated once."""
    out = dict(headers)
    for e in effects:
        kept = () if e.drops else out.get(e.name, ())
        out[e.name] = (*kept, *e.appends)
    return tuple(sorted((k, v) for k, v in out.items() if v))


def probe_headers(names: Iterable[str]) -> Headers:
    """A request's (or a backend response's) headers carrying each name once, with
    the client's ``SENTINEL`` value."""
    return tuple((n, (SENTINEL,)) for n in sorted(set(names)))


def action_of(
    absent: Outcome,
    present: Outcome,
    probe: tuple[str, str, str],
    request_names: Iterable[str],
    response_names: Iterable[str],
) -> tuple[Action | None, str]:
    """The normal form of an action from a model's own answers to two probe requests
    that reach it: one with none of the headers the action touches (``absent``), one
    with each of ``request_names`` set to ``SENTINEL`` (``present``); ``probe`` is
    their (method, host, path). The response side reads the operations each outcome
    states, as check compares them (``apply_response_ops``). (None, why) when the
    answer depends on the request in a way this form does not state."""
    for o in (absent, present):
        if o.status == 0 or o.otherwise is not None or o.may_refuse or o.caveats:
            return None, "an answer that rests on more than the action"
        if o.redirect is not None:
            return None, "a redirect (not in the normal form yet)"
    forwarded = absent.request is not None
    if forwarded != (present.request is not None):
        return None, "forwarding depends on the request's headers"
    req_effects: tuple[HeaderEffect, ...] = ()
    if absent.request is not None and present.request is not None:
        for f in (absent.request, present.request):
            if (f.method, f.host, f.path) != probe:
                return None, "the request is rewritten (not in the normal form yet)"
        found = header_effects(
            request_names, dict(absent.request.headers), dict(present.request.headers)
        )
        if found is None:
            return None, "a request header operation depends on the request's headers"
        req_effects = found
    if (absent.status, absent.backends, absent.response_header_ops) != (
        present.status,
        present.backends,
        present.response_header_ops,
    ):
        return None, "the answer depends on the request's headers"
    names = {*response_names, *(n for _, n, _ in absent.response_header_ops)}
    resp_effects = header_effects(
        names,
        dict(apply_response_ops((), absent.response_header_ops)),
        dict(apply_response_ops(probe_headers(names), absent.response_header_ops)),
    )
    if resp_effects is None:
        return None, "a response header operation depends on the backend's headers"
    backends, (invalid, unavailable) = reduced(
        ((b.namespace, b.name, b.port, b.weight) for b in absent.backends),
        absent.invalid_weight,
        absent.unavailable_weight,
    )
    if any(b.aliases for b in absent.backends):
        return None, "backends known by several names"
    mirrors = tuple(sorted(Backend(b.namespace, b.name, b.port, b.weight) for b in absent.mirrors))
    action = Action(
        status=absent.status,
        backends=backends,
        invalid_weight=invalid,
        unavailable_weight=unavailable,
        forwarded=forwarded,
        request_headers=req_effects,
        response_headers=tuple((k, v) for k, v in absent.response_headers if any(v)),
        response_removed=tuple(sorted(set(absent.response_headers_removed))),
        response_effects=resp_effects,
        mirrors=mirrors,
        deadline_ms=deadline_ms(absent.request_timeout_ms, absent.backend_timeout_ms)
        if forwarded
        else math.inf,
    )
    return action, ""


# ------------------------------------------------------------------ first match


def accepts_path(p: PathPred, path: str) -> bool:
    return path_accepts(p.kind, p.value, path)


def _value_ok(v: ValuePred, value: str) -> bool:
    return value == v.value if v.kind == "exact" else full_match(v.value, value)


@dataclass(frozen=True)
class View:
    """A request as a decision list sees it: the path without its query, the method,
    header values by lower-cased name, query parameters (first value, decoded)."""

    path: str
    method: str
    headers: Mapping[str, tuple[str, ...]]
    query: Mapping[str, str]

    @staticmethod
    def of(path: str, method: str, headers: Iterable[tuple[str, str]]) -> View:
        only, _, query = path.partition("?")
        values: dict[str, tuple[str, ...]] = {}
        for k, v in headers:
            values[k.lower()] = (*values.get(k.lower(), ()), v)
        params: dict[str, str] = {}
        for part in query.split("&"):
            if part:
                name, _, value = part.partition("=")
                params.setdefault(unquote(name), unquote(value))
        return View(only, method, values, params)


def accepts(p: Predicate, view: View) -> bool:
    if not accepts_path(p.path, view.path):
        return False
    if p.method is not None and p.method != view.method:
        return False
    for h in p.headers:
        values = view.headers.get(h.name)
        if not values or not _value_ok(h, ",".join(values)):
            return False
    return all(q.name in view.query and _value_ok(q, view.query[q.name]) for q in p.query)


def first_match(dl: DecisionList, view: View) -> int | None:
    """The index of the first entry whose predicate accepts ``view``; None: none does."""
    for i, e in enumerate(dl.entries):
        if accepts(e.predicate, view):
            return i
    return None


class Index:
    """``first_match`` without testing every entry: an ``exact`` entry can only accept
    its own path, a ``segment_prefix`` entry only paths whose first segment is its
    value's, a regex that starts with a literal ``/segment/`` only paths under it; the
    rest are tested for every request. Order is kept (merged by index)."""

    def __init__(self, dl: DecisionList) -> None:
        self.entries = dl.entries
        self.exact: dict[str, list[int]] = {}
        self.segment: dict[str, list[int]] = {}
        self.generic: list[int] = []
        for i, e in enumerate(dl.entries):
            p = e.predicate.path
            if p.kind == "exact":
                self.exact.setdefault(p.value, []).append(i)
            elif p.kind == "segment_prefix" and p.value.startswith("/"):
                self.segment.setdefault(first_segment(p.value), []).append(i)
            elif p.kind == "regex" and (segment := regex_segment(p.value)) is not None:
                self.segment.setdefault(segment, []).append(i)
            else:
                self.generic.append(i)

    def first_match(self, view: View) -> int | None:
        none: list[int] = []
        candidates: list[int] = sorted(
            [
                *self.exact.get(view.path, none),
                *self.segment.get(first_segment(view.path), none),
                *self.generic,
            ]
        )
        for i in candidates:
            if accepts(self.entries[i].predicate, view):
                return i
        return None
