"""Deliberately broken translators, for measuring what ``edge-verify fuzz`` finds.

Each bug is the reference translator with one plausible mistake: a change to
how it ranks or intersects (a patch of the translator's own function), or to
the xDS it writes (an edit of the config_dump). They run through ``fuzz
--translator CMD`` exactly as any external translator does: a process per
world, given the world's paths, printing a config_dump.

A Python translator pays about a second of imports per process; so that a
campaign measures the fuzzer and not Python's start-up, the command is a thin
client (``python -S``, the standard library only) of a server that has the
imports done and forks a child per world::

    python tests/broken_translators.py --serve SOCKET [WARM-UP DIR]  # once
    python -S tests/broken_translators.py --socket SOCKET BUG PATH...   # per world
    python -S tests/broken_translators.py --socket SOCKET BUG --proxy NS/WORKLOAD PATH...

``python tests/broken_translators.py BUG PATH...`` runs one in-process, no server.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Json = Any
Edit = Callable[[Json], None]
Patch = Callable[[], Any]  # a context manager factory: the translator patched inside it


def _routes(dump: Json) -> Iterator[Json]:
    for section in dump["configs"]:
        for rc in section.get("dynamic_route_configs", []):
            for vh in rc["route_config"].get("virtual_hosts", []):
                yield from vh.get("routes", [])


def _edit_routes(fn: Callable[[Json], None]) -> Callable[[Json], None]:
    def edit(dump: Json) -> None:
        for route in _routes(dump):
            fn(route)

    return edit


def _prefix_without_boundary(route: Json) -> None:
    match = route["match"]
    if "path_separated_prefix" in match:
        match["prefix"] = match.pop("path_separated_prefix")


def _header_matchers(route: Json) -> Iterator[Json]:
    for h in route["match"].get("headers", []):
        if not h["name"].startswith(":"):
            yield h


def _header_values_ignore_case(route: Json) -> None:
    for h in _header_matchers(route):
        if "exact" in h.get("string_match", {}):
            h["string_match"]["ignore_case"] = True


def _header_exact_as_prefix(route: Json) -> None:
    for h in _header_matchers(route):
        sm = h.get("string_match", {})
        if "exact" in sm:
            sm["prefix"] = sm.pop("exact")


def _query_dropped(route: Json) -> None:
    route["match"].pop("query_parameters", None)


def _redirect_port_dropped(route: Json) -> None:
    route.get("redirect", {}).pop("port_redirect", None)


def _redirect_code_swapped(route: Json) -> None:
    redirect = route.get("redirect")
    if redirect is not None:
        swap = {"FOUND": "MOVED_PERMANENTLY", "MOVED_PERMANENTLY": "FOUND"}
        code = redirect.get("response_code", "MOVED_PERMANENTLY")
        redirect["response_code"] = swap.get(code, code)


def _weights_swapped(route: Json) -> None:
    clusters = route.get("route", {}).get("weighted_clusters", {}).get("clusters", [])
    weights = [c.get("weight", 0) for c in clusters]
    for c, w in zip(clusters, reversed(weights), strict=True):
        c["weight"] = w


def _rewrite_plain_prefix(route: Json) -> None:
    """ReplacePrefixMatch as Envoy's plain prefix_rewrite: wrong at a "/" boundary."""
    action = route.get("route", {})
    rewrite = action.get("regex_rewrite")
    if rewrite and rewrite["pattern"]["regex"] != "^/.*$":
        action.pop("regex_rewrite")
        action["prefix_rewrite"] = rewrite["substitution"]


def _mirror_dropped(route: Json) -> None:
    route.get("route", {}).pop("request_mirror_policies", None)


def _other_gateways_routes(dump: Json) -> None:
    """Every route configuration also serves the hosts of the other Gateways' on
    its port: a route of one Gateway answers on another's address."""
    configs = [
        rc["route_config"]
        for section in dump["configs"]
        for rc in section.get("dynamic_route_configs", [])
    ]
    for rc in configs:
        port = rc["name"].rsplit("-", 1)[-1]
        have = {d for vh in rc.get("virtual_hosts", []) for d in vh["domains"]}
        for other in configs:
            if other is rc or other["name"].rsplit("-", 1)[-1] != port:
                continue
            for vh in other.get("virtual_hosts", []):
                if not set(vh["domains"]) & have:
                    rc.setdefault("virtual_hosts", []).append(json.loads(json.dumps(vh)))
                    have |= set(vh["domains"])


