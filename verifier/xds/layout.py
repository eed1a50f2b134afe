"""Where the resources sit in the xDS files ``check --xds`` reads, as plain JSON.

Apart from ``snapshot`` (which decodes what it finds into envoy-data-plane messages)
so that Envoy's validate can be started on the user's own JSON before any message
class is imported (``verifier.xds.validation``): both walk a document the same way.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from verifier.errors import InputErrors
from verifier.inputs import LIMIT_CODES, STDIN, load_json, read_stdin_once, read_text

Json = Any  # a decoded JSON value: recursive and untyped

KINDS: Final = ("clusters", "endpoints", "listeners", "routes")
CLUSTER_TYPE: Final = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
ENDPOINT_TYPE: Final = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
LISTENER_TYPE: Final = "type.googleapis.com/envoy.config.listener.v3.Listener"
ROUTE_TYPE: Final = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
SECRET_TYPE: Final = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
KIND_OF: Final = dict(
    zip(
        (CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, ROUTE_TYPE, SECRET_TYPE),
        (*KINDS, "secrets"),
        strict=True,
    )
)
RESOURCE_WRAPPER: Final = "envoy.service.discovery.v3.Resource"


@dataclasses.dataclass(frozen=True)
class Skipped:
    """Something dropped while loading, so callers can report what they did not check."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class XdsLoadError(ValueError):
    """Input whose overall shape is wrong, so nothing sensible can be salvaged from it."""

    def __init__(self, path: str, message: str, *, line: int = 0, code: str = "bad-xds") -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message
        self.line = line  # 0: unknown (the message may say "line N")
        self.code = code
        # Problems of other files read in the same go (a per-type directory), so that
        # one run reports every bad file, not the first.
        self.more: list[XdsLoadError] = []


