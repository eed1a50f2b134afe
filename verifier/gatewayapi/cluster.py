"""Read the Gateway API objects of a live cluster, read-only, as the file loader would.

A team's nightly question is "is the edge doing what the cluster says?", and the
cluster is the source of truth, not the YAML someone last applied. So the objects
are fetched from the API server and turned into the same ``RawObject``s the YAML
loader makes, then validated, typed and attached exactly as files are: one code
path judges both. Each object's location is ``cluster:<context>/<kind>/<ns>/<name>``
so findings still name something a person can ``kubectl get``.

What an SRE pointing a read-only tool at production expects: only GET requests
(list and get; nothing is ever written), Secrets fetched one by one by name and
only when a listener references them (never listed cluster-wide, never printed),
bounds on every request and on the whole read (``kubeapi``), and a clear exit-2
error naming the kind and the RBAC verb when the tool's role is missing one. The
kubeconfig is read by ``kubeconfig`` (its credential plugin by ``credentials``).

An answer must have the shape asked for: a list is an object whose ``items`` is a
list of objects, each with a name; paging ends within a bound and never repeats a
token. Anything else is an error naming the server, the kind and the field, never
an empty read: a read that checked nothing must not pass.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from verifier.errors import InputError, InputErrors
from verifier.gatewayapi.kubeapi import Api, Status, json_type
from verifier.gatewayapi.kubeconfig import endpoint
from verifier.gatewayapi.load import LoadResult, RawObject
from verifier.gatewayapi.resources import Resources, build
from verifier.inputs import LIMIT_FLAGS, limits

GATEWAY_GROUP = "gateway.networking.k8s.io"
DEFAULT_TIMEOUT = 10.0  # one request, connect to last byte (--cluster-timeout)
DEFAULT_DEADLINE = 300.0  # the whole read, credential plugin included (--cluster-deadline)
DEFAULT_EXEC_TIMEOUT = 60.0  # a kubeconfig's credential plugin (--exec-timeout)
PAGE_SIZE = 500


@dataclass(frozen=True)
class Kind:
    """One kind the edge reads: where the API serves it and whether it may be absent."""

    kind: str
    api_version: str
    plural: str
    namespaced: bool = True
    # A CRD a cluster may not have installed (404): skipped with a warning.
    optional: bool = False

    @property
    def base(self) -> str:
        return (
            f"/api/{self.api_version}"
            if "/" not in self.api_version
            else (f"/apis/{self.api_version}")
        )


# Listed (cluster-wide, or per --namespace). Secrets and ConfigMaps are not here:
# they are fetched by name, only those the Gateways and ListenerSets reference.
LISTED: tuple[Kind, ...] = (
    Kind("Namespace", "v1", "namespaces", namespaced=False),
    Kind("GatewayClass", f"{GATEWAY_GROUP}/v1", "gatewayclasses", namespaced=False),
    Kind("Gateway", f"{GATEWAY_GROUP}/v1", "gateways"),
    Kind("ListenerSet", f"{GATEWAY_GROUP}/v1", "listenersets", optional=True),
    Kind("HTTPRoute", f"{GATEWAY_GROUP}/v1", "httproutes"),
    Kind("ReferenceGrant", f"{GATEWAY_GROUP}/v1beta1", "referencegrants"),
    Kind("Service", "v1", "services"),
    Kind("EndpointSlice", "discovery.k8s.io/v1", "endpointslices"),
    Kind("Deployment", "apps/v1", "deployments"),
    Kind("StatefulSet", "apps/v1", "statefulsets"),
    Kind("DaemonSet", "apps/v1", "daemonsets"),
)
SECRET = Kind("Secret", "v1", "secrets")
CONFIG_MAP = Kind("ConfigMap", "v1", "configmaps")
# An annotation `kubectl apply` leaves holding the whole object as applied: for a
# Secret that is its data, so it is dropped before anything can print it.
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


@dataclass(frozen=True)
class ClusterSource:
    """Where to read from: the command line's --kubeconfig, --context, --namespace."""

    kubeconfig: str
    context: str | None = None
    namespaces: tuple[str, ...] = ()
    timeout: float = DEFAULT_TIMEOUT
    page_size: int = PAGE_SIZE
    deadline: float = DEFAULT_DEADLINE
    exec_timeout: float = DEFAULT_EXEC_TIMEOUT


