"""Hypothesis strategies for valid Gateway API worlds.

Hypothesis shrinks every draw towards its first choice (the integer 0, the
first element sampled), so the first choice is always the plainest one: a
valid Service, no weight, no method, a grant present. A shrunk
counterexample then keeps only the unusual parts that make it fail.

A world is a few Gateways and HTTPRoutes over a fixed base (``BASE``: the
GatewayClass, three namespaces, four Services with ready endpoints). Names come
from a small vocabulary on purpose: precedence ties, shared hosts and shared
paths are what translation bugs hide behind, and uniform noise almost never
produces them; short fixed names also keep shrunk counterexamples readable.
Every drawn world passes the tool's own validation (``validate_world`` is what
the tests assert); draws the API server would refuse are not drawn rather than
filtered, so shrinking stays fast.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml
from hypothesis import strategies as st

from .mesh_base import mesh_base_docs

GROUP = "gateway.networking.k8s.io"
CLASS = "aether"
CONTROLLER = "gateway.aether.io/edge"

# namespace -> labels; ns-b is selected by role=apps.
NAMESPACES: dict[str, dict[str, str]] = {
    "ns-a": {"role": "infra"},
    "ns-b": {"role": "apps"},
    "ns-c": {},
}
# (namespace, Service): each with one ready endpoint on 8080 -> 3000.
SERVICES: tuple[tuple[str, str], ...] = (
    ("ns-a", "svc-1"),
    ("ns-a", "svc-2"),
    ("ns-a", "svc-3"),
    ("ns-b", "svc-4"),
)
GATEWAY_NS = "ns-a"
GATEWAYS = ("gw-0", "gw-1")
PORTS = (80, 8080)
LISTENER_HOSTS: tuple[str | None, ...] = (None, "a.test", "*.a.test", "*.test")
ROUTE_HOSTS = ("a.test", "b.a.test", "*.a.test", "c.test", "*.test")
PATHS = ("/", "/p", "/p/", "/p/q", "/pq")
# RE2-safe, and each boundary-shaped: a prefix of another path, a class, an anchor.
PATH_REGEXES = ("/p/[a-z]+", "/p.*", "/[0-9]+")
HEADER_NAMES = ("x-a", "X-B")
HEADER_VALUES = ("1", "v", "V")
HEADER_REGEXES = ("v.*", "[0-9]+")
QUERY_NAMES = ("q", "k")
QUERY_VALUES = ("1", "a", "A")
METHODS = ("GET", "POST")
OLDEST = "2026-01-01T00:00:00Z"


# ---------------------------------------------------------------- strategy objects
# A world is about a hundred draws. Building each draw's strategy afresh
# (``st.sampled_from(PATHS)`` inside a composite) cost more than the draw: Hypothesis
# looks every new strategy up in its own cache and validates it, 116 us a call,
# and drawing a world took 17.5 ms. The same strategy objects are reused instead,
# kept by their (hashable) arguments; the draws, and so shrinking, are unchanged.

_STRATEGIES: dict[Any, st.SearchStrategy[Any]] = {}


def _reused(factory: Callable[..., st.SearchStrategy[Any]], *args: Any, **kwargs: Any) -> Any:
    key = (factory, args, tuple(sorted(kwargs.items())))
    try:
        found = _STRATEGIES.get(key)
    except TypeError:  # an unhashable argument (a pool of drawn matches): not kept
        return factory(*args, **kwargs)
    if found is None:
        found = _STRATEGIES[key] = factory(*args, **kwargs)
    return found


def _sampled(values: Any) -> Any:
    """``st.sampled_from``, one object per tuple of values."""
    return _reused(st.sampled_from, tuple(values))


def _integers(low: int, high: int) -> Any:
    return _reused(st.integers, low, high)


def _lists(elements: Any, **kwargs: Any) -> Any:
    return _reused(st.lists, elements, **kwargs)


def _tuples(*elements: Any) -> Any:
    return _reused(st.tuples, *elements)


_BOOLEANS = st.booleans()


def created(index: int) -> str:
    """Route ``r{index}``'s first-choice creation time: later routes are older, so by
    default age and name order disagree, and a tie between two routes' matches is
    decided by age (the spec) where a translator that ranked names first would not."""
    return f"2026-01-{10 - index:02d}T00:00:00Z"


@dataclass(frozen=True)
class World:
    """The drawn objects (Gateways, HTTPRoutes, ReferenceGrants), without ``BASE``."""

    docs: tuple[dict[str, Any], ...]

    def yaml(self) -> str:
        text: str | None = self.__dict__.get("_yaml")
        if text is None:
            text = dump(list(self.docs))
            object.__setattr__(self, "_yaml", text)  # worlds are never changed after drawing
        return text

    def routes(self) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == "HTTPRoute"]


_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's: 5x faster, same text


def dump(docs: list[dict[str, Any]]) -> str:
    return yaml.dump_all(docs, Dumper=_DUMPER, sort_keys=False, default_flow_style=None, width=100)


RENAME_PREFIX = "z"


def base_docs() -> list[dict[str, Any]]:
    """The objects every world stands on, written as ``base/`` of a found fixture.

    Every namespace and Service is there twice, as named and with
    ``RENAME_PREFIX``: a renamed world (the metamorphic property) stands on the
    same base, so a counterexample in either naming is a fixture of one suite."""
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "GatewayClass",
            "metadata": {"name": CLASS},
            "spec": {"controllerName": CONTROLLER},
        }
    ]
    twins = [(p + ns, labels) for p in ("", RENAME_PREFIX) for ns, labels in NAMESPACES.items()]
    for ns, labels in twins:
        meta: dict[str, Any] = {"name": ns}
        if labels:
            meta["labels"] = dict(labels)
        docs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
    services = [(p + ns, p + name) for p in ("", RENAME_PREFIX) for ns, name in SERVICES]
    for i, (ns, name) in enumerate(services, start=1):
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name, "namespace": ns},
                "spec": {
                    "clusterIP": f"10.96.20.{i}",
                    "selector": {"app": name},
                    "ports": [{"protocol": "TCP", "port": 8080, "targetPort": 3000}],
                },
            }
        )
        docs.append(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": f"{name}-1",
                    "namespace": ns,
                    "labels": {"kubernetes.io/service-name": name},
                },
                "addressType": "IPv4",
                "ports": [{"name": "", "protocol": "TCP", "port": 3000}],
                "endpoints": [
                    {
                        "addresses": [f"10.244.20.{i}"],
                        "conditions": {"ready": True},
                        "targetRef": {"kind": "Pod", "namespace": ns, "name": f"{name}-pod"},
                    }
                ],
            }
        )
    return docs + mesh_base_docs()


BASE_YAML = dump(base_docs())


def _small(most: int) -> st.SearchStrategy[int]:
    """1 to ``most``, small ones likelier: most translation bugs need one or two
    routes, rules or Gateways to show, and a small world is many more per second
    (the witness count grows with the product of listeners, hosts and matches)."""
    found: st.SearchStrategy[int] = _sampled(
        tuple(n for n in range(1, most + 1) for _ in range(most + 1 - n))
    )
    return found


# ---------------------------------------------------------------- matches


@st.composite
def path_matches(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(_sampled(("PathPrefix", "Exact", "RegularExpression")))
    values = PATH_REGEXES if kind == "RegularExpression" else PATHS
    return {"type": kind, "value": draw(_sampled(values))}


@st.composite
def header_matches(draw: st.DrawFn) -> list[dict[str, Any]]:
    names = draw(_lists(_sampled(HEADER_NAMES), max_size=2, unique_by=str.lower))
    out = []
    for name in names:
        if draw(_integers(0, 3)) == 3:
            out.append(
                {
                    "type": "RegularExpression",
                    "name": name,
                    "value": draw(_sampled(HEADER_REGEXES)),
                }
            )
        else:
            out.append({"name": name, "value": draw(_sampled(HEADER_VALUES))})
    return out


@st.composite
def query_matches(draw: st.DrawFn) -> list[dict[str, Any]]:
    names = draw(_lists(_sampled(QUERY_NAMES), max_size=2, unique=True))
    out = []
    for name in names:
        if draw(_integers(0, 3)) == 3:
            out.append({"type": "RegularExpression", "name": name, "value": "[0-9]+"})
        else:
            out.append({"name": name, "value": draw(_sampled(QUERY_VALUES))})
    return out


@st.composite
def route_matches(draw: st.DrawFn) -> dict[str, Any]:
    match: dict[str, Any] = {}
    if draw(_integers(0, 4)):
        match["path"] = draw(_reused(path_matches))
    headers = draw(_reused(header_matches))
    if headers:
        match["headers"] = headers
    query = draw(_reused(query_matches))
    if query:
        match["queryParams"] = query
    if draw(_integers(0, 3)) == 3:
        match["method"] = draw(_sampled(METHODS))
    return match


# ---------------------------------------------------------------- filters


def _header_modifier(draw: st.DrawFn) -> dict[str, Any]:
    op = draw(_sampled(("set", "add", "remove")))
    if op == "remove":
        return {"remove": [draw(_sampled(("x-a", "x-gone")))]}
    return {op: [{"name": draw(_sampled(("x-set", "X-A"))), "value": "f"}]}


@st.composite
def filters(draw: st.DrawFn, prefix_only: bool) -> tuple[list[dict[str, Any]], bool]:
    """Filters of one rule, and whether they answer without a backend (a redirect).

    A path modifier with ReplacePrefixMatch is valid only for a rule of exactly one
    match, a PathPrefix (``prefix_only``); redirect and URLRewrite are never combined."""
    out: list[dict[str, Any]] = []
    kinds = draw(
        _lists(
            _sampled(
                [
                    "RequestHeaderModifier",
                    "ResponseHeaderModifier",
                    "RequestRedirect",
                    "URLRewrite",
                    "RequestMirror",
                ]
            ),
            max_size=2,
            unique=True,
        )
    )
    if "RequestRedirect" in kinds and "URLRewrite" in kinds:
        kinds.remove("URLRewrite")
    redirect = False
    for kind in kinds:
        if kind == "RequestHeaderModifier":
            out.append({"type": kind, "requestHeaderModifier": _header_modifier(draw)})
        elif kind == "ResponseHeaderModifier":
            out.append({"type": kind, "responseHeaderModifier": _header_modifier(draw)})
        elif kind == "RequestRedirect":
            redirect = True
            spec: dict[str, Any] = {}
            if draw(_BOOLEANS):
                spec["scheme"] = "https"
            if draw(_BOOLEANS):
                spec["hostname"] = "r.test"
            port = draw(_sampled((None, 8443, 80)))
            if port is not None:
                spec["port"] = port
            spec["statusCode"] = draw(_sampled((301, 302)))
            path = _path_modifier(draw, prefix_only)
            if path is not None:
                spec["path"] = path
            out.append({"type": kind, "requestRedirect": spec})
        elif kind == "URLRewrite":
            rewrite: dict[str, Any] = {}
            if draw(_BOOLEANS):
                rewrite["hostname"] = "rw.test"
            path = _path_modifier(draw, prefix_only)
            if path is not None:
                rewrite["path"] = path
            if not rewrite:
                rewrite["hostname"] = "rw.test"
            out.append({"type": kind, "urlRewrite": rewrite})
        else:
            ns, name = draw(_sampled(SERVICES))
            ref = {"name": name, "namespace": ns, "port": 8080}
            out.append({"type": kind, "requestMirror": {"backendRef": ref}})
    return out, redirect


def _path_modifier(draw: st.DrawFn, prefix_only: bool) -> dict[str, Any] | None:
    kinds = ["none", "ReplaceFullPath"] + (["ReplacePrefixMatch"] if prefix_only else [])
    kind = draw(_sampled(kinds))
    if kind == "ReplaceFullPath":
        return {"type": kind, "replaceFullPath": "/full"}
    if kind == "ReplacePrefixMatch":
        return {"type": kind, "replacePrefixMatch": draw(_sampled(("/", "/np", "/np/")))}
    return None


# ---------------------------------------------------------------- backends


@st.composite
def backend_refs(
    draw: st.DrawFn, route_ns: str, services: tuple[tuple[str, str], ...] = SERVICES
) -> list[dict[str, Any]]:
    """One or two backendRefs to ``services`` (a mesh route's draw from the mesh's
    Services too), now and then to a Service that does not exist or another kind."""
    refs = []
    for _ in range(draw(_integers(1, 2))):
        kind = draw(_integers(0, 9))
        ref: dict[str, Any]
        if kind == 8:  # a Service that does not exist
            ref = {"name": "svc-missing", "port": 8080}
        elif kind == 9:  # not a Service
            ref = {"group": "example.com", "kind": "Bucket", "name": "svc-1"}
        else:
            ns, name = draw(_sampled(services))
            ref = {"name": name, "port": 8080}
            if ns != route_ns:
                ref["namespace"] = ns
        if draw(_integers(0, 2)) == 2:
            ref["weight"] = draw(_sampled((0, 1, 3)))
        refs.append(ref)
    return refs


# ---------------------------------------------------------------- routes and Gateways


@st.composite
def rule_matches(draw: st.DrawFn, pool: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A rule's matches. Half are a match drawn earlier in the world (from
    ``pool``), most with one condition more: precedence bugs (method against
    headers, creation time against name, rule order) need two matches that
    accept the same request, which independent draws almost never give."""
    out: list[dict[str, Any]] = []
    for _ in range(draw(_integers(0, 2))):
        reuse: bool = draw(_BOOLEANS)
        if pool and reuse:
            extra = draw(_sampled(("method", "header", "query", "none")))
            match = rival(draw(_sampled(pool)), extra)
        else:
            match = draw(_reused(route_matches))
        pool.append(match)
        out.append(match)
    return out


