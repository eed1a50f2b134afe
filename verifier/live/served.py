"""What an ADS-fed Envoy in a run's own namespace is given, and the one thing added.

The checked snapshot is served unchanged over ADS, with one addition, made on
purpose and reported: an access log on every HTTP connection manager, so that
each live answer names the xDS route and cluster Envoy chose (an answer alone
cannot tell "the route the case meant" from "a broader one reaching the same
Service"). The log is a file in the run's private directory, one JSON object
per request, carrying the correlation header the harness sets on each request
(read back, bounded, by ``access_log``).
Access logs act after the response; they change no routing decision.

Envoy itself gets only a bootstrap naming the ADS server (``verifier.xds.ads``)
plus the process-wide DNS resolver: c-ares pointed at the run's DNS server,
with no fallback to the host's resolvers and no search domains, so a Service
name resolves exactly as written or not at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from envoy_data_plane.envoy.config.listener.v3 import Listener
from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import Secret

from verifier.live.bootstrap import (
    DNS_TYPES,
    cares_resolver,
    sds_secrets,
    socket_addresses,
    walk,
)
from verifier.xds import ads
from verifier.xds.codec import from_json_dict, to_json_dict
from verifier.xds.snapshot import Snapshot, bound_addresses

CORRELATION_HEADER = "x-edge-verify-id"
HCM = (
    "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
    "HttpConnectionManager"
)
TCP_PROXY = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
FILE_LOG = "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog"
LOG_FORMAT = {
    "id": f"%REQ({CORRELATION_HEADER.upper()})%",
    "route": "%ROUTE_NAME%",
    "cluster": "%UPSTREAM_CLUSTER%",
    "code": "%RESPONSE_CODE%",
    "flags": "%RESPONSE_FLAGS%",
}
# Envoy writes access logs from a buffer; a short flush keeps attribution prompt.
FLUSH_ARGS = ("--file-flush-interval-msec", "50")


def with_access_log(
    snap: Snapshot,
    path: Path,
    *,
    fields: Mapping[str, str] = LOG_FORMAT,
    filters: Iterable[str] = (HCM,),
) -> tuple[Snapshot, list[str]]:
    """``snap`` with the harness's access log on every HTTP connection manager (or
    every filter of the ``filters`` types: a sidecar's ``tcp_proxy`` too), and one
    line per listener saying so (for the report)."""
    entry = {
        "name": "envoy.access_loggers.file",
        "typed_config": {
            "@type": FILE_LOG,
            "path": str(path),
            "log_format": {"json_format": dict(fields)},
        },
    }
    types = frozenset(filters)
    listeners, additions = [], []
    for li in snap.listeners:
        doc = to_json_dict(li)
        count = 0
        for node in walk(doc):
            typed = node.get("typed_config")
            if isinstance(typed, dict) and typed.get("@type") in types:
                typed["access_log"] = [*typed.get("access_log", []), entry]
                count += 1
        if count:
            moved, skipped = from_json_dict(Listener, doc)
            if skipped:
                raise ValueError(f"listener {li.name}: re-encoding lost {skipped}")
            listeners.append(moved)
            what = "HTTP connection manager(s)" if types == {HCM} else "filter(s)"
            logged = (
                "route, cluster, response code and flags, x-edge-verify-id"
                if fields is LOG_FORMAT
                else ", ".join(fields)
            )
            additions.append(f"listener {li.name}: access log added to {count} {what} ({logged})")
        else:
            listeners.append(li)
    changed = Snapshot(snap.clusters, snap.endpoints, tuple(listeners), snap.routes, snap.secrets)
    return changed, additions


def ads_bootstrap(server: tuple[str, int], dns: tuple[str, int]) -> dict[str, Any]:
    """All Envoy is given: the ADS server, the DNS resolver, an admin port of its own."""
    boot = to_json_dict(ads.bootstrap(*server, node="edge-verifier-live"))
    boot["typed_dns_resolver_config"] = cares_resolver(dns)
    boot["admin"] = {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}}
    return boot


def mesh_secrets(
    snap: Snapshot, cert_pem: str, key_pem: str, ca_pem: str, *, listeners: bool = False
) -> list[Secret]:
    """The secrets mesh clusters name (the proxy's identity, the trust bundle), as the
    mesh agent would serve them: extra Secret resources on the same ADS stream; with
    ``listeners``, those a sidecar's inbound listener names too."""
    out = []
    for doc in sds_secrets(snap, cert_pem, key_pem, ca_pem, listeners=listeners):
        body = {k: v for k, v in doc.items() if k != "@type"}
        secret, skipped = from_json_dict(Secret, body)
        if skipped:
            raise ValueError(f"secret {doc.get('name')}: re-encoding lost {skipped}")
        out.append(secret)
    return out


def dialled_addresses(snap: Snapshot) -> list[str]:
    """Every IP the clusters dial directly (EDS assignments, STATIC endpoints)."""
    assignments = {e.cluster_name: to_json_dict(e) for e in snap.endpoints}
    found: list[str] = []
    for cluster in snap.clusters:
        doc = to_json_dict(cluster)
        kind = str(doc.get("type", "STATIC"))
        if kind in DNS_TYPES:
            continue
        if kind == "EDS":
            name = doc.get("eds_cluster_config", {}).get("service_name") or cluster.name
            assignment: Mapping[str, Any] = assignments.get(name, {})
        else:
            assignment = doc.get("load_assignment", {})
        found += [str(sa.get("address", "")) for sa in socket_addresses(assignment)]
    return found


def namespace_addresses(snap: Snapshot, destinations: Iterable[str]) -> list[str]:
    """What the namespace's loopback must carry: every address the listeners bind,
    every address the clusters dial, and every destination requests are sent to."""
    bound = [addr for addr, _ in sorted(bound_addresses(snap))]
    return [*bound, *dialled_addresses(snap), *destinations]