def _route_key(
    rank: Callable[[tuple[Any, ...], tuple[Any, ...]], tuple[Any, ...]],
) -> Patch:
    """A patch of the translator's precedence key: ``rank(key, args)`` is the new key
    from the right one and route_key's arguments (hostnames, domain, route, ...)."""

    @contextmanager
    def patch() -> Iterator[None]:
        import verifier.translate as tr

        original = tr.route_key

        def key(*args: Any) -> Any:
            return rank(original(*args), args)

        tr.route_key = key  # type: ignore[assignment]
        try:
            yield
        finally:
            tr.route_key = original

    return patch


# Header count ranked above the method match (the spec ranks method first).
_method_below_headers = _route_key(lambda k, _: (*k[:3], k[4], k[3], *k[5:]))
# Cross-route ties broken alphabetically before by creation time.
_name_before_age = _route_key(lambda k, _: (*k[:6], k[7], k[8], k[6], *k[9:]))
# Cross-route ties broken by where the route is written, not by age and name:
# the output then depends on the order of the YAML documents.
_document_order = _route_key(
    lambda k, a: (*k[:6], a[2].meta.where().file, a[2].meta.where().line, "", *k[9:])
)


def _wildcard_too_wide(dump: Json) -> None:
    """A wildcard host one label wider than computed (``*.a.test`` written ``*.test``):
    the mistake of intersecting a ``*.a.test`` listener with a ``*.test`` route
    the wrong way round, so ``c.test`` reaches a listener that does not serve it."""
    for section in dump["configs"]:
        for rc in section.get("dynamic_route_configs", []):
            for vh in rc["route_config"].get("virtual_hosts", []):
                vh["domains"] = [
                    "*." + d.split(".", 2)[2] if d.startswith("*.") and d.count(".") >= 2 else d
                    for d in vh["domains"]
                ]


@contextmanager
def _no_patch() -> Iterator[None]:
    yield


@contextmanager
def _consumer_route_everywhere() -> Iterator[None]:
    """A consumer route applies to clients of every namespace, not only its own (and
    replaces the producer routes for them): the mesh controller forgot the namespace."""
    import verifier.gatewayapi.mesh_attach as ma

    original = ma.routes_for

    def routes_for(graph: Any, client_namespace: str, key: Any) -> Any:
        on_port = [a for a in graph.attached if a.key == key]
        return [a for a in on_port if a.consumer] or [a for a in on_port if not a.consumer]

    ma.routes_for = routes_for
    try:
        yield
    finally:
        ma.routes_for = original


@contextmanager
def _parent_port_ignored() -> Iterator[None]:
    """A Service parentRef's ``port`` is ignored: the route applies to every port."""
    import dataclasses

    import verifier.gatewayapi.mesh_attach as ma

    original = ma._attach

    def attach(res: Any, route: Any, ref: Any, graph: Any) -> None:
        original(res, route, dataclasses.replace(ref, port=None), graph)

    ma._attach = attach
    try:
        yield
    finally:
        ma._attach = original


# name -> (patch of the translator, edit of its config_dump)
BUGS: dict[str, tuple[Patch, Edit | None]] = {
    "prefix-without-segment-boundary": (_no_patch, _edit_routes(_prefix_without_boundary)),
    "header-values-ignore-case": (_no_patch, _edit_routes(_header_values_ignore_case)),
    "header-exact-as-prefix": (_no_patch, _edit_routes(_header_exact_as_prefix)),
    "method-below-headers": (_method_below_headers, None),
    "tie-break-name-before-age": (_name_before_age, None),
    "tie-break-document-order": (_document_order, None),
    "wildcard-intersection-too-wide": (_no_patch, _wildcard_too_wide),
    "query-match-dropped": (_no_patch, _edit_routes(_query_dropped)),
    "redirect-port-dropped": (_no_patch, _edit_routes(_redirect_port_dropped)),
    "redirect-code-swapped": (_no_patch, _edit_routes(_redirect_code_swapped)),
    "weights-swapped": (_no_patch, _edit_routes(_weights_swapped)),
    "rewrite-plain-prefix": (_no_patch, _edit_routes(_rewrite_plain_prefix)),
    "mirror-dropped": (_no_patch, _edit_routes(_mirror_dropped)),
    "route-on-other-gateway": (_no_patch, _other_gateways_routes),
}
# Mistakes of the mesh controller, which only a sidecar's xDS shows (``--proxy``).
MESH_BUGS: dict[str, tuple[Patch, Edit | None]] = {
    "mesh-consumer-route-everywhere": (_consumer_route_everywhere, None),
    "mesh-parent-port-ignored": (_parent_port_ignored, None),
}


def _listener_on_foreign_address(dump: Json) -> None:
    """Every listener bound to an address the host does not have: ``--mode validate``
    binds nothing and takes it; Envoy fed over ADS NACKs it (bind fails)."""
    for section in dump["configs"]:
        for dl in section.get("dynamic_listeners", []):
            sock = dl["active_state"]["listener"]["address"]["socket_address"]
            sock["address"] = FOREIGN_ADDRESS


