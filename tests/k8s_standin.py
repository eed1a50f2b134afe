"""A stand-in for the Kubernetes API server: enough of its list/get wire format to test
the cluster reader, since no real API server can run on these machines.

It serves the objects of fixture YAML the way an API server would answer for them:
``kind: XList`` with ``metadata.resourceVersion``, items without kind/apiVersion,
paged with ``limit``/``continue``, single objects by name, bearer-token auth, 403
for kinds the test forbids and 404 for CRDs the test leaves out. It records every
request, so a test can prove the reader only ever read.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from verifier.gatewayapi.load import is_resource_file

TOKEN = "stand-in-token"
RESOURCE_VERSION = "4242"

# kind -> (API group, plural, namespaced)
KINDS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("", "namespaces", False),
    "Service": ("", "services", True),
    "Secret": ("", "secrets", True),
    "ConfigMap": ("", "configmaps", True),
    "ServiceAccount": ("", "serviceaccounts", True),
    "EndpointSlice": ("discovery.k8s.io", "endpointslices", True),
    "Deployment": ("apps", "deployments", True),
    "StatefulSet": ("apps", "statefulsets", True),
    "DaemonSet": ("apps", "daemonsets", True),
    "GatewayClass": ("gateway.networking.k8s.io", "gatewayclasses", False),
    "Gateway": ("gateway.networking.k8s.io", "gateways", True),
    "HTTPRoute": ("gateway.networking.k8s.io", "httproutes", True),
    "GRPCRoute": ("gateway.networking.k8s.io", "grpcroutes", True),
    "ReferenceGrant": ("gateway.networking.k8s.io", "referencegrants", True),
    "ListenerSet": ("gateway.networking.k8s.io", "listenersets", True),
}
PLURALS = {plural: kind for kind, (_g, plural, _n) in KINDS.items()}


def fixture_objects(dirs: Iterable[Path]) -> list[dict[str, Any]]:
    """The objects of fixture folders as the API server would store them: stringData
    folded into base64 data, bookkeeping metadata added."""
    out: list[dict[str, Any]] = []
    for d in dirs:
        for f in sorted(d.rglob("*")):
            if f.is_file() and is_resource_file(f.name):
                for doc in yaml.safe_load_all(f.read_text()):
                    out.extend(_unwrap(doc))
    for i, obj in enumerate(out):
        meta = obj.setdefault("metadata", {})
        if KINDS.get(obj.get("kind", ""), ("", "", False))[2]:
            meta.setdefault("namespace", "default")
        meta.update(
            uid=f"00000000-0000-0000-0000-{i:012d}",
            resourceVersion=str(1000 + i),
            creationTimestamp="2026-12-01T00:00:00Z",
            managedFields=[{"manager": "kubectl", "operation": "Update"}],
        )
        _server_set(obj)
        if obj.get("kind") == "Secret":
            data = dict(obj.get("data") or {})
            for k, v in (obj.pop("stringData", None) or {}).items():
                data[k] = base64.b64encode(str(v).encode()).decode()
            obj["data"] = data
            # What `kubectl apply` leaves behind: the Secret's data again, in clear.
            applied = json.dumps({"data": data})
            meta.setdefault("annotations", {})[
                "kubectl.kubernetes.io/last-applied-configuration"
            ] = applied
    return out


# A field of a Kubernetes newer than the tool's field lists: an API server that knows it
# has validated it, so an object read from one must load with it (a file must not).
NEWER_FIELD = "fieldOfALaterKubernetes"


def _server_set(obj: dict[str, Any]) -> None:
    """What an API server adds to a core object it stores: defaults, a status, and here a
    field newer than the tool knows; none changes where a request goes."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    kind = obj.get("kind")
    if kind == "Service":
        spec.setdefault("sessionAffinity", "None")
        spec.setdefault("internalTrafficPolicy", "Cluster")
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec[NEWER_FIELD] = True
        for port in spec.get("ports") or []:
            port.setdefault("protocol", "TCP")
        obj.setdefault("status", {"loadBalancer": {}})
    elif kind in ("Deployment", "StatefulSet", "DaemonSet"):
        spec.setdefault("revisionHistoryLimit", 10)
        template = spec.get("template") or {}
        template.setdefault("metadata", {}).setdefault("creationTimestamp", None)
        pod = template.get("spec") or {}
        pod.update(dnsPolicy="ClusterFirst", schedulerName="default-scheduler", securityContext={})
        pod[NEWER_FIELD] = True
        for container in pod.get("containers") or []:
            container.update(terminationMessagePath="/dev/termination-log", resources={})
            container.setdefault("imagePullPolicy", "IfNotPresent")
        obj.setdefault("status", {"observedGeneration": 1})


def _unwrap(doc: Any) -> Iterator[dict[str, Any]]:
    if not isinstance(doc, dict):
        return
    if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
        for item in doc["items"]:
            yield from _unwrap(item)
        return
    yield doc