# Where each admin dump keeps its active resources: "section.step...", ending at the Any.
SECTIONS: Final[dict[str, tuple[str, str]]] = {
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
DUMP_TYPES: Final = frozenset(SECTIONS)  # read section by section, as JSON
BOOTSTRAP_DUMP: Final = "envoy.admin.v3.BootstrapConfigDump"

# The fields of the admin dumps (envoy.admin.v3) and of a DiscoveryResponse: a key
# outside these (a typo such as ``dynamic_active_cluster``, a newer Envoy's field)
# is not read, and a warning says so rather than the run passing it over in silence.
_ENTRY: Final = frozenset({"version_info", "last_updated", "error_state", "client_status", "name"})
KNOWN_KEYS: Final[dict[str, frozenset[str]]] = {
    "ConfigDump": frozenset({"configs"}),
    "DiscoveryResponse": frozenset(
        {"version_info", "resources", "canary", "type_url", "nonce", "control_plane"}
    ),
    "envoy.admin.v3.ClustersConfigDump": frozenset(
        {"version_info", "static_clusters", "dynamic_active_clusters", "dynamic_warming_clusters"}
    ),
    "envoy.admin.v3.EndpointsConfigDump": frozenset(
        {"static_endpoint_configs", "dynamic_endpoint_configs"}
    ),
    "envoy.admin.v3.ListenersConfigDump": frozenset(
        {"version_info", "static_listeners", "dynamic_listeners"}
    ),
    "envoy.admin.v3.RoutesConfigDump": frozenset({"static_route_configs", "dynamic_route_configs"}),
    "envoy.admin.v3.SecretsConfigDump": frozenset(
        {"static_secrets", "dynamic_active_secrets", "dynamic_warming_secrets"}
    ),
    # The entries of the sections: each holds its resource under the section's step.
    "cluster": _ENTRY | {"cluster"},
    "endpoint_config": _ENTRY | {"endpoint_config"},
    "listener": _ENTRY | {"listener", "active_state", "warming_state", "draining_state"},
    "route_config": _ENTRY | {"route_config"},
    "secret": _ENTRY | {"secret"},
}


def snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def strings(doc: Json) -> Iterator[str]:
    """Every string in a JSON value, keys aside."""
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            yield node
        elif isinstance(node, Mapping):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def unknown_keys(doc: Mapping[str, Json], known: frozenset[str]) -> list[str]:
    """The keys of ``doc`` that are none of ``known`` (in snake_case or camelCase)."""
    return sorted(k for k in doc if k != "@type" and snake(k) not in known)


class Walk:
    """Finds each resource of a config_dump, DiscoveryResponse(s) or resource list and
    hands it to ``resource``; notes what it passes over. Only active resources count."""

    def __init__(self) -> None:
        self.notes: list[Skipped] = []

    def resource(self, doc: Json, path: str, expected: str | None) -> None:
        raise NotImplementedError

    def document(self, doc: Json, root: str) -> None:
        if isinstance(doc, list):
            for i, item in enumerate(doc):
                here = f"{root}[{i}]"
                if isinstance(item, Mapping) and "resources" in item:
                    self.discovery_response(item, here)
                else:
                    self.resource(item, here, None)
        elif isinstance(doc, Mapping) and "configs" in doc:
            self.unknown(doc, "ConfigDump", root)
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

    def bootstrap(self, doc: Mapping[str, Json], path: str) -> None:
        """The Envoy's own bootstrap: no control plane serves it, and its static
        resources are in the dump's static sections too; a walk that needs more of it
        (the clusters it names) reads it here."""

    def unknown(self, doc: Mapping[str, Json], known: str, path: str) -> None:
        for key in unknown_keys(doc, KNOWN_KEYS[known]):
            self.notes.append(Skipped(f"{path}.{key}", f"not a field of {known}, not read"))

    def discovery_response(self, doc: Mapping[str, Json], path: str) -> None:
        self.unknown(doc, "DiscoveryResponse", path)
        expected = get(doc, "type_url", path, str)
        for i, item in enumerate(_list(doc, "resources", path)):
            self.resource(item, f"{path}.resources[{i}]", expected or None)

    def config(self, config: Json, path: str) -> None:
        kind = type_name(config, path)
        if kind == BOOTSTRAP_DUMP:
            assert isinstance(config, Mapping)  # type_name saw to it
            self.bootstrap(get(config, "bootstrap", path, Mapping) or {}, f"{path}.bootstrap")
            return
        if kind not in SECTIONS:
            if set(config) - {"@type"}:  # an empty one (no scoped routes) holds nothing
                self.notes.append(Skipped(path, f"config of type {kind} ignored"))
            return
        assert isinstance(config, Mapping)  # type_name saw to it
        self.unknown(config, kind, path)
        for spec in SECTIONS[kind]:
            section, *steps = spec.split(".")
            for i, entry in enumerate(_list(config, section, path)):
                self.entry(entry, f"{path}.{section}[{i}]", steps)
        for warming in ("dynamic_warming_clusters", "dynamic_warming_secrets"):
            for i, _ in enumerate(_list(config, warming, path)):
                self.notes.append(Skipped(f"{path}.{warming}[{i}]", "warming, not active"))

    def entry(self, entry: Json, path: str, steps: list[str]) -> None:
        node: Json = entry
        if isinstance(entry, Mapping):
            self.unknown(entry, steps[-1], path)
        for step in steps:
            if not isinstance(node, Mapping):
                raise XdsLoadError(path, "expected a JSON object")
            if step == "active_state":
                for state in ("warming_state", "draining_state"):
                    if get(node, state, path, Mapping) is not None:
                        self.notes.append(Skipped(f"{path}.{state}", "not active, ignored"))
            value = get(node, step, path, Mapping)
            if value is None:
                self.notes.append(Skipped(path, f"no {step}"))
                return
            node, path = value, f"{path}.{step}"
        self.resource(as_served(node) if steps[-1] == "endpoint_config" else node, path, None)

    def unwrapped(self, doc: Json, path: str, expected: str | None) -> str | None:
        """The resource's type name, once a ``Resource`` wrapper was opened (then None:
        its content was handed to ``resource``) and a response's type was checked."""
        name = type_name(doc, path)
        if name == RESOURCE_WRAPPER:
            inner = get(doc, "resource", path, Mapping)
            if inner is None:
                self.notes.append(Skipped(path, "Resource wrapper without resource"))
            else:
                self.resource(inner, f"{path}.resource", expected)
            return None
        if expected and expected.rsplit("/", 1)[-1] != name:
            self.notes.append(Skipped(path, f"{name} in a response for {expected}"))
            return None
        if f"type.googleapis.com/{name}" not in KIND_OF:
            self.notes.append(Skipped(path, f"resource type {name} ignored"))
            return None
        return name


def as_served(assignment: Mapping[str, Json]) -> Mapping[str, Json]:
    """An admin dump's ClusterLoadAssignment as a control plane would have served it.

    The dump shows Envoy's hosts, with what Envoy fills in: a locality weight that
    was not set is printed as ``load_balancing_weight: 0``, which no control plane can
    serve (the field's minimum is 1, and Envoy rejects the update), so 0 there means
    unset. Read literally, every live Envoy's EDS would be invalid (``EV101``)."""
    localities = assignment.get("endpoints")  # one spelling in both JSON forms
    if not isinstance(localities, list):
        return assignment
    weights = ("load_balancing_weight", "loadBalancingWeight")
    served = [
        {k: v for k, v in loc.items() if not (k in weights and v == 0)}
        if isinstance(loc, Mapping)
        else loc
        for loc in localities
    ]
    return {**assignment, "endpoints": served} if served != localities else assignment


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def get(doc: Mapping[str, Json], key: str, path: str, kind: type) -> Any:
    """A key in snake_case or camelCase; wrong JSON types mean a malformed document."""
    value = doc.get(key, doc.get(camel(key)))
    if value is not None and not isinstance(value, kind):
        raise XdsLoadError(f"{path}.{key}", f"expected {_KIND_NAMES.get(kind, kind.__name__)}")
    return value


_KIND_NAMES: Final[dict[type, str]] = {
    Mapping: "a JSON object",
    list: "a JSON array",
    str: "a string",
}


def _list(doc: Mapping[str, Json], key: str, path: str) -> list[Json]:
    value: list[Json] = get(doc, key, path, list) or []
    return value


def type_name(doc: Json, path: str) -> str:
    if not isinstance(doc, Mapping):
        raise XdsLoadError(path, "expected a JSON object with an @type")
    url = doc.get("@type")
    if not isinstance(url, str) or not url:
        raise XdsLoadError(path, "missing @type")
    return url.rsplit("/", 1)[-1]


def read_json(path: Path) -> Json:
    """Through the one input layer, so xDS gets the same limits as every other file
    (``-``: standard input, as for the resources)."""
    name = label(path)
    try:
        text = read_stdin_once() if name == STDIN else read_text(name)
        return load_json(text, name)
    except InputErrors as exc:
        first = exc.errors[0]
        code = first.code if first.code in LIMIT_CODES else "bad-xds"
        raise XdsLoadError(name, first.message, line=first.line, code=code) from None
    except ValueError as exc:  # an integer of thousands of digits, among others
        raise XdsLoadError(name, f"invalid JSON: {exc}") from None


def label(path: str | os.PathLike[str]) -> str:
    """How findings and errors name an xDS source: ``-`` is standard input."""
    return STDIN if str(path) == "-" else str(path)


def xds_files(p: Path) -> list[Path]:
    """The ``xds.<type>[.golden].json`` files of a per-type directory, in type order."""
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
    return files


def walk_path(walk: Walk, path: str | os.PathLike[str]) -> None:
    """Walk a config_dump file, or every file of a per-type directory (reporting every
    bad file, not the first)."""
    p = Path(path)
    if str(path) == "-" or not p.is_dir():
        walk.document(read_json(p), f"{label(path)}:$")
        return
    problems: list[XdsLoadError] = []
    for f in xds_files(p):
        try:
            walk.document(read_json(f), f"{f}:$")
        except XdsLoadError as exc:
            problems.append(exc)
    if problems:
        problems[0].more = problems[1:]
        raise problems[0]


def name_of(kind: str, doc: Mapping[str, Json]) -> str:
    """The xDS name: ClusterLoadAssignments are named by ``cluster_name``."""
    key = "cluster_name" if kind == "endpoints" else "name"
    value = doc.get(key, doc.get(camel(key), ""))
    return value if isinstance(value, str) else ""


class RawResources(Walk):
    """The resources as the user wrote them, by kind and name (first one wins, as
    ``snapshot`` keeps it)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, dict[str, dict[str, Json]]] = {
            kind: {} for kind in (*KINDS, "secrets")
        }

    def resource(self, doc: Json, path: str, expected: str | None) -> None:
        name = self.unwrapped(doc, path, expected)
        if name is None:
            return
        kind = KIND_OF[f"type.googleapis.com/{name}"]
        fields = {k: v for k, v in doc.items() if k != "@type"}  # the Any's, not the type's
        self.found[kind].setdefault(name_of(kind, fields), fields)

    def sorted(self) -> dict[str, list[dict[str, Json]]]:
        """By name, as a ``Snapshot`` keeps them (Envoy names the first bad one)."""
        return {kind: [found[k] for k in sorted(found)] for kind, found in self.found.items()}