def rival(match: dict[str, Any], extra: str) -> dict[str, Any]:
    """``match`` with one condition more (``extra``: method, header or query) and no
    method otherwise: any two rivals of one match accept a common request, which
    only the spec's precedence decides (method before headers before query)."""
    out = dict(match)
    if extra == "none":
        return out
    out.pop("method", None)
    if extra == "method":
        out["method"] = "GET"
    elif extra == "header" and len(out.get("headers", [])) < 2:
        names = {h["name"].lower() for h in out.get("headers", [])}
        name = next(n for n in HEADER_NAMES if n.lower() not in names)
        out["headers"] = [*out.get("headers", []), {"name": name, "value": "1"}]
    elif extra == "query" and len(out.get("queryParams", [])) < 2:
        names = {q["name"] for q in out.get("queryParams", [])}
        name = next(n for n in QUERY_NAMES if n not in names)
        out["queryParams"] = [*out.get("queryParams", []), {"name": name, "value": "1"}]
    return out


@st.composite
def prefix_rewrite_rule(
    draw: st.DrawFn, route_ns: str, services: tuple[tuple[str, str], ...] = SERVICES
) -> dict[str, Any]:
    """A PathPrefix match with ReplacePrefixMatch (URLRewrite or redirect): valid only
    as a rule of exactly this one match, so independent draws rarely make one, and
    it is where prefix replacement goes wrong (a "/" too many or too few)."""
    match = {"path": {"type": "PathPrefix", "value": draw(_sampled(PATHS))}}
    replace = {
        "type": "ReplacePrefixMatch",
        "replacePrefixMatch": draw(_sampled(("/", "/np", "/np/"))),
    }
    if draw(_BOOLEANS):
        spec = {"path": replace, "statusCode": 302}
        return {
            "matches": [match],
            "filters": [{"type": "RequestRedirect", "requestRedirect": spec}],
        }
    return {
        "matches": [match],
        "filters": [{"type": "URLRewrite", "urlRewrite": {"path": replace}}],
        "backendRefs": draw(_reused(backend_refs, route_ns, services)),
    }


