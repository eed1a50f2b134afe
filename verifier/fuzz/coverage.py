"""What a campaign's worlds exercised: match kinds, filters, backends, listeners and
the precedence tie-break that decides between each pair of competing matches.

A short run that never drew, say, a query-parameter tie shows it here as a
zero, rather than passing for a search of everything.
"""

from __future__ import annotations

from collections import Counter
from itertools import combinations
from typing import Any

from .mesh_base import MESH_SERVICES, PRODUCER_NS, REDIRECT_ALL
from .mesh_worlds import is_mesh_route
from .worlds import World

# Every tag a campaign can report, so a zero is visible as a zero.
_KINDS = (
    ("path", ("Exact", "PathPrefix", "RegularExpression")),
    ("header", ("Exact", "RegularExpression")),
    ("query", ("Exact", "RegularExpression")),
)
_FILTERS = (
    "RequestHeaderModifier",
    "ResponseHeaderModifier",
    "RequestRedirect",
    "URLRewrite",
    "RequestMirror",
)
MATCH_TAGS = (
    *(f"match.{part}.{kind}" for part, kinds in _KINDS for kind in kinds),
    "match.method",
    "match.none",
)
FILTER_TAGS = (
    *(f"filter.{k}" for k in _FILTERS),
    "redirect.port",
    "redirect.scheme",
    "path.ReplacePrefixMatch",
    "path.ReplaceFullPath",
)
BACKEND_TAGS = (
    "backend.missing",
    "backend.wrong-kind",
    "backend.cross-namespace",
    "backend.weighted",
    "backend.weight-0",
)
TIE_TAGS = tuple(
    f"tie.{k}" for k in ("method", "headers", "query", "creation", "name", "rule-order")
)
GATEWAY_TAGS = (
    "gateways.two",
    "listener.no-hostname",
    "listener.wildcard",
    "parentRef.sectionName",
    "parentRef.port",
    "route.no-hostname",
)
# Mesh routes (GAMMA): producer or consumer, every Service port or one, to a mesh backend.
MESH_TAGS = (
    "mesh.route.producer",
    "mesh.route.consumer",
    "mesh.parentRef.port",
    "mesh.parentRef.every-port",
    "mesh.backend.mesh-service",
    "mesh.client.drawn",
    "mesh.client.redirect-all",
)
ALL_TAGS = MATCH_TAGS + FILTER_TAGS + BACKEND_TAGS + TIE_TAGS + GATEWAY_TAGS + MESH_TAGS


def world_coverage(world: World) -> Counter[str]:
    tags: Counter[str] = Counter()
    gws = [d for d in world.docs if d["kind"] == "Gateway"]
    if len(gws) > 1:
        tags["gateways.two"] += 1
    for doc in world.docs:
        if doc["kind"] == "Deployment":
            tags["mesh.client.drawn"] += 1
            annotations = doc["spec"]["template"]["metadata"].get("annotations", {})
            tags["mesh.client.redirect-all"] += REDIRECT_ALL in annotations
    for gw in gws:
        for lst in gw["spec"]["listeners"]:
            host = lst.get("hostname")
            tags["listener.no-hostname"] += host is None
            tags["listener.wildcard"] += bool(host and host.startswith("*"))
    # Matches compete among the edge's routes, and among the mesh's (each group apart).
    competing: dict[bool, list[tuple[dict[str, Any], dict[str, Any], int, dict[str, Any]]]] = {}
    for route in world.routes():
        spec = route["spec"]
        mesh = is_mesh_route(route)
        if mesh:
            _mesh_tags(route, tags)
        else:
            tags["route.no-hostname"] += "hostnames" not in spec
            for ref in spec["parentRefs"]:
                tags["parentRef.sectionName"] += "sectionName" in ref
                tags["parentRef.port"] += "port" in ref
        for index, rule in enumerate(spec["rules"]):
            _rule_tags(rule, tags)
            for match in rule.get("matches") or [{}]:
                competing.setdefault(mesh, []).append((route, rule, index, match))
    for group in competing.values():
        for a, b in combinations(group, 2):
            tie = _tie_break(a, b)
            if tie is not None:
                tags[f"tie.{tie}"] += 1
    return tags


def _mesh_tags(route: dict[str, Any], tags: Counter[str]) -> None:
    consumer = route["metadata"]["namespace"] != PRODUCER_NS
    tags["mesh.route.consumer" if consumer else "mesh.route.producer"] += 1
    for ref in route["spec"]["parentRefs"]:
        tags["mesh.parentRef.port" if "port" in ref else "mesh.parentRef.every-port"] += 1
    meshed = {name for _, name in MESH_SERVICES}
    for rule in route["spec"]["rules"]:
        tags["mesh.backend.mesh-service"] += sum(
            r.get("name") in meshed for r in rule.get("backendRefs", [])
        )


def _rule_tags(rule: dict[str, Any], tags: Counter[str]) -> None:
    if not rule.get("matches"):
        tags["match.none"] += 1
    for match in rule.get("matches", []):
        if "path" in match:
            tags[f"match.path.{match['path']['type']}"] += 1
        for h in match.get("headers", []):
            tags[f"match.header.{h.get('type', 'Exact')}"] += 1
        for q in match.get("queryParams", []):
            tags[f"match.query.{q.get('type', 'Exact')}"] += 1
        tags["match.method"] += "method" in match
    for f in rule.get("filters", []):
        tags[f"filter.{f['type']}"] += 1
        spec = f.get("requestRedirect") or f.get("urlRewrite") or {}
        tags["redirect.port"] += "port" in spec
        tags["redirect.scheme"] += "scheme" in spec
        if "path" in spec:
            tags[f"path.{spec['path']['type']}"] += 1
    refs = rule.get("backendRefs", [])
    tags["backend.weighted"] += len(refs) > 1
    for ref in refs:
        tags["backend.missing"] += ref.get("name") == "svc-missing"
        tags["backend.wrong-kind"] += ref.get("kind", "Service") != "Service"
        tags["backend.cross-namespace"] += "namespace" in ref
        tags["backend.weight-0"] += ref.get("weight") == 0


def _tie_break(a: Any, b: Any) -> str | None:
    """The precedence criterion that separates two matches with the same path
    match on intersecting hostnames, or None when the paths differ."""
    (ra, _rule_a, ia, ma), (rb, _rule_b, ib, mb) = a, b
    if ma.get("path") != mb.get("path"):
        return None
    if not _hosts_meet(ra["spec"].get("hostnames"), rb["spec"].get("hostnames")):
        return None
    if ("method" in ma) != ("method" in mb):
        return "method"
    if len(ma.get("headers", [])) != len(mb.get("headers", [])):
        return "headers"
    if len(ma.get("queryParams", [])) != len(mb.get("queryParams", [])):
        return "query"
    if ra is rb:
        return "rule-order" if ia != ib else None
    if ra["metadata"].get("creationTimestamp") != rb["metadata"].get("creationTimestamp"):
        return "creation"
    return "name"


def _hosts_meet(a: list[str] | None, b: list[str] | None) -> bool:
    if not a or not b:
        return True
    return any(_host_meets(x, y) for x in a for y in b)


def _host_meets(x: str, y: str) -> bool:
    if x == y:
        return True
    for wild, other in ((x, y), (y, x)):
        if wild.startswith("*.") and other.removeprefix("*.").endswith(wild[1:]):
            return True
    return False
