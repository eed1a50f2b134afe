"""From raw objects to one typed, validated ``Resources`` set.

Every bad object in the input is reported together (a directory with one bad
file reports all of them), and objects of kinds the edge does not read are
dropped with one warning line each, so nothing is silently ignored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from verifier.errors import InputError, InputErrors
from verifier.gatewayapi import model as m
from verifier.gatewayapi.addresses import assign_cluster_ips, cluster_ip_note
from verifier.gatewayapi.load import LoadResult, RawObject, load_paths
from verifier.gatewayapi.validate import validate_object
from verifier.gatewayapi.workloads import derive_endpoint_slices, mesh_namespace

GATEWAY_GROUP = m.GATEWAY_GROUP

# kind -> (accepted API groups, parser). Group "" is the core API.
PARSERS: dict[str, tuple[frozenset[str], Callable[[RawObject], Any]]] = {
    "GatewayClass": (
        frozenset({GATEWAY_GROUP}),
        lambda r: m.GatewayClass(
            m._meta(r), str(m._d(r.data.get("spec")).get("controllerName", ""))
        ),
    ),
    "Gateway": (frozenset({GATEWAY_GROUP}), m.parse_gateway),
    "HTTPRoute": (frozenset({GATEWAY_GROUP}), m.parse_httproute),
    "ReferenceGrant": (frozenset({GATEWAY_GROUP}), m.parse_reference_grant),
    "ListenerSet": (frozenset({GATEWAY_GROUP}), m.parse_listener_set),
    "Service": (frozenset({""}), m.parse_service),
    "EndpointSlice": (frozenset({"discovery.k8s.io"}), m.parse_endpoint_slice),
    "Namespace": (frozenset({""}), lambda r: m.Namespace(m._meta(r))),
    "Secret": (frozenset({""}), m.parse_secret),
    "ConfigMap": (frozenset({""}), m.parse_config_map),
    "Deployment": (frozenset({"apps"}), m.parse_workload),
    "StatefulSet": (frozenset({"apps"}), m.parse_workload),
    "DaemonSet": (frozenset({"apps"}), m.parse_workload),
}
# Read without a warning but not modelled: they matter to a cluster, not to routing.
QUIET_KINDS = frozenset({"ServiceAccount"})


@dataclass
class Resources:
    """Everything the translator and the spec model read, keyed by (namespace, name)."""

    gateway_classes: dict[str, m.GatewayClass] = field(default_factory=dict)
    gateways: dict[tuple[str, str], m.Gateway] = field(default_factory=dict)
    listener_sets: dict[tuple[str, str], m.ListenerSet] = field(default_factory=dict)
    httproutes: dict[tuple[str, str], m.HTTPRoute] = field(default_factory=dict)
    reference_grants: dict[tuple[str, str], m.ReferenceGrant] = field(default_factory=dict)
    services: dict[tuple[str, str], m.Service] = field(default_factory=dict)
    endpoint_slices: dict[tuple[str, str], m.EndpointSlice] = field(default_factory=dict)
    namespaces: dict[str, m.Namespace] = field(default_factory=dict)
    secrets: dict[tuple[str, str], m.Secret] = field(default_factory=dict)
    config_maps: dict[tuple[str, str], m.ConfigMap] = field(default_factory=dict)
    workloads: dict[tuple[str, str, str], m.Workload] = field(default_factory=dict)
    # Each derived endpoint address -> the workload (kind, namespace, name) whose pod it
    # is: the derivation knows (a given EndpointSlice does not say; ``address_owners``).
    derived_pods: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    # Route kinds the edge skips (GRPCRoute, ...): kept so that check can tell the
    # xDS other implementations write for them from mistakes, and say it left it alone.
    other_routes: dict[tuple[str, str, str], m.OtherRoute] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    # The namespaces the input holds everything of, when it holds only some (a cluster
    # read with --namespace); None: the input is taken as complete. A reference into a
    # namespace outside it names an object the input cannot know to be missing.
    scope: frozenset[str] | None = None

    def knows(self, namespace: str) -> bool:
        """Whether an object missing from ``namespace`` is missing, not merely unread."""
        return self.scope is None or namespace in self.scope

    def namespace_labels(self, ns: str) -> dict[str, str]:
        found = self.namespaces.get(ns)
        labels = found.meta.label_map if found else {}
        # Kubernetes always sets this label; selectors rely on it.
        return {**labels, "kubernetes.io/metadata.name": ns}


def _store(res: Resources, obj: Any) -> InputError | None:
    meta: m.Meta = obj.meta
    if isinstance(obj, m.GatewayClass):
        table: dict[Any, Any] = res.gateway_classes
        key: Any = meta.name
    elif isinstance(obj, m.Namespace):
        table, key = res.namespaces, meta.name
    elif isinstance(obj, m.Workload):
        table, key = res.workloads, (meta.kind, meta.namespace, meta.name)
    else:
        tables: dict[type, dict[Any, Any]] = {
            m.Gateway: res.gateways,
            m.ListenerSet: res.listener_sets,
            m.HTTPRoute: res.httproutes,
            m.ReferenceGrant: res.reference_grants,
            m.Service: res.services,
            m.EndpointSlice: res.endpoint_slices,
            m.Secret: res.secrets,
            m.ConfigMap: res.config_maps,
        }
        table = tables[type(obj)]
        key = meta.key
    if key in table:
        first = table[key].meta.where()
        where = meta.where()
        return InputError(
            where.file,
            where.line,
            "metadata.name",
            "duplicate-object",
            f"{meta.kind} {'/'.join(k for k in meta.key if k)} is also defined at {first}",
        )
    table[key] = obj
    return None


GATEWAY_API_KINDS = frozenset(
    {"GatewayClass", "Gateway", "HTTPRoute", "ReferenceGrant", "ListenerSet"}
)


def _api_version_problem(raw: RawObject, groups: frozenset[str] | None) -> InputError | None:
    """A kind the edge reads with no apiVersion, or a Gateway API kind outside its API
    group, is a mistake to report: skipping it with a warning would check the rest and
    pass. (A kind of the same name in another API group, a Knative Service say, is
    another object and is skipped as before.)"""
    if groups is None:
        return None
    version = raw.api_version
    if version and (raw.kind not in GATEWAY_API_KINDS or raw.group in groups):
        return None
    want = " or ".join(f"{g}/..." if g else "v1" for g in sorted(groups))
    got = repr(version) if version else "none"
    return InputError(
        raw.file,
        raw.line_of("apiVersion"),
        "apiVersion",
        "api-version",
        f"{raw.kind} needs apiVersion {want}; got {got}",
    )


def skip_warning(raw: RawObject) -> str:
    return (
        f"{raw.loc}: ignoring {raw.kind or '<no kind>'} "
        f"{raw.api_version or '<no apiVersion>'} {raw.name}: not read by the edge"
    )


def build(loaded: LoadResult) -> Resources:
    """Validate and type every object; raise InputErrors with all problems at once."""
    res = Resources(files=list(loaded.files))
    errors: list[InputError] = list(loaded.errors)
    for raw in loaded.objects:
        entry = PARSERS.get(raw.kind)
        wrong = _api_version_problem(raw, entry[0] if entry else None)
        if wrong is not None:
            errors.append(wrong)
            continue
        if entry is None or raw.group not in entry[0]:
            if raw.kind not in QUIET_KINDS:
                res.warnings.append(skip_warning(raw))
            if raw.kind in m.OTHER_ROUTE_KINDS and raw.group == GATEWAY_GROUP:
                other = m.parse_other_route(raw)
                res.other_routes.setdefault((raw.kind, *other.meta.key), other)
            continue
        problems = validate_object(raw)
        if problems:
            errors.extend(problems)
            continue
        dup = _store(res, entry[1](raw))
        if dup is not None:
            errors.append(dup)
    if errors:
        raise InputErrors(errors)
    _assign_cluster_ips(res)
    _derive_endpoints(res)
    return res


def _assign_cluster_ips(res: Resources) -> None:
    """Once, here, as ``_derive_endpoints``: a Service written without spec.clusterIP
    gets the one a cluster would assign, and every command (translate, check, explain,
    status, live) reads that one without knowing it was assigned. A note says so where
    the mesh may call it (a mesh-registered namespace, or an input with mesh routes):
    the edge never sends to a ClusterIP, and its users need not read of them."""
    meshed = any(p.service_parent for r in res.httproutes.values() for p in r.parent_refs)
    for key, ip in assign_cluster_ips(res.services).items():
        svc = res.services[key] = dataclasses.replace(res.services[key], cluster_ip=ip)
        if meshed or mesh_namespace(res, key[0]):
            res.warnings.append(cluster_ip_note(svc, ip))


def _derive_endpoints(res: Resources) -> None:
    """Once, here: every reader of ``endpoint_slices`` (both models, the translator,
    the live harness) then sees the endpoints a cluster would publish for Services
    given with workloads and no EndpointSlice, without knowing they were derived."""
    derived, notes, pods = derive_endpoint_slices(res.services, res.endpoint_slices, res.workloads)
    for sl in derived:
        res.endpoint_slices[sl.meta.key] = sl
    res.warnings.extend(notes)
    res.derived_pods.update(pods)


def load_resources(paths: Sequence[str]) -> Resources:
    return build(load_paths(paths))