def route_rules(
    draw: st.DrawFn,
    ns: str,
    pool: list[dict[str, Any]],
    services: tuple[tuple[str, str], ...] = SERVICES,
) -> list[dict[str, Any]]:
    """One to three rules of a route in ``ns`` (an edge route's or a mesh route's),
    backends drawn from ``services``, and now and then a rule contesting an earlier
    match of the world (``pool``)."""
    rules = []
    for _ in range(draw(_small(3))):
        if draw(_integers(0, 3)) == 3:
            rules.append(draw(_reused(prefix_rewrite_rule, ns, services)))
            continue
        matches = draw(rule_matches(pool))
        prefix_only = len(matches) == 1 and matches[0].get("path", {}).get("type") == "PathPrefix"
        fs, redirect = draw(_reused(filters, prefix_only))
        rule: dict[str, Any] = {}
        if matches:
            rule["matches"] = matches
        if fs:
            rule["filters"] = fs
        if not redirect:
            rule["backendRefs"] = draw(_reused(backend_refs, ns, services))
        rules.append(rule)
    if pool and draw(_integers(0, 1)) == 1:
        # A rule whose match contests an earlier one (see ``rival``), to another backend.
        extra = draw(_sampled(("none", "method", "header", "query")))
        match = rival(draw(_sampled(pool)), extra)
        pool.append(match)
        refs = draw(_reused(backend_refs, ns, services))
        rules.append({"matches": [match], "backendRefs": refs})
    return rules