@dataclass
class ClusterRead:
    loaded: LoadResult
    warnings: list[str] = field(default_factory=list)


def connect(source: ClusterSource, deadline: float | None = None) -> Api:
    """The API server the kubeconfig names, with its credentials (a credential plugin
    run now), bounded by ``deadline`` (time.monotonic(); default: --cluster-deadline
    from now)."""
    if deadline is None:
        deadline = time.monotonic() + source.deadline
    target = endpoint(source.kubeconfig, source.context, source.exec_timeout, deadline)
    return Api(target, source.timeout, deadline)


def forbidden(where: str, verb: str, kind: Kind, namespace: str | None) -> InputError:
    scope = f" in namespace {namespace}" if namespace else " cluster-wide"
    group = kind.api_version.rsplit("/", 1)[0] if "/" in kind.api_version else '""'
    message = (
        f"forbidden: cannot {verb} {kind.plural}{scope} ({kind.kind}); the role needs verb "
        f"{verb!r} on {kind.plural} in apiGroup {group} (see deploy/edge-verifier-clusterrole.yaml)"
    )
    return InputError(where, 0, kind.kind, "forbidden", message)


def unexpected(where: str, verb: str, kind: Kind, exc: Status) -> InputError:
    message = f"cannot {verb} {kind.plural} ({kind.kind}): the API server answered {exc}"
    return InputError(where, 0, kind.kind, "api-error", message)


def _clean(kind: Kind, item: dict[str, Any]) -> dict[str, Any]:
    """As a file would hold it: kind and apiVersion set (list items lack them), and
    the bookkeeping no check reads (managedFields; a Secret's last-applied copy) gone."""
    out = dict(item)
    out["kind"] = kind.kind
    out["apiVersion"] = kind.api_version
    meta = out.get("metadata")
    if isinstance(meta, dict):
        meta = {k: v for k, v in meta.items() if k != "managedFields"}
        notes = meta.get("annotations")
        if isinstance(notes, dict) and LAST_APPLIED in notes:
            meta["annotations"] = {k: v for k, v in notes.items() if k != LAST_APPLIED}
        out["metadata"] = meta
    return out


