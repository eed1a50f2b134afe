"""The chosen route's action: forward, redirect or answer directly.

Order inside Envoy for a forwarded request (``RouteEntryImplBase::finalizeRequestHeaders``
after the HCM's filters): weighted-cluster header mutations, then the route's levels,
then the Host rewrite, then the path rewrite. Response mutations run on the upstream
response, and the CORS filter's encoder runs after them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from verifier.semantics.envoy.clusters import ClusterResolver
from verifier.semantics.envoy.config import CompiledRouteConfig, CompiledVhost
from verifier.semantics.envoy.downstream import Downstream
from verifier.semantics.envoy.forward import Upstreams, mirrors, timeouts, upstream_deadline_ms
from verifier.semantics.envoy.headers import (
    HeaderList,
    HeaderParser,
    apply_all,
    describe,
    sequential_ops,
)
from verifier.semantics.envoy.listeners import Hcm
from verifier.semantics.envoy.paths import split_target
from verifier.semantics.envoy.redirect import (
    REDIRECT_STATUS,
    Code,
    location,
    parse_location,
    rewrite_path,
)
from verifier.semantics.envoy.routes import CompiledRoute
from verifier.semantics.envoy.strings import global_replace
from verifier.semantics.request import (
    Forwarded,
    Headers,
    Outcome,
    Request,
    normalize_headers,
)
from verifier.xds import read

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.route.v3 import RouteAction


@dataclass(frozen=True)
class BackendReply:
    """How the backend answers, for questions whose outcome depends on it.

    Envoy's response mutations and the CORS filter act on the backend's response
    headers, and its timeouts on how long the backend takes. By default the backend
    answers at once with no headers of its own (``status`` None: 200, as Outcome
    reports every forwarded request; a backend accepting an upgrade answers 101).
    """

    status: int | None = None
    headers: Headers = ()
    latency_ms: int = 0


# RFC 9110 §7.6.1: a proxy removes the connection-specific headers and the ones the
# Connection header names; Envoy 1.40's codec does (checked), keeping `te: trailers`.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding"})
UPGRADE_DENIED_STATUS = 403  # "upgrade_failed": the HCM's local reply


@dataclass
class RouteContext:
    request: Request
    host: str  # after the HCM's host handling
    path: str  # after the HCM's path handling, with query
    headers: HeaderList  # client headers, lower-cased, without Host
    # Joined values and pseudo-headers, as matchers see them; :scheme is the one the
    # HCM decided (origin.py), which redirects keep (checked: a client's
    # x-forwarded-proto "https" makes it https without use_remote_address).
    view: dict[str, str]
    hcm: Hcm
    config: CompiledRouteConfig
    vhost: CompiledVhost
    route: CompiledRoute
    resolver: ClusterResolver
    upstreams: Upstreams
    reply: BackendReply = field(default_factory=BackendReply)
    # The connection as restored (an ORIGINAL_DST cluster dials its local address).
    downstream: Downstream | None = None


def _local_reply(
    status: int, rctx: RouteContext, parsers: list[HeaderParser], **fields: Any
) -> Outcome:
    """A response Envoy makes itself, with the route's response header mutations."""
    return Outcome(
        status,
        response_headers=normalize_headers(apply_all(parsers, [])),
        response_headers_removed=tuple(sorted({n for p in parsers for n in p.to_remove})),
        response_header_ops=sequential_ops(parsers),
        route=rctx.route.ref,
        **fields,
    )


def _matched_part(rctx: RouteContext) -> str:
    """What prefix_rewrite replaces: the configured prefix or path, or for a regex
    route the whole path without its query."""
    m = rctx.route.match
    if m.kind in ("prefix", "path", "path_separated_prefix") and isinstance(m.value, str):
        return rctx.path[: len(m.value)]
    return split_target(rctx.path)[0]