@st.composite
def routes(
    draw: st.DrawFn,
    index: int,
    listeners: dict[str, list[dict[str, Any]]],
    pool: list[dict[str, Any]] | None = None,
) -> Any:
    pool = [] if pool is None else pool
    ns = draw(_sampled(sorted(NAMESPACES)))
    parents = draw(_lists(_sampled(sorted(listeners)), min_size=1, max_size=2, unique=True))
    refs = []
    for gw in parents:
        ref: dict[str, Any] = {"name": gw, "namespace": GATEWAY_NS}
        how = draw(_integers(0, 4))
        if how == 3:
            ref["sectionName"] = draw(_sampled([lst["name"] for lst in listeners[gw]]))
        elif how == 4:
            ref["port"] = draw(_sampled(sorted({lst["port"] for lst in listeners[gw]})))
        refs.append(ref)
    rules = route_rules(draw, ns, pool)
    route: dict[str, Any] = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "HTTPRoute",
        "metadata": {
            "name": f"r{index}",
            "namespace": ns,
            "creationTimestamp": draw(_sampled([created(index), OLDEST])),
        },
        "spec": {"parentRefs": refs, "rules": rules},
    }
    hosts = draw(_lists(_sampled(ROUTE_HOSTS), max_size=2, unique=True))
    if hosts:
        route["spec"]["hostnames"] = hosts
    return route


