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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

from verifier.secrets import redact_json
from verifier.xds import read
from verifier.xds.layout import (
    CLUSTER_TYPE,
    DUMP_TYPES,
    ENDPOINT_TYPE,
    KIND_OF,
    KINDS,
    LISTENER_TYPE,
    ROUTE_TYPE,
    SECRET_TYPE,
    Json,
    Skipped,
    Walk,
    XdsLoadError,
    snake,
    strings,
    walk_path,
)
from verifier.xds.validation import (
    HCM_TYPE,
    envoy_validate_with,
    static_bootstrap,
)
from verifier.xds.validation import REDACTED as REDACTED
from verifier.xds.validation import find_envoy as find_envoy

# A snapshot holds envoy-data-plane messages, or records (``verifier.xds.records``) where
# ``check`` decoded the xDS it was given: they are read alike (``verifier.xds.read``), and
# annotated as messages. This module imports envoy-data-plane only to handle messages.
if TYPE_CHECKING:
    import betterproto2
    from envoy_data_plane.envoy.config.cluster.v3 import Cluster
    from envoy_data_plane.envoy.config.endpoint.v3 import ClusterLoadAssignment
    from envoy_data_plane.envoy.config.listener.v3 import Listener
    from envoy_data_plane.envoy.config.route.v3 import RouteConfiguration
    from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import Secret

R = TypeVar("R")
ENDPOINTS_NAME: Final = ENDPOINT_TYPE.rsplit("/", 1)[-1]
ROUTES_NAME: Final = ROUTE_TYPE.rsplit("/", 1)[-1]


def _message_class(url: str) -> type[betterproto2.Message]:
    from envoy_data_plane.envoy.config.cluster.v3 import Cluster
    from envoy_data_plane.envoy.config.endpoint.v3 import ClusterLoadAssignment
    from envoy_data_plane.envoy.config.listener.v3 import Listener
    from envoy_data_plane.envoy.config.route.v3 import RouteConfiguration
    from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import Secret

    classes: dict[str, type[betterproto2.Message]] = {
        CLUSTER_TYPE: Cluster,
        ENDPOINT_TYPE: ClusterLoadAssignment,
        LISTENER_TYPE: Listener,
        ROUTE_TYPE: RouteConfiguration,
        SECRET_TYPE: Secret,
    }
    return classes[url]


def resource_name(msg: Any) -> str:
    """The xDS name: ClusterLoadAssignments are named by ``cluster_name``."""
    if read.is_a(msg, ENDPOINTS_NAME):
        cluster_name: str = msg.cluster_name
        return cluster_name
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
    # The digest of each virtual host read from JSON, of the JSON as written
    # (id -> (the message, the digest)): check --baseline digests each virtual host,
    # and serializing 10,000 routes' messages again takes 1.3 s where digesting their
    # JSON takes a tenth of that. The message is kept beside its digest so that an
    # id cannot be reused; a copy (a mutant) has another id and is not found.
    read_as: Mapping[int, tuple[betterproto2.Message, bytes]] = field(
        default_factory=dict, compare=False, repr=False
    )
    # Every name the Envoy's own bootstrap gives outside its node and its static
    # resources, when the xDS is a config_dump that shows it: the xDS server's cluster
    # (ads_config, a config source), stats sinks, tracing, access-log services. No
    # control plane serves the bootstrap, so what it uses is used though no route is.
    bootstrap_names: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def __post_init__(self) -> None:
        for kind in (*KINDS, "secrets"):
            object.__setattr__(self, kind, _sorted(getattr(self, kind)))

    def digest_as_read(self, msg: betterproto2.Message) -> bytes | None:
        """The digest of the JSON ``msg`` was read from, if it was read (unchanged)."""
        found = self.read_as.get(id(msg))
        return found[1] if found is not None and found[0] is msg else None


