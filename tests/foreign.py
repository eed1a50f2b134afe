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
import shutil
from pathlib import Path
from typing import Any

import yaml

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
        # A slice names its ports after the Service's (an unnamed port: the only one).
        target = next(
            (n for pn, n in sl.ports if str(n) == spec.target_port or pn == spec.name),
            None,
        )
        out += [(a, target) for a in sl.addresses if target is not None]
    return sorted(out)


def _pod_port_name(number: int) -> str:
    return f"port-{number}"  # an IANA_SVC_NAME: at most 15 characters, with a letter


def _name_target_ports(docs: list[Json]) -> None:
    """Services' numeric targetPorts named after the container port; a single-port
    Service's port left unnamed, and its EndpointSlices' port with it (slices carry
    the Service port's name); containers' ports named, as a workload must for that."""
    unnamed: dict[tuple[str, str], str] = {}  # (namespace, Service) -> old port name
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("apiVersion") != "v1":
            continue
        if doc.get("kind") != "Service":
            continue
        meta, ports = doc.get("metadata", {}), doc.get("spec", {}).get("ports", [])
        for p in ports:
            target = p.get("targetPort", p.get("port"))
            if isinstance(target, int):
                p["targetPort"] = _pod_port_name(target)
        if len(ports) == 1:
            key = (meta.get("namespace", "default"), meta.get("name", ""))
            unnamed[key] = str(ports[0].pop("name", "") or "")
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        meta = doc.get("metadata", {})
        if doc.get("kind") == "EndpointSlice":
            svc = meta.get("labels", {}).get("kubernetes.io/service-name", "")
            old = unnamed.get((meta.get("namespace", "default"), svc))
            for p in doc.get("ports") or [] if old is not None else []:
                if str(p.get("name", "") or "") == old:
                    p["name"] = ""
        template = doc.get("spec", {}).get("template", {}).get("spec", {})
        if doc.get("kind") in ("Deployment", "StatefulSet", "DaemonSet"):
            for container in template.get("containers", []):
                for p in container.get("ports", []):
                    p.setdefault("name", _pod_port_name(p["containerPort"]))


def with_named_target_ports(folders: list[Path], out: Path) -> list[Path]:
    """Copies of ``folders`` (``fixtures/base`` and a scenario) under ``out``, every
    Service reaching its pods through a named targetPort (see ``_name_target_ports``):
    the same Services, in the form many charts write them."""
    copies = []
    for folder in folders:
        copy_to = out / folder.name
        shutil.copytree(folder, copy_to)
        # Its lines are those of the files as written, which are rewritten here.
        (copy_to / "expected-findings.yaml").unlink(missing_ok=True)
        for path in sorted(copy_to.glob("*.yaml")):
            if folder.name != "base" and path.name != "resources.yaml":
                continue  # cases, expected status, mesh registry: not resources
            docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
            _name_target_ports(docs)
            path.write_text(yaml.safe_dump_all(docs, sort_keys=False), encoding="utf-8")
        copies.append(copy_to)
    return copies


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
        # Beside the mesh clusters' own assignments, which stay.
        _section(doc, "Endpoints").setdefault("dynamic_endpoint_configs", []).extend(assignments)
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


_H2 = {
    "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
        "explicit_http_config": {"http2_protocol_options": {}},
    }
}


@dataclasses.dataclass(frozen=True)
class GrpcRule:
    """One GRPCRoute rule as Envoy Gateway serves it: a method's path prefix sent to an
    HTTP/2 EDS cluster of the backend's pods."""

    prefix: str
    pods: tuple[tuple[str, int], ...]