@st.composite
def gateways(draw: st.DrawFn, name: str) -> dict[str, Any]:
    specs = draw(
        _lists(
            _tuples(_sampled(PORTS), _sampled(LISTENER_HOSTS)),
            min_size=1,
            max_size=3,
            unique=True,
        )
    )
    listeners = []
    for i, (port, host) in enumerate(specs):
        lst: dict[str, Any] = {"name": f"l{i}", "port": port, "protocol": "HTTP"}
        if host is not None:
            lst["hostname"] = host
        allowed = draw(_sampled(("All", "All", "Same", "Selector")))
        namespaces: dict[str, Any] = {"from": allowed}
        if allowed == "Selector":
            namespaces["selector"] = {"matchLabels": {"role": "apps"}}
        lst["allowedRoutes"] = {"namespaces": namespaces}
        listeners.append(lst)
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Gateway",
        "metadata": {"name": name, "namespace": GATEWAY_NS},
        "spec": {"gatewayClassName": CLASS, "listeners": listeners},
    }


def _refs(rule: dict[str, Any]) -> list[dict[str, Any]]:
    mirrors = [
        f["requestMirror"]["backendRef"] for f in rule.get("filters", []) if "requestMirror" in f
    ]
    return list(rule.get("backendRefs", [])) + mirrors


