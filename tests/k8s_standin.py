"""A stand-in for the Kubernetes API server: enough of its list/get wire format to test
the cluster reader, since no real API server can run on these machines.

It serves the objects of fixture YAML the way an API server would answer for them:
``kind: XList`` with ``metadata.resourceVersion``, items without kind/apiVersion,
paged with ``limit``/``continue``, single objects by name, bearer-token auth, 403
for kinds the test forbids and 404 for CRDs the test leaves out. It records every
request, so a test can prove the reader only ever read.

It also serves a pod's port-forward as the API server and kubelet do over a WebSocket
(``GET .../pods/NAME/portforward?ports=P``, subprotocol ``v4.channel.k8s.io``): the
101 upgrade, each channel opened with the port (two bytes, little-endian), channel 0
relayed to the connection ``portforward`` (the test's choice) opens for (namespace,
pod, port), and the kubelet's words on channel 1 when that fails. ``forbidden``
holding ``pods/portforward`` answers the upgrade 403; ``stall_portforward`` upgrades
and then says nothing, and ``lie`` breaks the protocol in one of the ``LIES`` ways (a
hostile server).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import socket
import ssl
import struct
import threading
from collections.abc import Callable, Collection, Iterable, Iterator
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
    "Pod": ("", "pods", True),
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
    # (namespace, pod, port) -> a connected socket to relay a port-forward to; OSError
    # is the kubelet's failure to dial, its words sent on the error channel
    portforward: Callable[[str, str, int], socket.socket] | None = None
    stall_portforward: bool = False
    # A port-forward that breaks the protocol after the upgrade (LIES: how)
    lie: str = ""

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
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
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
        segs = [unquote(x) for x in parts.path.strip("/").split("/")]
        if (
            segs[:3] == ["api", "v1", "namespaces"]
            and segs[4:5] == ["pods"]
            and segs[6:] == ["portforward"]
        ):
            _port_forward(self, h, method, segs[3], segs[5], query, authorization)
            return
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


# ------------------------------------------------------------------ port-forward

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455
PORT_FORWARD_PROTOCOL = "v4.channel.k8s.io"


def _port_forward(
    standin: StandIn,
    h: BaseHTTPRequestHandler,
    method: str,
    ns: str,
    pod: str,
    query: dict[str, list[str]],
    authorization: str | None,
) -> None:
    """The kubelet's WebSocket port-forward of one port (the module docstring)."""
    if authorization != f"Bearer {TOKEN}":
        _send(h, 401, _status(401, "Unauthorized", "no token"))
        return
    if "pods/portforward" in standin.forbidden:
        message = (
            f'pods "{pod}" is forbidden: User "edge" cannot create resource "pods/portforward" '
            f'in API group "" in the namespace "{ns}"'
        )
        _send(h, 403, _status(403, "Forbidden", message))
        return
    if not any(
        o["kind"] == "Pod" and (o["metadata"].get("namespace"), o["metadata"]["name"]) == (ns, pod)
        for o in standin.objects
    ):
        _send(h, 404, _status(404, "NotFound", f'pods "{pod}" not found'))
        return
    offered = [p.strip() for p in h.headers.get("Sec-WebSocket-Protocol", "").split(",")]
    ports = query.get("ports", [""])[0]
    if method != "GET" or h.headers.get("Upgrade", "").lower() != "websocket" or not ports:
        _send(h, 400, _status(400, "BadRequest", "a WebSocket upgrade with ports= is needed"))
        return
    if PORT_FORWARD_PROTOCOL not in offered:
        _send(h, 400, _status(400, "BadRequest", "unsupported subprotocol"))
        return
    key = h.headers.get("Sec-WebSocket-Key", "")
    accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
    h.send_response(101, "Switching Protocols")
    h.send_header("Upgrade", "websocket")
    h.send_header("Connection", "Upgrade")
    h.send_header("Sec-WebSocket-Accept", accept)
    h.send_header("Sec-WebSocket-Protocol", PORT_FORWARD_PROTOCOL)
    h.end_headers()
    h.wfile.flush()
    h.close_connection = True
    client = h.connection
    if standin.stall_portforward:
        while _read_frame(h.rfile) is not None:
            pass  # read, never answer
        return
    port = int(ports)
    lock = threading.Lock()

    def send(opcode: int, payload: bytes) -> None:
        with lock:
            client.sendall(_frame(opcode, payload))

    if standin.lie:
        with contextlib.suppress(OSError):
            for opcode, payload in LIES[standin.lie](port):
                send(opcode, payload)
            while _read_frame(h.rfile) is not None:
                pass
        return
    header = struct.pack("<H", port)
    send(2, b"\x00" + header)
    send(2, b"\x01" + header)
    assert standin.portforward is not None
    try:
        target = standin.portforward(ns, pod, port)
    except OSError as exc:
        words = f"error forwarding port {port} to pod {pod}: {exc}"
        send(2, b"\x01" + words.encode())
        send(8, struct.pack("!H", 1000))
        return
    _relay_frames(h, target, send)


# Ways a server breaks the port-forward protocol after the upgrade: the frames it sends.
LIES: dict[str, Callable[[int], list[tuple[int, bytes]]]] = {
    "wrong-port": lambda port: [(2, b"\x00" + struct.pack("<H", port + 1))],
    "text-message": lambda port: [(1, b"hello")],
    "third-channel": lambda port: [(2, b"\x05" + struct.pack("<H", port))],
    "flood": lambda port: (
        [(2, b"\x00" + struct.pack("<H", port))] + [(2, b"\x00" + bytes(65536))] * 64
    ),
}


def _relay_frames(
    h: BaseHTTPRequestHandler, target: socket.socket, send: Callable[[int, bytes], None]
) -> None:
    """Channel 0 to ``target`` and back, until either side ends."""

    def down() -> None:
        try:
            while data := target.recv(65536):
                send(2, b"\x00" + data)
            send(8, struct.pack("!H", 1000))
        except OSError:
            pass

    threading.Thread(target=down, daemon=True).start()
    try:
        while (frame := _read_frame(h.rfile)) is not None:
            opcode, payload = frame
            if opcode == 8:
                break
            if opcode == 9:
                send(10, payload)
            elif opcode == 2 and payload[:1] == b"\x00":
                target.sendall(payload[1:])
    except OSError:
        pass
    finally:
        target.close()


def _read_frame(rfile: Any) -> tuple[int, bytes] | None:
    """One client frame (masked, as RFC 6455 has clients send), or None at the end."""
    head = rfile.read(2)
    if len(head) < 2:
        return None
    opcode, size = head[0] & 0x0F, head[1] & 0x7F
    if size == 126:
        (size,) = struct.unpack("!H", rfile.read(2))
    elif size == 127:
        (size,) = struct.unpack("!Q", rfile.read(8))
    mask = rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
    data = rfile.read(size)
    return opcode, bytes(b ^ mask[i % 4] for i, b in enumerate(data))


def _frame(opcode: int, payload: bytes) -> bytes:
    """One server frame: final, unmasked."""
    size = len(payload)
    if size < 126:
        head = bytes([0x80 | opcode, size])
    elif size < 1 << 16:
        head = bytes([0x80 | opcode, 126]) + struct.pack("!H", size)
    else:
        head = bytes([0x80 | opcode, 127]) + struct.pack("!Q", size)
    return head + payload


def pod_object(
    namespace: str, name: str, ip: str, labels: dict[str, str], ready: bool = True
) -> dict[str, Any]:
    """A Pod as the API server stores a scheduled one: Running, Ready as given."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {"containers": [{"name": "echo", "image": "echo"}]},
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }
