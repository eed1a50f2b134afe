"""Values Envoy refuses, found without running Envoy.

Why it matters: one refused value NACKs the whole resource (every route of a route
configuration, every listener of an LDS update), and envoy-accepts-config can only say
so when an Envoy binary is at hand. Each check below was confirmed with ``envoy --mode
validate`` 1.40 (quoted: Envoy's message):

- weighted_clusters whose weights sum to 0: "Sum of weights in the weighted_cluster
  must be greater than 0."; an entry without ``weight``: "Field 'weight' is missing";
  no entries: "value must contain at least 1 item(s)";
- a regex RE2 cannot compile as Envoy compiles it (Latin-1), e.g. "invalid escape
  sequence: \\x{100", or an empty one;
- a route match without a path specifier ("path_specifier: is required") and a
  StringMatcher without a pattern ("match_pattern: is required");
- header matchers with an empty name or one containing NUL/CR/LF ("value does not
  match regex pattern"), query parameter matchers with an empty name;
- a redirect ``response_code`` outside the enum ("value must be one of the defined
  enum values"); a ``direct_response`` status outside [200, 600);
- more than one of ``prefix_rewrite``, ``regex_rewrite``, ``path_rewrite_policy``
  ("Specify only one of ...");
- ``path_separated_prefix`` not matching ``^[^?#]+[^?#/]$`` (a trailing ``/``, ``?``);
- header mutations: an empty name, NUL/CR/LF in a name or value, and any ``:``-prefixed
  or ``host`` header (":-prefixed or host headers may not be modified/removed"; a Host
  change on a host-rewriting route is host-rewrite-with-host-header's);
- a cluster ``connect_timeout`` of 0 or less ("value must be greater than 0s").

Not included because Envoy accepts them: listener ``port_value: 0`` (an ephemeral
port), a header matcher value with a newline, ``total_weight`` not matching the sum.

Example: a rule whose backendRefs all have ``weight: 0`` rendered as weighted_clusters
with zero weights instead of a 500 direct response.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING

import re2
from verifier.rules.support import headers as hdr
from verifier.rules.support import regex as rx
from verifier.rules.support import walk

from verifier.check import Context
from verifier.findings import Finding, new
from verifier.registry import Rule
from verifier.xds import read
from verifier.xds.enums import RedirectActionRedirectResponseCode

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.route.v3 import (
        RouteMatch,
    )

NAME = "envoy-invalid-values"
CODE = "EV604"
ROUTE_MATCH = "envoy.config.route.v3.RouteMatch"
Problem = tuple[str, str]  # (xds path, what is wrong)
_BAD_CHARS = re2.compile(r"[\x00\r\n]")
_PATH_SEPARATED = re2.compile(r"[^?#]+[^?#/]")
REWRITES = ("prefix_rewrite", "regex_rewrite", "path_rewrite_policy")
_REDIRECT_CODES = frozenset(int(c) for c in RedirectActionRedirectResponseCode)


def _weighted(ref: walk.RouteRef) -> Iterator[Problem]:
    act = walk.action(ref.route)
    if act is None or read.one_of(act, "cluster_specifier")[0] != "weighted_clusters":
        return
    entries = act.weighted_clusters.clusters if act.weighted_clusters is not None else []
    base = f"{ref.path}.route.weighted_clusters"
    if not entries:
        yield base, "weighted_clusters has no clusters"
    for i, cw in enumerate(entries):
        if cw.weight is None:
            yield f"{base}.clusters[{i}]", f"cluster {cw.name!r} has no weight"
    weights = [cw.weight for cw in entries]
    if entries and None not in weights and sum(w or 0 for w in weights) == 0:
        yield base, "the weights sum to 0"


def _match(match: RouteMatch, base: str) -> Iterator[Problem]:
    kind, value = read.one_of(match, "path_specifier")
    if not kind:
        yield base, "the match has no path specifier (prefix, path, safe_regex, ...)"
    if kind == "path_separated_prefix" and not _PATH_SEPARATED.fullmatch(str(value)):
        yield f"{base}.path_separated_prefix", f"path_separated_prefix {value!r} is malformed"
    for i, h in enumerate(match.headers):
        if not h.name or _BAD_CHARS.search(h.name):
            yield f"{base}.headers[{i}]", f"header matcher {h.name!r}: empty, or CR/LF/NUL in it"
    for i, q in enumerate(match.query_parameters):
        if not q.name:
            yield f"{base}.query_parameters[{i}]", "query parameter matcher name is empty"


def _route(ref: walk.RouteRef) -> Iterator[Problem]:
    route = ref.route
    yield from _weighted(ref)
    yield from _match(route.match or read.empty(ROUTE_MATCH), f"{ref.path}.match")
    kind, value = read.one_of(route, "action")
    if kind == "redirect" and int(value.response_code) not in _REDIRECT_CODES:
        code = int(value.response_code)
        yield f"{ref.path}.redirect", f"redirect response_code {code} is not a defined value"
    if kind == "direct_response" and not 200 <= value.status < 600:
        yield f"{ref.path}.direct_response", f"status {value.status} is outside [200, 600)"
    if kind == "route":
        rewrites = [value.prefix_rewrite, value.regex_rewrite, value.path_rewrite_policy]
        if sum(r is not None and r != "" for r in rewrites) > 1:
            yield f"{ref.path}.route", f"sets more than one of {', '.join(REWRITES)}"


def _headers(ctx: Context) -> Iterator[Problem]:
    for m in hdr.mutations(ctx.snapshot):
        if not m.name or _BAD_CHARS.search(m.name) or _BAD_CHARS.search(m.value or ""):
            yield m.path, f"header {m.name!r}: empty name, or NUL/CR/LF in name or value"
        elif m.protected and not hdr.rewrite_conflict(m):
            yield m.path, f"header {m.name!r} is :-prefixed or host, which may not be {m.verb}"


def problems(ctx: Context) -> Iterator[Problem]:
    for ref in walk.routes(ctx.snapshot):
        yield from _route(ref)
    yield from _headers(ctx)
    for path, matcher in rx.regexes(ctx.snapshot):
        size, error = rx.compile_envoy(matcher.regex)
        if size is None:
            yield path, f"regex {matcher.regex!r} does not compile in RE2: {error}"
    for path in rx.empty_string_matchers(ctx.snapshot):
        yield path, "StringMatcher has no pattern (exact, prefix, suffix, safe_regex, ...)"
    for c in ctx.snapshot.clusters:
        if c.connect_timeout is not None and c.connect_timeout <= timedelta(0):
            yield f"clusters[{c.name}].connect_timeout", "connect_timeout is not greater than 0s"


def check(ctx: Context) -> Iterable[Finding]:
    routes = {ref.path: ref for ref in walk.routes(ctx.snapshot)}
    for path, problem in problems(ctx):
        owner = next((r for p, r in routes.items() if path.startswith(p + ".")), None)
        where = walk.route_where(ctx, owner) if owner else {"resource": walk.resource_of(path)}
        yield new(
            CODE,
            NAME,
            **where,
            xds_path=path,
            actual={"problem": problem},
            where=path,
            problem=problem,
        )


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("Gateway",),
    spec_ref="https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/config/route/v3/route_components.proto",
    doc=(__doc__ or "").strip(),
    check=check,
)