class _Reader:
    def __init__(self, api: Api, source: ClusterSource) -> None:
        self.api = api
        self.source = source
        self.context = api.where.removeprefix("cluster:")
        self.objects: list[RawObject] = []
        self.warnings: list[str] = []

    def raw(self, kind: Kind, item: dict[str, Any]) -> RawObject:
        data = _clean(kind, item)
        meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
        ns = str(meta.get("namespace") or "") if isinstance(meta, dict) else ""
        name = str(meta.get("name") or "") if isinstance(meta, dict) else ""
        where = f"cluster:{self.context}/{kind.kind}/{ns + '/' if ns else ''}{name}"
        return RawObject(data, where, {"": 1}, served=True)

    def pages(self, kind: Kind, path: str, namespace: str | None) -> Iterator[dict[str, Any]]:
        """Every item, page by page: a large cluster answers in bounded pieces, and the
        continue token keeps every page at the first page's resourceVersion. A list
        bounded as a file is (at most --max-list-length items and --max-input-bytes
        over all its pages), pages past what that many items take, or a token given
        twice (a server that would page forever) is an error."""
        lim = limits()
        token = ""
        seen: set[str] = set()
        count = 0
        start = self.api.received
        max_pages = lim.max_items // self.source.page_size + 2
        for page_number in range(1, max_pages + 1):
            query = [("limit", str(self.source.page_size))]
            if token:
                query.append(("continue", token))
            try:
                page = self.api.get(path, query, kind.kind)
            except Status as exc:
                if exc.status == 403:
                    raise InputErrors(
                        [forbidden(self.api.where, "list", kind, namespace)]
                    ) from None
                raise
            items = self._items(page, path, kind)
            count += len(items)
            if count > lim.max_items:
                why = f"more than {lim.max_items:,} items"
                raise self._bound(kind, why, "max_items")
            if self.api.received - start > lim.max_bytes:
                why = f"pages of more than {lim.max_bytes:,} bytes in all"
                raise self._bound(kind, why, "max_bytes")
            yield from items
            token = self._token(page, path, kind)
            if not token:
                return
            if token in seen:
                why = f"GET {path}: page {page_number} repeats an earlier continue token"
                raise self._bad(kind, "metadata.continue", why)
            seen.add(token)
        why = f"a continue token after {max_pages:,} pages, more than {lim.max_items:,} items take"
        raise self._bound(kind, why, "max_items")

    def _items(self, page: dict[str, Any], path: str, kind: Kind) -> list[dict[str, Any]]:
        """A list answer's items: a list of objects, each with a name."""
        if "items" not in page:
            raise self._bad(kind, "items", f"GET {path}: the {kind.kind} list has no items")
        items = page["items"]
        if not isinstance(items, list):
            why = f"GET {path}: the {kind.kind} list's items is a {json_type(items)}, not a list"
            raise self._bad(kind, "items", why)
        for i, item in enumerate(items):
            meta = item.get("metadata") if isinstance(item, dict) else None
            name = meta.get("name") if isinstance(meta, dict) else None
            if not isinstance(name, str) or not name:
                why = f"GET {path}: items[{i}] is not a {kind.kind} with metadata.name"
                raise self._bad(kind, f"items[{i}]", why)
        return items

    def _token(self, page: dict[str, Any], path: str, kind: Kind) -> str:
        meta = page.get("metadata", {})
        token = meta.get("continue", "") if isinstance(meta, dict) else None
        if not isinstance(token, str):
            why = f"GET {path}: the {kind.kind} list's metadata.continue is not a string"
            raise self._bad(kind, "metadata.continue", why)
        return token

    def _bad(self, kind: Kind, field: str, why: str) -> InputErrors:
        message = f"{self.api.endpoint.server}: {why}"
        at = f"{kind.kind}.{field}"
        return InputErrors([InputError(self.api.where, 0, at, "bad-answer", message)])

    def _bound(self, kind: Kind, what: str, limit: str) -> InputErrors:
        flag = LIMIT_FLAGS[limit]
        message = (
            f"{self.api.endpoint.server}: the {kind.kind} list has {what} (raise it with {flag})"
        )
        code = "too-large" if limit == "max_bytes" else "too-long"
        return InputErrors([InputError(self.api.where, 0, kind.kind, code, message)])

    def list_kind(self, kind: Kind) -> None:
        if kind.namespaced and self.source.namespaces:
            scopes: Sequence[str | None] = self.source.namespaces
        else:
            scopes = [None]
        for ns in scopes:
            path = (
                f"{kind.base}/namespaces/{quote(ns)}/{kind.plural}"
                if ns
                else (f"{kind.base}/{kind.plural}")
            )
            try:
                for item in self.pages(kind, path, ns):
                    self.objects.append(self.raw(kind, item))
            except Status as exc:
                if exc.status == 404 and kind.optional:
                    self.warnings.append(
                        f"{self.api.where}: {kind.kind} ({kind.api_version}) is not served by "
                        "this cluster (CRD not installed?); read none"
                    )
                    return
                raise InputErrors([unexpected(self.api.where, "list", kind, exc)]) from None

    def get_one(self, kind: Kind, namespace: str, name: str) -> None:
        """A referenced object by name; absent is not an error (the check reports the
        dangling reference, as it does for files)."""
        path = f"{kind.base}/namespaces/{quote(namespace)}/{kind.plural}/{quote(name)}"
        try:
            item = self.api.get(path, kind=kind.kind)
        except Status as exc:
            if exc.status == 404:
                return
            if exc.status == 403:
                raise InputErrors([forbidden(self.api.where, "get", kind, namespace)]) from None
            raise InputErrors([unexpected(self.api.where, "get", kind, exc)]) from None
        self.objects.append(self.raw(kind, item))

    def namespaces(self) -> None:
        """Cluster-wide, every Namespace; with --namespace only those, by name, so a role
        bound to a few namespaces' worth of reading suffices."""
        kind = LISTED[0]
        if not self.source.namespaces:
            self.list_kind(kind)
            return
        for ns in self.source.namespaces:
            try:
                item = self.api.get(f"/api/v1/namespaces/{quote(ns)}", kind=kind.kind)
            except Status as exc:
                if exc.status == 403:
                    raise InputErrors([forbidden(self.api.where, "get", kind, None)]) from None
                if exc.status == 404:
                    self.warnings.append(f"{self.api.where}: namespace {ns} does not exist")
                    continue
                raise InputErrors([unexpected(self.api.where, "get", kind, exc)]) from None
            self.objects.append(self.raw(kind, item))

    def referenced(self) -> None:
        """The TLS Secrets and CA ConfigMaps the listeners name, each fetched once."""
        wanted: set[tuple[Kind, str, str]] = set()
        for obj in list(self.objects):
            if obj.kind not in ("Gateway", "ListenerSet"):
                continue
            spec = obj.data.get("spec")
            for kind, ns, name in _refs(spec if isinstance(spec, dict) else {}, obj.namespace):
                if self.source.namespaces and ns not in self.source.namespaces:
                    self.warnings.append(
                        f"{obj.file}: not reading {kind.kind} {ns}/{name}: namespace {ns} is "
                        "outside --namespace"
                    )
                    continue
                wanted.add((kind, ns, name))
        for kind, ns, name in sorted(wanted, key=lambda w: (w[0].kind, w[1], w[2])):
            self.get_one(kind, ns, name)