def run_action(rctx: RouteContext, trace: list[str]) -> Outcome:
    route = rctx.route.route
    kind, _ = read.one_of(route, "action")
    levels = rctx.config.levels(rctx.route, rctx.vhost, request=False)
    if kind == "redirect" and route.redirect is not None:
        red = route.redirect
        path = rewrite_path(
            rctx.path, _matched_part(rctx), red.prefix_rewrite or None, red.regex_rewrite
        )
        url = location(red, rctx.view[":scheme"], rctx.host, path)
        status = REDIRECT_STATUS.get(int(red.response_code or Code.MOVED_PERMANENTLY), 301)
        trace.append(f"redirect {status} Location: {url}")
        return _local_reply(status, rctx, levels, redirect=parse_location(url))
    if kind == "direct_response" and route.direct_response is not None:
        status = route.direct_response.status
        trace.append(f"direct response {status}")
        redirect = None
        if status == 201 or 300 <= status < 400:
            # "See https://tools.ietf.org/html/rfc7231#section-7.1.2": such direct
            # responses carry a Location built from the request itself.
            url = location(None, rctx.view[":scheme"], rctx.host, rctx.path)
            redirect = parse_location(url)
        return _local_reply(status, rctx, levels, redirect=redirect)
    if kind == "route" and route.route is not None:
        return _forward(rctx, route.route, trace)
    trace.append(f"route action {kind or '<unset>'} not modelled")
    return Outcome(0, route=rctx.route.ref, notes=(f"route action {kind} not modelled",))


def _upgrade(rctx: RouteContext, action: RouteAction) -> tuple[str | None, bool]:
    """(upgrade type, allowed). createUpgradeFilterChain: a route's upgrade_config
    decides when it names the type (enabled defaults to true); else the HCM's."""
    view = rctx.view
    tokens = {t.strip().lower() for t in view.get("connection", "").split(",")}
    kind = view.get("upgrade", "").strip().lower()
    if not kind or "upgrade" not in tokens:
        return None, False
    for u in action.upgrade_configs:
        if u.upgrade_type.lower() == kind:
            return kind, u.enabled is not False
    return kind, rctx.hcm.upgrades.get(kind, False)


def _hop_by_hop(headers: HeaderList, upgrading: bool) -> HeaderList:
    nominated = {t.strip().lower() for k, v in headers if k == "connection" for t in v.split(",")}
    drop = (HOP_BY_HOP | nominated | {"upgrade"}) - (
        {"connection", "upgrade"} if upgrading else set()
    )
    return [
        (k, v)
        for k, v in headers
        if k not in drop and not (k == "te" and v.strip().lower() != "trailers")
    ]


