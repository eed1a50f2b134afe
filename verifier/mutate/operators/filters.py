"""Mutation operators on what a selected route changes: headers, redirects, rewrites, CORS."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

from envoy_data_plane.envoy.config.core.v3 import (
    HeaderValueOption,
    HeaderValueOptionHeaderAppendAction,
)
from envoy_data_plane.envoy.config.route.v3 import (
    RedirectActionRedirectResponseCode,
    Route,
    RouteConfiguration,
)
from envoy_data_plane.envoy.extensions.filters.http.cors.v3 import CorsPolicy
from envoy_data_plane.envoy.type.matcher.v3 import StringMatcher

from verifier.mutate.core import (
    Edit,
    Nav,
    Operator,
    Site,
    clear_field,
    each_vhost,
    on_routes,
    pop_item,
    redirect_action,
    route_action,
    set_field,
    vhost_path,
    weighted_entry,
)
from verifier.mutate.core import with_route_config as _with_rc
from verifier.mutate.proofs import prove_route_local
from verifier.xds.codec import pack_any, unpack_any
from verifier.xds.snapshot import Snapshot

MUTANT_ORIGIN = "https://mutant.invalid"
HEADER_LISTS = (
    "request_headers_to_add",
    "request_headers_to_remove",
    "response_headers_to_add",
    "response_headers_to_remove",
)


# --- header modifiers ----------------------------------------------------------------------------


def _itself(r: Route) -> Any:
    return r


def _header_owners(r: Route) -> Iterator[tuple[str, Nav, Any]]:
    yield "", _itself, r
    wc = r.route.weighted_clusters if r.route else None
    for k, c in enumerate(wc.clusters if wc else []):
        yield f".route.weighted_clusters.clusters[{k}]", weighted_entry(k), c


def _item_name(item: object) -> str:
    if isinstance(item, HeaderValueOption):
        return item.header.key if item.header else "?"
    return str(item)


def _drop_header_modifier(snap: Snapshot, r: Route) -> Iterator[Edit]:
    for prefix, nav, owner in _header_owners(r):
        for field in HEADER_LISTS:
            for k, item in enumerate(getattr(owner, field)):
                yield Edit(
                    f"{prefix}.{field}[{k}]",
                    f"{field} entry {_item_name(item)!r} dropped",
                    pop_item(nav, field, k),
                )


_APPEND = HeaderValueOptionHeaderAppendAction.APPEND_IF_EXISTS_OR_ADD
_OVERWRITE = HeaderValueOptionHeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD


def flip_append(option: HeaderValueOption) -> None:
    """Append <-> overwrite, in place (the deprecated ``append`` flag is negated if set)."""
    if option.append is not None:
        option.append = not option.append
    else:
        option.append_action = _OVERWRITE if option.append_action == _APPEND else _APPEND


def _append_name(option: HeaderValueOption) -> str:
    return f"append={option.append}" if option.append is not None else option.append_action.name


def _flip_at(nav: Nav, field: str, k: int) -> Callable[[Route], None]:
    def apply(r: Route) -> None:
        flip_append(getattr(nav(r), field)[k])

    return apply


def _flip_append(snap: Snapshot, r: Route) -> Iterator[Edit]:
    for prefix, nav, owner in _header_owners(r):
        for field in ("request_headers_to_add", "response_headers_to_add"):
            for k, option in enumerate(getattr(owner, field)):
                flipped = copy.deepcopy(option)
                flip_append(flipped)
                yield Edit(
                    f"{prefix}.{field}[{k}].append_action",
                    f"{_item_name(option)!r}: {_append_name(option)} -> {_append_name(flipped)}",
                    _flip_at(nav, field, k),
                )


# --- redirects and rewrites ----------------------------------------------------------------------

_CODE = RedirectActionRedirectResponseCode
_NEXT_CODE = {
    _CODE.MOVED_PERMANENTLY: _CODE.FOUND,
    _CODE.FOUND: _CODE.MOVED_PERMANENTLY,
    _CODE.SEE_OTHER: _CODE.FOUND,
    _CODE.TEMPORARY_REDIRECT: _CODE.PERMANENT_REDIRECT,
    _CODE.PERMANENT_REDIRECT: _CODE.TEMPORARY_REDIRECT,
}


def _redirect_code(snap: Snapshot, r: Route) -> Iterator[Edit]:
    if r.redirect is not None:
        old = r.redirect.response_code
        new = _NEXT_CODE.get(old, _CODE.FOUND)
        yield Edit(
            ".redirect.response_code",
            f"{old.name} -> {new.name}",
            set_field(redirect_action, "response_code", new),
        )


def _redirect_scheme(snap: Snapshot, r: Route) -> Iterator[Edit]:
    rd = r.redirect
    if rd is None or (rd.scheme_redirect is None and not rd.https_redirect):
        return
    old = "https" if rd.https_redirect else rd.scheme_redirect
    new = "http" if old == "https" else "https"

    def apply(x: Route) -> None:
        redirect_action(x).https_redirect = None
        redirect_action(x).scheme_redirect = new

    yield Edit(".redirect.scheme_redirect", f"scheme {old} -> {new}", apply)


def _redirect_port(snap: Snapshot, r: Route) -> Iterator[Edit]:
    if r.redirect is not None and r.redirect.port_redirect:
        old = r.redirect.port_redirect
        new = old + 1 if old < 65535 else old - 1
        yield Edit(
            ".redirect.port_redirect",
            f"port {old} -> {new}",
            set_field(redirect_action, "port_redirect", new),
        )


def _redirect_path(snap: Snapshot, r: Route) -> Iterator[Edit]:
    rd = r.redirect
    if rd is None:
        return
    if rd.path_redirect is not None:
        new = rd.path_redirect.rstrip("/") + "/mutant"
        yield Edit(
            ".redirect.path_redirect",
            f"{rd.path_redirect!r} -> {new!r}",
            set_field(redirect_action, "path_redirect", new),
        )
    if rd.regex_rewrite is not None:
        sub = rd.regex_rewrite.substitution + "-mutant"

        def apply(x: Route) -> None:
            rr = redirect_action(x).regex_rewrite
            assert rr is not None
            rr.substitution = sub

        yield Edit(".redirect.regex_rewrite.substitution", f"substitution -> {sub!r}", apply)


def altered_prefix(value: str) -> str:
    """A near miss of a prefix rewrite: the classic trailing-slash mistakes.

    ("/" cannot become "": for a route action that is the same as no rewrite at all.)
    """
    if value == "/":
        return "/mutant"
    if value == "":
        return "/"
    return value[:-1] if value.endswith("/") else value + "/"


def _prefix_rewrite(nav: Nav, where: str) -> Callable[[Snapshot, Route], Iterator[Edit]]:
    def edits(snap: Snapshot, r: Route) -> Iterator[Edit]:
        owner = getattr(r, where)
        if owner is not None and owner.prefix_rewrite:
            new = altered_prefix(owner.prefix_rewrite)
            yield Edit(
                f".{where}.prefix_rewrite",
                f"{owner.prefix_rewrite!r} -> {new!r}",
                set_field(nav, "prefix_rewrite", new),
            )

    return edits


def _redirect_host(snap: Snapshot, r: Route) -> Iterator[Edit]:
    if r.redirect is not None and r.redirect.host_redirect:
        new = "mutant." + r.redirect.host_redirect
        yield Edit(
            ".redirect.host_redirect",
            f"{r.redirect.host_redirect} -> {new}",
            set_field(redirect_action, "host_redirect", new),
        )


_ROUTE_REWRITES = (
    "prefix_rewrite",
    "regex_rewrite",
    "path_rewrite",
    "host_rewrite_literal",
    "auto_host_rewrite",
    "host_rewrite_header",
    "host_rewrite_path_regex",
)


def _drop_rewrite(snap: Snapshot, r: Route) -> Iterator[Edit]:
    owners: list[tuple[str, Nav, Any]] = [
        ("route", route_action, r.route),
        ("redirect", redirect_action, r.redirect),
    ]
    for where, nav, owner in owners:
        if owner is None:
            continue
        for field in _ROUTE_REWRITES:
            if getattr(owner, field, None) not in (None, False, ""):
                yield Edit(f".{where}.{field}", f"{where}.{field} dropped", clear_field(nav, field))


def _host_rewrite(snap: Snapshot, r: Route) -> Iterator[Edit]:
    if r.route is not None and r.route.host_rewrite_literal:
        new = "mutant." + r.route.host_rewrite_literal
        yield Edit(
            ".route.host_rewrite_literal",
            f"{r.route.host_rewrite_literal} -> {new}",
            set_field(route_action, "host_rewrite_literal", new),
        )


# --- CORS ----------------------------------------------------------------------------------------

CORS_TYPE = "type.googleapis.com/envoy.extensions.filters.http.cors.v3.CorsPolicy"


def _cors_keys(owner: Any) -> list[str]:
    tpfc = getattr(owner, "typed_per_filter_config", {}) or {}
    return sorted(k for k, v in tpfc.items() if v.type_url == CORS_TYPE)


def _at_rc(c: RouteConfiguration) -> Any:
    return c


def _at_vhost(j: int) -> Callable[[RouteConfiguration], Any]:
    return lambda c: c.virtual_hosts[j]


def _at_route(j: int, k: int) -> Callable[[RouteConfiguration], Any]:
    return lambda c: c.virtual_hosts[j].routes[k]


def _cors_owners(
    snap: Snapshot,
) -> Iterator[tuple[str, int, Callable[[RouteConfiguration], Any], Any]]:
    """(path, rc index, navigation from a copied RouteConfiguration, owner) of CORS configs."""
    for i, rc in enumerate(snap.routes):
        yield f"routes[{rc.name}]", i, _at_rc, rc
    for i, j, vh in each_vhost(snap):
        base = vhost_path(snap.routes[i], vh)
        yield base, i, _at_vhost(j), vh
        for k, r in enumerate(vh.routes):
            yield f"{base}.routes[{k}]", i, _at_route(j, k), r


def _without_cors(
    nav: Callable[[RouteConfiguration], Any], key: str
) -> Callable[[RouteConfiguration], None]:
    def apply(c: RouteConfiguration) -> None:
        del nav(c).typed_per_filter_config[key]

    return apply


def _drop_cors(snap: Snapshot) -> Iterator[Site]:
    for path, i, nav, owner in _cors_owners(snap):
        for key in _cors_keys(owner):
            yield Site(
                f"{path}.typed_per_filter_config[{key}]",
                f"CORS policy {key} dropped",
                _rc_builder(snap, i, _without_cors(nav, key)),
            )


def _replace_origin(
    nav: Callable[[RouteConfiguration], Any], key: str, k: int
) -> Callable[[RouteConfiguration], None]:
    def apply(c: RouteConfiguration) -> None:
        tpfc = nav(c).typed_per_filter_config
        policy = unpack_any(tpfc[key])
        assert isinstance(policy, CorsPolicy)
        policy.allow_origin_string_match[k : k + 1] = [StringMatcher(exact=MUTANT_ORIGIN)]
        tpfc[key] = pack_any(policy)

    return apply


def _alter_origin(snap: Snapshot) -> Iterator[Site]:
    for path, i, nav, owner in _cors_owners(snap):
        for key in _cors_keys(owner):
            policy = unpack_any(owner.typed_per_filter_config[key])
            assert isinstance(policy, CorsPolicy)
            for k in range(max(1, len(policy.allow_origin_string_match))):
                yield Site(
                    f"{path}.typed_per_filter_config[{key}].allow_origin_string_match[{k}]",
                    f"allowed origin [{k}] -> {MUTANT_ORIGIN}",
                    _rc_builder(snap, i, _replace_origin(nav, key, k)),
                )


def _rc_builder(
    snap: Snapshot, i: int, fn: Callable[[RouteConfiguration], None]
) -> Callable[[], Snapshot]:
    return lambda: _with_rc(snap, i, fn)


OPERATORS: tuple[Operator, ...] = (
    Operator(
        "drop-header-modifier",
        "One request/response header add or remove entry dropped (route or backend "
        "level). httproute-request-header-modifier / response-header-modification / "
        "backend-request-header-modification should catch it.",
        on_routes(_drop_header_modifier),
        prove_route_local,
    ),
    Operator(
        "flip-append-action",
        "A header add switched between append and overwrite (set vs add). The header "
        "modifier rules should catch it.",
        on_routes(_flip_append),
        prove_route_local,
    ),
    Operator(
        "alter-redirect-code",
        "Redirect status code changed (301<->302, 303->302, 307<->308). "
        "httproute-redirect-status-code should catch it.",
        on_routes(_redirect_code),
        prove_route_local,
    ),
    Operator(
        "alter-redirect-scheme",
        "Redirect scheme flipped (http <-> https). httproute-scheme-redirect should catch it.",
        on_routes(_redirect_scheme),
        prove_route_local,
    ),
    Operator(
        "alter-redirect-port",
        "Redirect port changed. httproute-port-redirect should catch it.",
        on_routes(_redirect_port),
        prove_route_local,
    ),
    Operator(
        "alter-redirect-path",
        "Redirect path (full path, or regex substitution) changed. httproute-path-redirect "
        "should catch it.",
        on_routes(_redirect_path),
        prove_route_local,
    ),
    Operator(
        "alter-redirect-prefix",
        "Redirect prefix replacement off by a trailing slash. httproute-path-redirect "
        "should catch it.",
        on_routes(_prefix_rewrite(redirect_action, "redirect")),
        prove_route_local,
    ),
    Operator(
        "alter-redirect-host",
        "Redirect hostname changed. httproute-request-redirect should catch it.",
        on_routes(_redirect_host),
        prove_route_local,
    ),
    Operator(
        "drop-rewrite",
        "A path or host rewrite (prefix_rewrite, regex_rewrite, host_rewrite_literal, ...) "
        "dropped from a route or redirect. httproute-path-rewrite / host-rewrite / "
        "path-redirect should catch it.",
        on_routes(_drop_rewrite),
        prove_route_local,
    ),
    Operator(
        "alter-prefix-rewrite",
        "A route's prefix_rewrite off by a trailing slash ('/' <-> '', '/x' <-> '/x/'). "
        "httproute-path-rewrite should catch it.",
        on_routes(_prefix_rewrite(route_action, "route")),
        prove_route_local,
    ),
    Operator(
        "alter-host-rewrite",
        "A route's host_rewrite_literal changed. httproute-host-rewrite should catch it.",
        on_routes(_host_rewrite),
        prove_route_local,
    ),
    Operator(
        "drop-cors",
        "A CORS per-filter policy dropped (route, virtual host or configuration level). "
        "httproute-cors should catch it.",
        _drop_cors,
        prove_route_local,
    ),
    Operator(
        "alter-cors-origin",
        f"An allowed CORS origin replaced by {MUTANT_ORIGIN}. httproute-cors should catch it.",
        _alter_origin,
        prove_route_local,
    ),
)