def _refs(spec: dict[str, Any], own_ns: str) -> Iterator[tuple[Kind, str, str]]:
    """Secret and ConfigMap references of listeners (certificateRefs) and of frontend
    validation (caCertificateRefs); other groups and kinds are not ours to read."""

    def of(ref: Any, default_kind: str) -> Iterator[tuple[Kind, str, str]]:
        if not isinstance(ref, dict) or str(ref.get("group") or "") != "":
            return
        kind = {"Secret": SECRET, "ConfigMap": CONFIG_MAP}.get(str(ref.get("kind") or default_kind))
        name = str(ref.get("name") or "")
        if kind is not None and name:
            yield kind, str(ref.get("namespace") or own_ns), name

    def dicts(value: Any) -> list[Any]:
        return value if isinstance(value, list) else []

    for listener in dicts(spec.get("listeners")):
        tls = listener.get("tls") if isinstance(listener, dict) else None
        if isinstance(tls, dict):
            for ref in dicts(tls.get("certificateRefs")):
                yield from of(ref, "Secret")
    tls = spec.get("tls")
    frontend = tls.get("frontend") if isinstance(tls, dict) else None
    if isinstance(frontend, dict):
        validations = (
            [(frontend.get("default") or {}).get("validation")]
            if isinstance(frontend.get("default"), dict)
            else []
        )
        for entry in dicts(frontend.get("perPort")):
            if isinstance(entry, dict) and isinstance(entry.get("tls"), dict):
                validations.append(entry["tls"].get("validation"))
        for v in validations:
            if isinstance(v, dict):
                for ref in dicts(v.get("caCertificateRefs")):
                    yield from of(ref, "ConfigMap")


def read_cluster(source: ClusterSource) -> ClusterRead:
    """Every object the edge reads, from the cluster; InputErrors (exit 2) when the
    cluster cannot be read completely: a partial read would check too little and pass."""
    with connect(source) as api:
        reader = _Reader(api, source)
        reader.namespaces()
        for kind in LISTED[1:]:
            reader.list_kind(kind)
        reader.referenced()
    loaded = LoadResult(objects=reader.objects, files=[api.where])
    return ClusterRead(loaded, reader.warnings)


def load_cluster_resources(source: ClusterSource) -> Resources:
    """The cluster's objects through the same validation and typing as files."""
    read = read_cluster(source)
    res = build(read.loaded)
    res.warnings[:0] = read.warnings
    if source.namespaces:
        res.scope = frozenset(source.namespaces)
    return res