def _forward(rctx: RouteContext, action: RouteAction, trace: list[str]) -> Outcome:
    notes: list[str] = []
    upgrade, allowed = _upgrade(rctx, action)
    if upgrade is not None and not allowed:
        trace.append(f"upgrade {upgrade!r} is not enabled for this route: 403")
        levels = rctx.config.levels(rctx.route, rctx.vhost, request=False)
        return _local_reply(UPGRADE_DENIED_STATUS, rctx, levels)
    cors = None
    policies = rctx.config.cors(rctx.route, rctx.vhost, rctx.hcm.cors_filter)
    if policies is not None and rctx.hcm.cors_filter is not None:
        cors = policies.evaluate(rctx.request.method.upper(), rctx.view)
    elif policies is not None:
        notes.append("a CORS policy is configured but the HCM has no CORS filter")
    if cors is not None:
        trace.append(cors.trace)
        notes += cors.notes
        if cors.preflight:
            return Outcome(
                200,
                response_headers=normalize_headers(cors.response_headers),
                response_header_ops=tuple(("set", k, v) for k, v in cors.response_headers),
                route=rctx.route.ref,
                notes=tuple(notes),
            )
    up = rctx.upstreams.of(action, rctx.view, rctx.downstream)
    trace += up.trace
    notes += up.notes
    request_ms, backend_ms = timeouts(action, rctx.vhost.vhost)
    deadline = upstream_deadline_ms(request_ms, backend_ms)
    timed_out = bool(up.backends) and deadline is not None and rctx.reply.latency_ms >= deadline
    if timed_out:
        trace.append(f"the backend takes {rctx.reply.latency_ms} ms >= {deadline} ms: 504")
    answered = bool(up.backends) and not timed_out
    upstream_headers = [(k, v) for k, vs in rctx.reply.headers for v in vs] if answered else []
    response_levels = [
        *up.response_headers,
        *rctx.config.levels(rctx.route, rctx.vhost, request=False),
    ]
    resp = apply_all(response_levels, upstream_headers)
    removed = tuple(sorted({n for p in response_levels for n in p.to_remove}))
    ops = sequential_ops(response_levels)
    if cors is not None:
        for name, value in cors.response_headers:
            resp = [(k, v) for k, v in resp if k != name] + [(name, value)]
        ops += tuple(("set", k, v) for k, v in cors.response_headers)
    if not up.backends or timed_out:
        return Outcome(
            504 if timed_out else up.status,
            invalid_weight=up.invalid_weight,
            # A timed-out backend's answer stands for all of it, as the spec side's does.
            unavailable_weight=0 if timed_out else up.unavailable_weight,
            response_headers=normalize_headers(resp),
            response_headers_removed=removed,
            response_header_ops=ops,
            route=rctx.route.ref,
            notes=tuple(notes),
        )
    request_parsers = [
        *up.request_headers,
        *rctx.config.levels(rctx.route, rctx.vhost, request=True),
    ]
    for p in request_parsers:
        if not p.empty:
            trace.append("request headers, " + describe(p))
        notes += p.notes
    headers = apply_all(request_parsers, _hop_by_hop(rctx.headers, upgrade is not None))
    host = _host_rewrite(rctx, action, up.host_literal, up.dns_host, notes)
    path = rewrite_path(
        rctx.path, _matched_part(rctx), action.prefix_rewrite or None, action.regex_rewrite
    )
    if path != rctx.path:
        trace.append(f"path rewritten to {path!r}")
    if action.path_rewrite_policy is not None:
        notes.append("path_rewrite_policy (URI templates) not modelled")
    mirrored, mirror_notes = mirrors(action, rctx.vhost.vhost, rctx.config.config, rctx.resolver)
    notes += mirror_notes
    # Outcome: 200 "when it forwards to a backend"; a 101 is the backend's answer.
    status = rctx.reply.status or 200
    if upgrade is not None:
        notes.append(f"{upgrade} upgrade forwarded; the backend answers it (101 if it accepts)")
    return Outcome(
        status,
        backends=up.backends,
        invalid_weight=up.invalid_weight,
        unavailable_weight=up.unavailable_weight,
        request=Forwarded(rctx.request.method.upper(), host, path, normalize_headers(headers)),
        response_headers=normalize_headers(resp),
        response_headers_removed=removed,
        response_header_ops=ops,
        mirrors=mirrored,
        request_timeout_ms=request_ms,
        backend_timeout_ms=backend_ms,
        route=rctx.route.ref,
        notes=tuple(notes),
    )


def _host_rewrite(
    rctx: RouteContext,
    action: RouteAction,
    weighted_literal: str | None,
    dns_host: str | None,
    notes: list[str],
) -> str:
    host = rctx.host
    if weighted_literal:
        host = weighted_literal
    kind, _ = read.one_of(action, "host_rewrite_specifier")
    if kind == "host_rewrite_literal" and action.host_rewrite_literal:
        return action.host_rewrite_literal
    if kind == "auto_host_rewrite" and action.auto_host_rewrite:
        if dns_host:
            return dns_host
        notes.append("auto_host_rewrite: the endpoint has no hostname; Host unchanged")
    elif kind == "host_rewrite_header" and action.host_rewrite_header:
        value = rctx.view.get(action.host_rewrite_header.lower())
        if value:
            return value
    elif kind == "host_rewrite_path_regex" and action.host_rewrite_path_regex is not None:
        rx = action.host_rewrite_path_regex
        if rx.pattern is not None:
            return global_replace(rx.pattern.regex, rx.substitution, split_target(rctx.path)[0])
    return host