def grant(from_ns: str, to_ns: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": {"name": f"from-{from_ns}", "namespace": to_ns},
        "spec": {
            "from": [{"group": GROUP, "kind": "HTTPRoute", "namespace": from_ns}],
            "to": [{"group": "", "kind": "Service"}],
        },
    }


@st.composite
def worlds(draw: st.DrawFn, max_routes: int = 4, mesh: bool = True) -> World:
    """A valid world: one or two Gateways, one to ``max_routes`` HTTPRoutes, up to
    two mesh routes and a client (``mesh_worlds``; none without ``mesh``: for a
    translator of the edge only), and ReferenceGrants for some of the cross-namespace
    backendRefs (the others stay unpermitted on purpose)."""
    count = draw(_small(len(GATEWAYS)))
    gws = [draw(_reused(gateways, name)) for name in GATEWAYS[:count]]
    listeners = {gw["metadata"]["name"]: gw["spec"]["listeners"] for gw in gws}
    docs: list[dict[str, Any]] = list(gws)
    pool: list[dict[str, Any]] = []
    route_docs = [draw(routes(i, listeners, pool)) for i in range(draw(_small(max_routes)))]
    # Mesh routes last: an edge-only world is drawn as before (the same choices).
    from .mesh_worlds import drawn_clients, mesh_route_count, mesh_routes

    mesh_pool: list[dict[str, Any]] = []
    count = mesh_route_count(draw) if mesh else 0
    route_docs += [draw(mesh_routes(i, mesh_pool)) for i in range(count)]
    docs += route_docs
    if count:
        docs += drawn_clients(draw)
    crossings = sorted(
        {
            (r["metadata"]["namespace"], ref["namespace"])
            for r in route_docs
            for rule in r["spec"]["rules"]
            for ref in _refs(rule)
            if ref.get("namespace", r["metadata"]["namespace"]) != r["metadata"]["namespace"]
        }
    )
    for from_ns, to_ns in crossings:
        if draw(_integers(0, 3)) < 3:
            docs.append(grant(from_ns, to_ns))
    return World(tuple(docs))


def renamed(world: World, prefix: str = RENAME_PREFIX) -> tuple[World, dict[str, str]]:
    """The world with every namespace, route, Gateway and Service name prefixed.

    A common prefix keeps every name's order (the spec's last tie-break is
    alphabetical), so no decision may change but the names in it."""
    names = {ns: prefix + ns for ns in NAMESPACES}
    names.update({svc: prefix + svc for _, svc in SERVICES})
    names.update({gw: prefix + gw for gw in GATEWAYS})
    names.update({r["metadata"]["name"]: prefix + r["metadata"]["name"] for r in world.routes()})
    names["svc-missing"] = prefix + "svc-missing"
    return World(tuple(_rename(d, names) for d in world.docs)), names


_NAME_KEYS = frozenset({"name", "namespace", "kubernetes.io/service-name", "app"})


def _rename(doc: Any, names: dict[str, str], key: str = "") -> Any:
    if isinstance(doc, dict):
        return {k: _rename(v, names, k) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_rename(v, names, key) for v in doc]
    if isinstance(doc, str) and key in _NAME_KEYS:
        if doc in names:
            return names[doc]
        if doc.endswith("-1") and doc[:-2] in names:  # EndpointSlice names
            return names[doc[:-2]] + "-1"
        if doc.endswith("-pod") and doc[:-4] in names:
            return names[doc[:-4]] + "-pod"
        if doc.startswith("from-") and doc[5:] in names:
            return "from-" + names[doc[5:]]
    return doc