def serve_grpcroute(
    snap: Snapshot, route: tuple[str, str], port: int, hostname: str, rules: list[GrpcRule]
) -> Snapshot:
    """``snap`` also serving a GRPCRoute ``route`` (namespace, name) on ``hostname``, as
    Envoy Gateway writes it: a virtual host in the route configuration of ``port``, a
    route per rule, and a ``grpcroute/<ns>/<name>/rule/<i>`` cluster forcing HTTP/2."""
    doc = copy.deepcopy(to_config_dump(snap))
    clusters = _section(doc, "Clusters").setdefault("dynamic_active_clusters", [])
    assignments = _section(doc, "Endpoints").setdefault("dynamic_endpoint_configs", [])
    routes = []
    stem = f"grpcroute/{route[0]}/{route[1]}"
    for i, rule in enumerate(rules):
        name = f"{stem}/rule/{i}"
        clusters.append(
            {
                "cluster": {
                    "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
                    "name": name,
                    "type": "EDS",
                    "connect_timeout": "10s",
                    "eds_cluster_config": {"eds_config": {"ads": {}, "resource_api_version": "V3"}},
                    "typed_extension_protocol_options": _H2,
                }
            }
        )
        endpoints = [
            {"endpoint": {"address": {"socket_address": {"address": a, "port_value": p}}}}
            for a, p in rule.pods
        ]
        assignments.append(
            {
                "endpoint_config": {
                    "@type": _CLA,
                    "cluster_name": name,
                    "endpoints": [{"lb_endpoints": endpoints}],
                }
            }
        )
        label = hostname.replace(".", "_")
        routes.append(
            {
                "name": f"{name}/match/0/{label}",
                "match": {"prefix": rule.prefix},
                "route": {"cluster": name},
            }
        )
    users = {
        node["rds"]["route_config_name"]
        for entry in _section(doc, "Listeners").get("dynamic_listeners", [])
        if entry["active_state"]["listener"]["address"]["socket_address"]["port_value"] == port
        for node in walk(entry)
        if isinstance(node.get("rds"), dict)
    }
    (config,) = [
        e["route_config"]
        for e in _section(doc, "Routes")["dynamic_route_configs"]
        if e["route_config"]["name"] in users
    ]
    vhost = {"name": f"{stem}/{hostname}", "domains": [hostname], "routes": routes}
    config.setdefault("virtual_hosts", []).append(vhost)
    out, skipped = from_config_dump(doc, "grpcroute")
    assert not skipped, skipped
    return out


def _missing_clusters(doc: Json) -> None:
    """Invalid backends as routes to clusters that do not exist, answered 500 by
    ``cluster_not_found_response_code`` (as some implementations write them): a route
    whose only backend is invalid names that cluster alone (not in weighted_clusters),
    each invalid share its own missing cluster, and the 500 is set only where a
    cluster is missing."""
    existing = {
        e["cluster"]["name"] for e in _section(doc, "Clusters").get("dynamic_active_clusters", [])
    }
    missing = 0
    routes = [n for n in walk(_section(doc, "Routes")) if "match" in n]
    for node in routes:
        action = node.get("route")
        if not isinstance(action, dict):
            continue
        weighted = action.get("weighted_clusters", {}).get("clusters", [])
        for wc in weighted:
            if wc.get("name") not in existing:
                wc["name"] = f"invalid-backend-ref-{missing}"
                missing += 1
        if len(weighted) == 1 and set(weighted[0]) <= {"name", "weight"}:
            del action["weighted_clusters"]
            action["cluster"] = weighted[0]["name"]
        names = [action.get("cluster")] + [wc.get("name") for wc in weighted]
        if all(n is None or n in existing for n in names):
            action.pop("cluster_not_found_response_code", None)


def dual_stack(snap: Snapshot, *, ipv4_compat: bool = True) -> Snapshot:
    """``snap`` with every listener that has its port to itself bound to ``[::]``
    (``ipv4_compat``: dual-stack), as implementations that run one proxy per Gateway
    bind it (a port shared by two Gateways' listeners stays on their addresses)."""
    doc = copy.deepcopy(to_config_dump(snap))
    listeners = [
        e["active_state"]["listener"] for e in _section(doc, "Listeners")["dynamic_listeners"]
    ]
    ports = [li["address"]["socket_address"]["port_value"] for li in listeners]
    for li, port in zip(listeners, ports, strict=True):
        if ports.count(port) == 1:
            sock = li["address"]["socket_address"]
            sock["address"] = "::"
            sock["ipv4_compat"] = ipv4_compat
    out, skipped = from_config_dump(doc, "dual-stack")
    assert not skipped, skipped
    return dataclasses.replace(out, secrets=snap.secrets)


def reencode(snap: Snapshot, res: Resources) -> Snapshot:
    """``snap``'s behaviour in another implementation's encoding."""
    doc = copy.deepcopy(to_config_dump(snap))
    clusters = _clusters(doc, res)
    _listeners(doc, _routes(doc, clusters))
    _missing_clusters(doc)
    out, skipped = from_config_dump(doc, "foreign")
    assert not skipped, skipped
    # A config_dump shows keys as [redacted]; the other implementation serves the
    # same certificates under the same names, keys and all.
    return reorder(dataclasses.replace(out, secrets=snap.secrets))