def json_digest(value: Json) -> bytes:
    """A digest of parsed JSON that does not depend on key order or spacing."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def _resources(snap: Snapshot, kind: str) -> list[dict[str, Json]]:
    items: tuple[betterproto2.Message, ...] = getattr(snap, kind)
    return [read.to_json(m, with_type=True) for m in items]


# The fields Envoy marks ``sensitive`` in its TLS secrets (TlsCertificate,
# TlsSessionTicketKeys, GenericSecret), in both JSON spellings; each holds a
# DataSource or a list of them.
_SENSITIVE: Final = frozenset({"private_key", "privateKey", "password", "pkcs12", "keys", "secret"})
_REDACTED_BYTES: Final = base64.b64encode(REDACTED.encode()).decode()
# What a DataSource may show: where the key lives, never the key.
_NOT_SECRET: Final = frozenset(
    {
        "filename",
        "environment_variable",
        "watched_directory",
        "environmentVariable",
        "watchedDirectory",
    }
)
_INLINE: Final = frozenset({"inline_bytes", "inline_string", "inlineBytes", "inlineString"})
_DATA_SOURCE_KEYS: Final = _NOT_SECRET | _INLINE


def _redact_source(value: Json) -> Json:
    """A sensitive field's value: a DataSource keeps only where the key lives (an
    unknown extra field beside it is redacted too, whatever it holds); a plain
    string in its place is redacted whole."""
    if isinstance(value, list):
        return [_redact_source(v) for v in value]
    if isinstance(value, str):
        return REDACTED
    if not isinstance(value, dict):
        return value
    return {
        k: v
        if k in _NOT_SECRET
        else _REDACTED_BYTES
        if k in ("inline_bytes", "inlineBytes")
        else REDACTED
        for k, v in value.items()
    }


def redacted(doc: Json) -> Json:
    """``doc`` with every inline key of a TLS secret replaced by ``[redacted]``, as
    Envoy's own admin ``/config_dump`` prints it: xDS written for people (config
    dumps, golden files, reports) must never carry key material. File paths stay,
    since they are not secret and say where the key lives. A key anywhere else (in
    metadata, in an unknown field) is found by its content (``verifier.secrets``)."""
    return redact_json(_by_field(doc))


def _by_field(doc: Json) -> Json:
    if isinstance(doc, list):
        return [_by_field(v) for v in doc]
    if not isinstance(doc, dict):
        return doc
    return {
        k: _redact_source(v) if k in _SENSITIVE and _is_source(v) else _by_field(v)
        for k, v in doc.items()
    }


def _is_source(value: Json) -> bool:
    """A DataSource (with any unknown field beside its own), a list of them
    (``session_ticket_keys.keys``), or a string where one belongs; not a whole
    Secret (a SecretsConfigDump entry's ``secret``), which has none of their fields."""
    items = value if isinstance(value, list) else [value]
    return bool(items) and all(
        isinstance(v, str) or (isinstance(v, dict) and not _DATA_SOURCE_KEYS.isdisjoint(v))
        for v in items
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

    from verifier.xds.codec import pack_any, to_json_dict

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
    for url, kind in KIND_OF.items():
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


@dataclass
class _Loader(Walk):
    """Accumulates resources from one or more documents, first occurrence of a name wins."""

    found: dict[str, dict[str, betterproto2.Message]] = field(
        default_factory=lambda: {kind: {} for kind in (*KINDS, "secrets")}
    )
    notes: list[Skipped] = field(default_factory=list)
    # Decode into records (no envoy-data-plane; ``check`` reads them only); a resource
    # the records decoder declines (verifier.xds.records.Decline) is decoded as messages.
    records: bool = False
    read_as: dict[int, tuple[betterproto2.Message, bytes]] = field(default_factory=dict)
    bootstrap_names: set[str] = field(default_factory=set)

    def snapshot(self) -> Snapshot:
        def of(kind: str) -> Any:
            return tuple(self.found[kind].values())

        return Snapshot(
            of("clusters"),
            of("endpoints"),
            of("listeners"),
            of("routes"),
            of("secrets"),
            read_as=self.read_as,
            bootstrap_names=frozenset(self.bootstrap_names),
        )

    def document(self, doc: Json, root: str) -> None:
        if not self.records:  # the codec imports these as it meets them anyway
            from verifier.xds.codec import preload_types

            preload_types(doc, skip=DUMP_TYPES)
        super().document(doc, root)

    def bootstrap(self, doc: Mapping[str, Json], path: str) -> None:
        """The strings of its parts but the node (its identity, and the list of every
        extension built in) and the static resources (read from the dump's sections)."""
        parts = [v for k, v in doc.items() if snake(k) not in ("node", "static_resources")]
        self.bootstrap_names.update(strings(parts))

    def _decoded(self, url: str, doc: Json, path: str) -> tuple[Any, list[Skipped]]:
        if self.records:
            from verifier.xds.records import Decline, decode

            try:
                return decode(url.rsplit("/", 1)[-1], doc, path)
            except Decline:
                pass
        from verifier.xds.codec import from_json_dict

        return from_json_dict(_message_class(url), doc, path)

    def resource(self, doc: Json, path: str, expected: str | None) -> None:
        name = self.unwrapped(doc, path, expected)
        if name is None:
            return
        url = f"type.googleapis.com/{name}"
        try:
            msg, notes = self._decoded(url, doc, path)
        except XdsLoadError as exc:
            self.notes.append(Skipped(path, f"unloadable {name}: {exc.message}"))
            return
        self.notes.extend(notes)
        seen = self.found[KIND_OF[url]]
        key = resource_name(msg)
        if key in seen:
            self.notes.append(Skipped(path, f"duplicate {name} {key!r}; first one kept"))
        else:
            seen[key] = msg
            if read.is_a(msg, ROUTES_NAME):
                self._digest_virtual_hosts(msg, doc)

    def _digest_virtual_hosts(self, msg: RouteConfiguration, doc: Json) -> None:
        """Each virtual host's digest as read, when the JSON's list is the message's."""
        if not isinstance(doc, dict):
            return
        spelled = [doc[k] for k in ("virtual_hosts", "virtualHosts") if k in doc]
        if len(spelled) != 1 or not isinstance(spelled[0], list):
            return
        if len(spelled[0]) != len(msg.virtual_hosts):
            return
        for vh, written in zip(msg.virtual_hosts, spelled[0], strict=True):
            self.read_as[id(vh)] = (vh, json_digest(written))


def from_config_dump(
    doc: Json, source_name: str = "<input>", *, records: bool = False
) -> tuple[Snapshot, list[Skipped]]:
    """Load a config_dump (snake or camel case), DiscoveryResponse(s), or resource list.

    Only active resources of the four types are taken; everything else is noted as skipped.
    ``records`` as for ``load_path``.
    """
    loader = _Loader(records=records)
    loader.document(doc, f"{source_name}:$")
    return loader.snapshot(), loader.notes


def load_path(
    path: str | os.PathLike[str], *, records: bool = False
) -> tuple[Snapshot, list[Skipped]]:
    """Load a config_dump file, or a directory of ``xds.<type>[.golden].json`` files;
    with ``records``, as records where the records decoder can (``_Loader.records``)."""
    loader = _Loader(records=records)
    walk_path(loader, path)
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


# --- validation by Envoy itself --------------------------------------------------------------


def bootstrap_for_validation(
    snap: Snapshot, *, secrets_path: str = os.devnull, inline_secrets: bool = True
) -> dict[str, Json]:
    """A static bootstrap equivalent to the snapshot, since ``--mode validate`` has no
    xDS: ``verifier.xds.validation.static_bootstrap`` of its resources."""
    resources = {
        kind: [read.to_json(m) for m in getattr(snap, kind)] for kind in (*KINDS, "secrets")
    }
    return static_bootstrap(resources, secrets_path=secrets_path, inline_secrets=inline_secrets)


def binary_bootstrap(snap: Snapshot) -> bytes | None:
    """The same static bootstrap as protobuf bytes, for snapshots without EDS or TLS.

    Turning 10,000 routes into JSON takes seconds; Envoy reads a binary
    bootstrap (a ``.pb`` file) just as well. Snapshots with EDS clusters or
    transport sockets (where SDS sources must be rewritten) return None and
    take the JSON path.
    """
    if any(read.is_record(m) for kind in (*KINDS, "secrets") for m in getattr(snap, kind)):
        return None  # records have no binary form: the JSON path writes them
    from envoy_data_plane.envoy.config.bootstrap.v3 import Bootstrap, BootstrapStaticResources
    from envoy_data_plane.envoy.config.cluster.v3 import ClusterDiscoveryType
    from envoy_data_plane.envoy.config.listener.v3 import Filter
    from envoy_data_plane.envoy.extensions.filters.network.http_connection_manager.v3 import (
        HttpConnectionManager,
    )

    from verifier.xds.codec import new, pack_any, unpack_any

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


def envoy_validate(snap: Snapshot, *, timeout: float = 120.0) -> tuple[bool, str]:
    """Ask Envoy whether it accepts the snapshot; returns (ok, Envoy's full output).

    Raises ``FileNotFoundError`` when no envoy binary exists, since that is no verdict.
    """

    def write(tmp: Path, secrets: Path) -> Path:
        binary = binary_bootstrap(snap)
        if binary is not None:
            path = tmp / "bootstrap.pb"
            path.write_bytes(binary)
        else:
            config = bootstrap_for_validation(snap, secrets_path=str(secrets))
            path = tmp / "bootstrap.json"
            path.write_text(json.dumps(config), encoding="utf-8")  # C encoder: not indented
        return path

    return envoy_validate_with(write, timeout=timeout)