FOREIGN_ADDRESS = "203.0.113.77"  # RFC 5737: on no interface of the plane's namespace
# Bugs only real Envoy shows (not in the seeded-bug hunt of the models' properties).
ENVOY_BUGS: dict[str, tuple[Patch, Edit | None]] = {
    "listener-on-foreign-address": (_no_patch, _listener_on_foreign_address),
}


def translate(bug: str, paths: list[str], proxy: str | None = None) -> str:
    """The config_dump the broken translator prints for ``paths`` (with ``proxy``,
    ``NS/WORKLOAD``: that workload's sidecar's, as ``translate --proxy`` writes it)."""
    from verifier.gatewayapi import mesh_attach
    from verifier.gatewayapi.attach import build_graph
    from verifier.gatewayapi.resources import load_resources
    from verifier.translate import TranslateOptions
    from verifier.translate import translate as reference
    from verifier.translate.sidecar import translate_sidecar
    from verifier.xds.snapshot import to_config_dump

    patch, edit = {**BUGS, **MESH_BUGS, **ENVOY_BUGS}[bug]
    with patch():  # build_graph and translate look the patched names up as they run
        res = load_resources(paths)
        if proxy is None:
            snap = reference(res, build_graph(res), TranslateOptions())
        else:
            wl = mesh_attach.sidecar_workload(res, proxy)
            snap = translate_sidecar(res, mesh_attach.build_mesh(res), wl, TranslateOptions())
        dump = to_config_dump(snap)
    if edit is not None:
        edit(dump)
    return json.dumps(dump)


def _recv_all(conn: socket.socket) -> bytes:
    chunks = []
    while chunk := conn.recv(1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _warm_up(root: str) -> None:
    """Translate drawn worlds of every kind here, before any fork: that builds the
    message classes' validators and compiles the patterns, which a child would
    otherwise build again on every world (0.5 to 1 s each, measured)."""
    from pathlib import Path

    from hypothesis import HealthCheck, Phase, given, seed, settings
    from hypothesis import strategies as st

    from verifier.fuzz.trial import has_mesh_routes, load_world, write_scenario
    from verifier.fuzz.worlds import worlds
    from verifier.mesh_compare import sidecar_clients

    @seed(0)
    @settings(
        max_examples=40,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def each(data: Any) -> None:
        world = data.draw(worlds())
        paths = [str(p) for p in write_scenario(Path(root) / "warm", world)]
        for bug in BUGS:
            translate(bug, paths)
        if has_mesh_routes(world):
            for source in sidecar_clients(load_world(world)):
                translate(next(iter(MESH_BUGS)), paths, source.line())

    each()


def serve(path: str, warm: list[str]) -> None:
    """Answer each connection in a forked child: imports done once, state never shared.

    ``warm``: a directory for the worlds translated before serving (``_warm_up``)."""
    import signal

    if warm:
        _warm_up(warm[0])

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        if os.fork() == 0:
            server.close()
            request = json.loads(conn.makefile("rb").readline())
            try:
                out = translate(request["bug"], request["paths"], request.get("proxy"))
                reply = {"rc": 0, "out": out}
            except Exception as exc:  # reported as a translator failure
                reply = {"rc": 1, "err": f"{type(exc).__name__}: {exc}"}
            conn.sendall(json.dumps(reply).encode())
            conn.close()
            os._exit(0)
        conn.close()


def _proxy(argv: list[str]) -> tuple[str | None, list[str]]:
    """``--proxy NS/WORKLOAD`` before the paths (the sidecar contract), and the paths."""
    if argv[:1] == ["--proxy"]:
        return argv[1], argv[2:]
    return None, argv


def client(path: str, bug: str, argv: list[str]) -> int:
    proxy, paths = _proxy(argv)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        asked = {"bug": bug, "paths": paths, "proxy": proxy}
        conn.sendall(json.dumps(asked).encode() + b"\n")
        conn.shutdown(socket.SHUT_WR)
        reply = json.loads(_recv_all(conn))
    if reply["rc"]:
        print(reply["err"], file=sys.stderr)
        return int(reply["rc"])
    sys.stdout.write(reply["out"])
    return 0


def command(socket_path: str, bug: str) -> str:
    """The ``--translator`` command line of ``bug`` served at ``socket_path``."""
    return f"{sys.executable} -S {os.path.abspath(__file__)} --socket {socket_path} {bug}"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--serve"]:
        serve(argv[1], argv[2:])
        return 0
    if argv[:1] == ["--socket"]:
        return client(argv[1], argv[2], argv[3:])
    proxy, paths = _proxy(argv[1:])
    sys.stdout.write(translate(argv[0], paths, proxy))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