@dataclass
class StandIn:
    objects: list[dict[str, Any]]
    forbidden: set[str] = field(default_factory=set)  # plurals answered 403
    missing: set[str] = field(default_factory=set)  # plurals answered 404 (no CRD)
    requests: list[tuple[str, str, dict[str, list[str]]]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None
    # https with this context; a client certificate it verified stands for the token
    tls: ssl.SSLContext | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host!s}:{port}"

    def start(self) -> StandIn:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def do_GET(self) -> None:
                standin.answer(self, "GET")

            def do_POST(self) -> None:
                standin.answer(self, "POST")

            def do_PUT(self) -> None:
                standin.answer(self, "PUT")

            def do_PATCH(self) -> None:
                standin.answer(self, "PATCH")

            def do_DELETE(self) -> None:
                standin.answer(self, "DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if self.tls is not None:  # https: the handshake happens in each handler thread
            self.server.socket = self.tls.wrap_socket(
                self.server.socket, server_side=True, do_handshake_on_connect=False
            )
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def kubeconfig(self, path: Path, context: str = "standin") -> Path:
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": self.url}}],
                    "users": [{"name": "u", "user": {"token": TOKEN}}],
                    "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}}],
                    "current-context": context,
                }
            )
        )
        return path

    # ---------------------------------------------------------------- answers

    def answer(self, h: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(h.path)
        query = parse_qs(parts.query)
        self.requests.append((method, parts.path, query))
        authorization = h.headers.get("Authorization")
        if isinstance(h.connection, ssl.SSLSocket) and h.connection.getpeercert():
            authorization = f"Bearer {TOKEN}"  # a client certificate the CA signed
        code, body = reply(
            self.objects,
            method,
            parts.path,
            query,
            authorization,
            forbidden=self.forbidden,
            missing=self.missing,
        )
        _send(h, code, body)


def reply(
    objects: list[dict[str, Any]],
    method: str,
    path: str,
    query: dict[str, list[str]],
    authorization: str | None,
    *,
    forbidden: Collection[str] = (),
    missing: Collection[str] = (),
) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body) the API server answers for ``objects``: shared by the
    stand-in and tests/hostile_k8s.py, whose lies start from this honest answer."""
    if method != "GET":
        return 405, _status(405, "MethodNotAllowed", "read-only stand-in")
    if authorization != f"Bearer {TOKEN}":
        return 401, _status(401, "Unauthorized", "no token")
    route = _route(path)
    if route is None:
        return 404, _status(404, "NotFound", "the server could not find it")
    group, version, ns, plural, name = route
    if plural in missing or plural not in PLURALS:
        return 404, _status(404, "NotFound", "the server could not find it")
    kind = PLURALS[plural]
    if plural in forbidden:
        verb = "get" if name else "list"
        message = f'{plural} is forbidden: User "edge" cannot {verb} resource "{plural}"'
        return 403, _status(403, "Forbidden", message)
    api_version = f"{group}/{version}" if group else version
    items = [
        o
        for o in objects
        if o.get("kind") == kind
        and (ns is None or o["metadata"].get("namespace") == ns)
        and (name is None or o["metadata"].get("name") == name)
    ]
    if name is not None:
        if not items:
            return 404, _status(404, "NotFound", f'{plural} "{name}" not found')
        return 200, {**items[0], "apiVersion": api_version, "kind": kind}
    start = int(query.get("continue", ["0"])[0] or 0)
    limit = int(query.get("limit", ["0"])[0] or 0) or len(items) or 1
    page = items[start : start + limit]
    meta: dict[str, Any] = {"resourceVersion": RESOURCE_VERSION}
    if start + limit < len(items):
        meta["continue"] = str(start + limit)
        meta["remainingItemCount"] = len(items) - start - limit
    stripped = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in page]
    body = {"kind": f"{kind}List", "apiVersion": api_version, "metadata": meta}
    return 200, {**body, "items": stripped}


def _route(path: str) -> tuple[str, str, str | None, str, str | None] | None:
    """(group, version, namespace, plural, name) of an API path, as the server routes it."""
    segs = [unquote(s) for s in path.strip("/").split("/")]
    if segs[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", segs[2:]
    elif segs[:1] == ["apis"] and len(segs) >= 4:
        group, version, rest = segs[1], segs[2], segs[3:]
    else:
        return None
    if group == "" and rest[:1] == ["namespaces"] and len(rest) <= 2:
        return group, version, None, "namespaces", rest[1] if len(rest) == 2 else None
    ns = None
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        ns, rest = rest[1], rest[2:]
    if len(rest) == 1:
        return group, version, ns, rest[0], None
    if len(rest) == 2 and ns is not None:
        return group, version, ns, rest[0], rest[1]
    return None


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _send(h: BaseHTTPRequestHandler, code: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    h.send_response(code)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)
