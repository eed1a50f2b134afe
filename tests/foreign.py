"""The same behaviour in another implementation's words: a re-encoding of xDS.

`check` must judge xDS it did not generate, from any Gateway API implementation,
by behaviour and not by names. This rewrites the reference translator's xDS the
way other implementations write theirs, keeping what every request gets:

- every name is new (listeners, filter chains, route configurations, virtual
  hosts, routes, clusters: Istio's ``outbound|port||host`` for Services), and the
  aether metadata on routes and clusters is gone;
- a virtual host with several domains becomes one per domain (``<domain>:<port>``);
- every path match as a regex (PathPrefix ``/foo(/.*)?``, as implementations did
  before ``path_separated_prefix``; Exact ``^/foo$``; the catch-all ``/.*``), and
  exact header (``:method`` too) and query parameter values as regexes;
- ReplacePrefixMatch as a ``regex_rewrite`` of the prefix (Envoy Gateway's way);
- ``https_redirect`` for ``scheme_redirect: https``, and 301 left to the default;
- a plain (not mesh) Service reached by EDS at its ready pods' addresses and
  targetPort instead of by DNS;
- neighbouring routes that no request matches both of in the other order.

Each rewrite is one Envoy documents as equivalent; none is the reference
translator's way. Works on the config_dump JSON, as another implementation's
output arrives.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from verifier.gatewayapi.resources import Resources
from verifier.live.bootstrap import walk
from verifier.mutate.algebra import matches_disjoint
from verifier.xds.snapshot import Snapshot, from_config_dump, to_config_dump

Json = Any
_REGEX_SPECIAL = set("\\.+*?()|[]{}^$")
_SUFFIX = ".svc.cluster.local"
_CLA = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"


def _escape(text: str) -> str:
    return "".join("\\" + c if c in _REGEX_SPECIAL else c for c in text)


def _section(doc: Json, kind: str) -> Json:
    return next(c for c in doc["configs"] if c["@type"].endswith(f".{kind}ConfigDump"))


def _dns_target(cluster: Json) -> tuple[str, int] | None:
    """(host, port) of a cluster with one DNS endpoint, else None."""
    try:
        (locality,) = cluster["load_assignment"]["endpoints"]
        (lb,) = locality["lb_endpoints"]
        sock = lb["endpoint"]["address"]["socket_address"]
    except (KeyError, ValueError):
        return None
    return str(sock["address"]), int(sock["port_value"])


def _pod_endpoints(res: Resources, host: str, port: int) -> list[tuple[str, int]]:
    """The ready pod addresses behind a Service port, on its targetPort (from the
    Service's EndpointSlices), as Istio and Envoy Gateway dial them; else none."""
    if not host.endswith(_SUFFIX):
        return []
    name, _, namespace = host.removesuffix(_SUFFIX).partition(".")
    svc = res.services.get((namespace, name))
    spec = next((p for p in svc.ports if p.port == port), None) if svc else None
    if spec is None:
        return []
    out = []
    for sl in res.endpoint_slices.values():
        if (sl.meta.namespace, sl.service_name) != (namespace, name):
            continue
        target = next(
            (n for pn, n in sl.ports if str(n) == spec.target_port or pn == spec.target_port),
            None,
        )
        out += [(a, target) for a in sl.addresses if target is not None]
    return sorted(out)


def _clusters(doc: Json, res: Resources) -> dict[str, str]:
    """Rename clusters; plain Services by EDS at their clusterIP. Old name -> new."""
    renamed: dict[str, str] = {}
    assignments = []
    for i, entry in enumerate(_section(doc, "Clusters").get("dynamic_active_clusters", [])):
        c = entry["cluster"]
        target = _dns_target(c)
        new = f"outbound|{target[1]}||{target[0]}" if target else f"cluster-{i}"
        renamed[c["name"]] = new
        c["name"] = new
        c.pop("metadata", None)
        pods = _pod_endpoints(res, *target) if target else []
        if pods and c.get("type") == "STRICT_DNS" and "transport_socket" not in c:
            del c["load_assignment"], c["type"]
            c.pop("dns_lookup_family", None)
            c["type"] = "EDS"
            c["eds_cluster_config"] = {"eds_config": {"ads": {}, "resource_api_version": "V3"}}
            endpoints = [
                {"endpoint": {"address": {"socket_address": {"address": a, "port_value": p}}}}
                for a, p in pods
            ]
            assignments.append(
                {
                    "endpoint_config": {
                        "@type": _CLA,
                        "cluster_name": new,
                        "endpoints": [{"lb_endpoints": endpoints}],
                    }
                }
            )
        elif "load_assignment" in c:
            c["load_assignment"]["cluster_name"] = new
    if assignments:
        _section(doc, "Endpoints")["dynamic_endpoint_configs"] = assignments
    return renamed


def _regex_rewrite(route: Json) -> None:
    """prefix_rewrite as the regex_rewrite of the matched prefix (as Envoy Gateway
    writes ReplacePrefixMatch): the same path, whatever the match is written as."""
    match = route.get("match", {})
    prefix = match.get("path_separated_prefix", match.get("prefix"))
    if prefix is None or not match.get("case_sensitive", True):
        return
    for key in ("route", "redirect"):
        action = route.get(key, {})
        rewrite = action.get("prefix_rewrite")
        if rewrite is not None and "\\" not in rewrite:
            del action["prefix_rewrite"]
            action["regex_rewrite"] = {
                "pattern": {"regex": "^" + _escape(prefix)},
                "substitution": rewrite,
            }


def _redirect_forms(route: Json) -> None:
    """``https_redirect`` for ``scheme_redirect: https``; 301 left to its default."""
    redirect = route.get("redirect")
    if not isinstance(redirect, dict):
        return
    if redirect.get("scheme_redirect") == "https":
        del redirect["scheme_redirect"]
        redirect["https_redirect"] = True
    if redirect.get("response_code") == "MOVED_PERMANENTLY":
        del redirect["response_code"]


def _rewrites_prefix(route: Json) -> bool:
    """prefix_rewrite replaces what a prefix matched, but the whole path after a
    regex: such routes keep their prefix match (as other implementations do)."""
    return any("prefix_rewrite" in route.get(k, {}) for k in ("route", "redirect"))


def _route_match(match: Json, *, keep_prefix: bool) -> None:
    prefix = match.get("path_separated_prefix")
    if prefix is not None and match.get("case_sensitive", True) and not keep_prefix:
        del match["path_separated_prefix"]
        match["safe_regex"] = {"regex": f"{_escape(prefix)}(/.*)?"}
    exact = match.get("path")
    if exact is not None and match.get("case_sensitive", True) and not keep_prefix:
        del match["path"]
        match["safe_regex"] = {"regex": f"^{_escape(exact)}$"}
    if match.get("prefix") == "/" and not keep_prefix:
        del match["prefix"]
        match["safe_regex"] = {"regex": "/.*"}
    for m in [*match.get("headers", []), *match.get("query_parameters", [])]:
        sm = m.get("string_match", {})
        if set(sm) == {"exact"}:
            m["string_match"] = {"safe_regex": {"regex": _escape(sm["exact"])}}


def _routes(doc: Json, clusters: dict[str, str]) -> dict[str, str]:
    """Rename route configurations (old -> new), split virtual hosts per domain,
    rename routes and drop their metadata; regex forms of prefix and header matches."""
    renamed: dict[str, str] = {}
    for entry in _section(doc, "Routes").get("dynamic_route_configs", []):
        rc = entry["route_config"]
        new = f"http.{rc['name']}"
        renamed[rc["name"]] = new
        rc["name"] = new
        vhosts = []
        for vh in rc.get("virtual_hosts", []):
            for k, route in enumerate(vh.get("routes", [])):
                route["name"] = f"route-{k}"
                route.pop("metadata", None)
                _regex_rewrite(route)
                _redirect_forms(route)
                _route_match(route.setdefault("match", {}), keep_prefix=_rewrites_prefix(route))
            for domain in vh.get("domains", []):
                one = copy.deepcopy(vh)
                one["domains"] = [domain]
                one["name"] = f"{domain}:{new}"
                vhosts.append(one)
        rc["virtual_hosts"] = vhosts
    for node in walk(doc):
        for key in ("cluster", "cluster_name"):
            if isinstance(node.get(key), str) and node[key] in clusters:
                node[key] = clusters[node[key]]
        if "clusters" in node and isinstance(node["clusters"], list):
            for wc in node["clusters"]:
                if isinstance(wc, dict) and wc.get("name") in clusters:
                    wc["name"] = clusters[wc["name"]]
    return renamed


def _listeners(doc: Json, routes: dict[str, str]) -> None:
    for entry in _section(doc, "Listeners").get("dynamic_listeners", []):
        listener = entry["active_state"]["listener"]
        sock = listener["address"]["socket_address"]
        # Named by what it binds, as Istio names listeners; no aether metadata.
        listener["name"] = entry["name"] = f"{sock.get('address', '0.0.0.0')}_{sock['port_value']}"
        listener.pop("metadata", None)
        for k, chain in enumerate(listener.get("filter_chains", [])):
            chain["name"] = f"chain-{k}"
    for node in walk(doc):
        rds = node.get("rds")
        if isinstance(rds, dict) and rds.get("route_config_name") in routes:
            rds["route_config_name"] = routes[rds["route_config_name"]]


def reorder(snap: Snapshot) -> Snapshot:
    """Swap neighbouring routes that no request can match both of (as implementations
    that sort routes their own way do): first match wins, so nothing changes."""
    configs = copy.deepcopy(list(snap.routes))
    for rc in configs:
        for vh in rc.virtual_hosts:
            routes, i = vh.routes, 0
            while i + 1 < len(routes):
                if matches_disjoint(routes[i].match, routes[i + 1].match):
                    routes[i], routes[i + 1] = routes[i + 1], routes[i]
                    i += 2
                else:
                    i += 1
    return dataclasses.replace(snap, routes=tuple(configs))


def reencode(snap: Snapshot, res: Resources) -> Snapshot:
    """``snap``'s behaviour in another implementation's encoding."""
    doc = copy.deepcopy(to_config_dump(snap))
    clusters = _clusters(doc, res)
    _listeners(doc, _routes(doc, clusters))
    out, skipped = from_config_dump(doc, "foreign")
    assert not skipped, skipped
    # A config_dump shows keys as [redacted]; the other implementation serves the
    # same certificates under the same names, keys and all.
    return reorder(dataclasses.replace(out, secrets=snap.secrets))
