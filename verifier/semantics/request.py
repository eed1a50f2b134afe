"""The one Request and one Outcome shared by the spec model, the Envoy model,
the live runner and the fuzzer.

Both models answer the same question ("what happens to this request?") in the
same vocabulary, so agreement is plain equality of ``Outcome.decision()``.
Pure data: no I/O, no decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

Headers = tuple[tuple[str, tuple[str, ...]], ...]


def normalize_headers(pairs: Iterable[tuple[str, str]]) -> Headers:
    """Lower-cased names (HTTP names are case-insensitive), values in arrival order."""
    merged: dict[str, list[str]] = {}
    for name, value in pairs:
        merged.setdefault(name.lower(), []).append(value)
    return tuple(sorted((k, tuple(v)) for k, v in merged.items()))


def headers_from_mapping(value: Mapping[str, Any] | None) -> Headers:
    pairs: list[tuple[str, str]] = []
    for name, v in (value or {}).items():
        if isinstance(v, list | tuple):
            pairs.extend((str(name), str(x)) for x in v)
        else:
            pairs.append((str(name), str(v)))
    return normalize_headers(pairs)


def headers_to_json(headers: Headers) -> dict[str, list[str]]:
    return {k: list(v) for k, v in headers}


# What an HTTP/1.1 request may carry, byte for byte (RFC 9112 and 9110): the
# request target is printable ASCII without spaces (clients percent-encode the
# rest); a header name is a token; a field value is visible characters, spaces,
# tabs and obs-text (bytes >= 0x80, here UTF-8), with no leading or trailing
# whitespace (the codec strips it, so such a value cannot be sent as written).
_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_NOT_IN_TARGET = frozenset(" #")  # a space ends the target; '#' starts a fragment


def _raw_in_target(ch: str) -> bool:
    return ch.isascii() and ch.isprintable() and ch not in _NOT_IN_TARGET


def _control(ch: str) -> bool:
    """A control character a field value may not hold (HTAB may)."""
    return (ch < " " and ch != "\t") or ch == "\x7f"


def wire_problem(request: Request) -> str | None:
    """Why ``request`` cannot be sent over HTTP/1.1 as written, or None.

    Envoy's codec answers such bytes with 400 before any routing (checked on
    Envoy 1.40: a raw ``é``, a control character or DEL in the target, a control
    character in a header value); no Gateway API rule can apply to them, so
    inputs that describe requests (cases, ``--request``) refuse them and the
    witness generator never makes them.
    """
    if not request.method or not _TCHAR.issuperset(request.method):
        return f"the method {request.method!r} is not an HTTP token"
    path = request.path
    if not (path.isascii() and path.isprintable()) or " " in path or "#" in path:
        bad = next(c for c in path if not _raw_in_target(c))
        return (
            f"the request target holds {bad!r}, which a client sends percent-encoded "
            f"({percent_encode(bad)})"
        )
    host = request.host
    if not (host.isascii() and host.isprintable()) or " " in host:
        return f"the Host {host!r} is not ASCII without spaces (IDNs are sent in punycode)"
    for name, values in request.headers:
        if not name or not _TCHAR.issuperset(name):
            return f"the header name {name!r} is not an HTTP token"
        for value in values:
            if value.isascii() and value.isprintable() and value.strip(" ") == value:
                continue  # nearly every value
            control = next((c for c in value if _control(c)), None)
            if control is not None:
                return f"the value of header {name!r} holds the control character {control!r}"
            if value.strip(" \t") != value:
                return (
                    f"the value of header {name!r} starts or ends with whitespace, "
                    "which the receiving codec strips"
                )
    return None


def percent_encode(text: str) -> str:
    """``text`` with what a request target cannot hold raw (non-ASCII as its UTF-8
    bytes, controls, space, DEL, '#') written as %XX, as a client encodes a URL."""
    out = []
    for ch in text:
        if _raw_in_target(ch):
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


def sendable_value(value: str) -> str:
    """``value`` as a header can carry it: no control characters, no leading or
    trailing whitespace (the receiving codec strips it)."""
    kept = "".join(c for c in value if not _control(c))
    return kept.strip(" \t")


@dataclass(frozen=True)
class ClientCert:
    """The certificate a client presents in the TLS handshake.

    ``issuer`` is the SHA-256 fingerprint of the CA certificate that signed it
    (``verifier.semantics.pem``). ``uri_sans`` are its URI subject alternative names
    (a mesh workload's SPIFFE ID), which SAN matchers read; None: not known, and
    SAN matchers are then not judged. The files are what the live pass sends; they
    do not change what the models decide, so they take no part in equality.
    """

    issuer: str
    cert_file: str = field(default="", compare=False)
    key_file: str = field(default="", compare=False)
    uri_sans: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        if self.uri_sans is None:
            return {"issuer": self.issuer}
        return {"issuer": self.issuer, "uri_sans": list(self.uri_sans)}


@dataclass(frozen=True, slots=True, order=True)
class Source:
    """The client of a mesh request: the workload (Deployment, StatefulSet or
    DaemonSet) whose pod sends it, and its namespace. Which mesh routes apply, and
    whether its sidecar sees the request at all, depend on it (docs/mesh.md)."""

    namespace: str
    workload: str

    def line(self) -> str:
        return f"{self.namespace}/{self.workload}"

    def to_json(self) -> dict[str, str]:
        return {"namespace": self.namespace, "workload": self.workload}


@dataclass(frozen=True, slots=True)
class Request:
    """A request as it arrives at a Gateway, or, with a ``source``, as a mesh client
    sends it to a Service: a connection to ``address``:``port``.
    Slotted: check holds ~80,000 of them per 10,000 rules (12 MiB of ``__dict__``).

    ``address`` is the destination IP (the Gateway's address, or the Service's
    ClusterIP for a mesh request; empty when unknown, which Envoy cannot be, so the
    Envoy model then takes the port's only or wildcard listener). ``path`` is the
    request target (path plus optional ``?query``); ``host`` is the Host/:authority
    header as sent (it may carry a port). ``source``: the client workload of a mesh
    request; None for a request sent to a Gateway (from outside the mesh).
    """

    method: str = "GET"
    scheme: str = "http"
    host: str = ""
    port: int = 80
    address: str = ""
    # The port the proxy really listens on for this Gateway port, when it is another
    # one (Envoy Gateway serves port 80 on 10080); 0: the Gateway port itself.
    proxy_port: int = 0

    @property
    def listener_port(self) -> int:
        """The destination port of the connection, as the proxy sees it."""
        return self.proxy_port or self.port

    path: str = "/"
    headers: Headers = ()
    sni: str | None = None  # TLS server name; None: the Host's hostname
    client_cert: ClientCert | None = None  # presented in the TLS handshake
    source: Source | None = None  # the mesh client; None: sent to a Gateway

    @property
    def mesh(self) -> bool:
        """A request a mesh client sends to a Service's frontend (docs/mesh.md)."""
        return self.source is not None

    @property
    def path_only(self) -> str:
        return self.path.split("?", 1)[0]

    @property
    def query(self) -> str:
        return self.path.split("?", 1)[1] if "?" in self.path else ""

    @property
    def hostname(self) -> str:
        """Host without a port: "Implementations MUST ignore any port value"."""
        host = self.host
        if host.startswith("["):
            return host.split("]", 1)[0] + "]"
        return host.rsplit(":", 1)[0] if ":" in host else host

    def header(self, name: str) -> tuple[str, ...]:
        lname = name.lower()
        return next((v for k, v in self.headers if k == lname), ())

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "method": self.method,
            "scheme": self.scheme,
            "host": self.host,
            "port": self.port,
            "address": self.address,
            "proxy_port": self.proxy_port or None,
            "path": self.path,
            "headers": headers_to_json(self.headers),
            "sni": self.sni,
            "client_cert": None if self.client_cert is None else self.client_cert.to_json(),
        }
        if self.source is not None:  # only then: an edge request's JSON is as it was
            out["source"] = self.source.to_json()
        return out

    def line(self) -> str:
        """`curl`-like one-liner used in findings and explain output."""
        hdrs = "".join(f" -H '{k}: {v}'" for k, vs in self.headers for v in vs)
        cert = (
            f" (client certificate issued by CA {self.client_cert.issuer[:12]})"
            if self.client_cert is not None
            else ""
        )
        target = f"{self.scheme}://{self.host}{self.path}"
        to = f"to {self.address}:{self.listener_port}" if self.address else f"port {self.port}"
        if self.source is not None:
            to = f"from {self.source.line()} {to}"
        return f"{self.method} {target} ({to}){hdrs}{cert}"


def host_header(address: str, port: int, scheme: str) -> str:
    """The Host a client sends when it is given only an address: the IP (bracketed
    for IPv6), with the port unless it is the scheme's default."""
    if not address:
        return ""
    host = f"[{address}]" if ":" in address else address
    default = 443 if scheme.lower() == "https" else 80
    return host if port == default else f"{host}:{port}"


# Where a Service's name resolves in the cluster: `<svc>.<ns>.svc.<CLUSTER_DOMAIN>`.
CLUSTER_DOMAIN = "cluster.local"


def service_host(namespace: str, name: str, port: int) -> str:
    """The Host a mesh client sends when it calls a Service by its name:
    ``<svc>.<ns>.svc.cluster.local``, with the port unless it is 80 (docs/mesh.md)."""
    host = f"{name}.{namespace}.svc.{CLUSTER_DOMAIN}"
    return host if port == 80 else f"{host}:{port}"


T = TypeVar("T")


def evolve(obj: T, **changes: Any) -> T:
    """``dataclasses.replace`` for the frozen, validator-free dataclasses here, without
    re-running ``__init__``: check stamps a destination on every witness (~140,000 at
    10,000 rules), where ``replace`` alone cost seconds on a loaded 2-core machine."""
    state = getattr(obj, "__dict__", None)
    if state is None:  # slotted
        copier = _COPIERS.get(type(obj))
        if copier is None:
            copier = _COPIERS[type(obj)] = _copier(type(obj))
        return copier(obj, changes)  # type: ignore[no-any-return]
    new = object.__new__(type(obj))
    new.__dict__.update(state)
    new.__dict__.update(changes)
    return new


_COPIERS: dict[type, Callable[[Any, dict[str, Any]], Any]] = {}


def _copier(cls: type) -> Callable[[Any, dict[str, Any]], Any]:
    """A copy function written for ``cls``'s fields, as ``dataclasses`` writes
    ``__init__``: a loop over the field names (with a lookup per name) took 5.2 us a
    Request, this 2.4 us, and the model evolves outcomes on every witness too."""
    names = [f.name for f in fields(cls)]
    lines = [
        "def copy(obj, changes):",
        "    if not NAMES.issuperset(changes):",
        "        raise TypeError(f'{CLS.__name__} has no field {sorted(changes.keys() - NAMES)}')",
        "    new = NEW(CLS)",
        *(f"    SET(new, {n!r}, changes[{n!r}] if {n!r} in changes else obj.{n})" for n in names),
        "    return new",
    ]
    scope: dict[str, Any] = {
        "NEW": object.__new__,
        "SET": object.__setattr__,
        "CLS": cls,
        "NAMES": frozenset(names),
    }
    exec("\n".join(lines), scope)  # the field names of our own dataclasses
    return scope["copy"]  # type: ignore[no-any-return]


def sent_to(request: Request, address: str) -> Request:
    """``request`` as a client sends it to a Gateway at ``address``: the connection
    goes there, and an empty Host becomes that address (cases.yaml: "host: ...
    default: the Gateway address")."""
    host = request.host or host_header(address, request.port, request.scheme)
    if address == request.address and host == request.host:
        return request
    return evolve(request, address=address, host=host)


@dataclass(frozen=True, order=True)
class Backend:
    """A Service port that receives the request; ``weight`` is its share."""

    namespace: str
    name: str
    port: int
    weight: int = 1
    # Other Service ports the same endpoints stand for, (namespace, name, port):
    # xDS that dials pod IPs does not say which of the Services sharing those pods
    # it means, so any of them is the backend the spec may name.
    aliases: tuple[tuple[str, str, int], ...] = field(default=(), compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "port": self.port,
            "weight": self.weight,
        }


@dataclass(frozen=True)
class Forwarded:
    """The request as the backend receives it; ``path`` keeps the query string."""

    method: str
    host: str
    path: str
    headers: Headers

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "host": self.host,
            "path": self.path,
            "headers": headers_to_json(self.headers),
        }


@dataclass(frozen=True)
class RedirectTarget:
    """Where a redirect's Location points.

    ``port`` is the effective port: the one written in Location, or the
    scheme's default (80/443) when Location has none, so that `http://a/` and
    `http://a:80/` compare equal. ``path`` is the URL path without the query.
    """

    scheme: str
    host: str
    port: int | None
    path: str

    def to_json(self) -> dict[str, Any]:
        return {"scheme": self.scheme, "host": self.host, "port": self.port, "path": self.path}


@dataclass(frozen=True)
class RouteRef:
    """Which rule decided; informational, not part of the agreement check."""

    xds_name: str | None = None
    httproute: str | None = None  # "namespace/name"
    rule: int | None = None
    match: int | None = None
    xds_path: str | None = None  # e.g. routes[edge-80].virtual_hosts[foo].routes[3]

    def to_json(self) -> dict[str, Any]:
        return {
            "xds_name": self.xds_name,
            "httproute": self.httproute,
            "rule": self.rule,
            "match": self.match,
            "xds_path": self.xds_path,
        }


@dataclass(frozen=True)
class Caveat:
    """Something an answer rests on that the model assumes rather than knows.

    ``subject`` is what the answer depends on (an xDS element, or a fact about the
    request such as the client's address); ``assumption`` what the model took in its
    place. ``decides``: the answer would be another without the assumption, so it
    cannot be judged (check counts it unjudged); False when the model gives every
    answer the request may get (a runtime_fraction share) and only says so.
    """

    subject: str
    assumption: str
    decides: bool = True

    def line(self) -> str:
        lead = "assumes" if self.decides else "note"
        return f"{lead}: {self.subject}: {self.assumption}"

    def to_json(self) -> dict[str, Any]:
        return {"subject": self.subject, "assumption": self.assumption, "decides": self.decides}


@dataclass(frozen=True)
class Outcome:
    """What happens to a request.

    ``status`` is what the client sees when the proxy answers itself (404, 500,
    3xx, CORS preflight 200) or 200 when it forwards to a backend. With weighted
    backends, ``backends`` holds every Service with a positive share that has a
    ready endpoint (sorted), ``invalid_weight`` the share answered with 500 (an
    invalid backendRef) and ``unavailable_weight`` the share answered with 503 (a
    backend with no ready endpoint: "implementations SHOULD return a 503 for
    requests to that backend"), all on one scale (``shares.status_shares``).

    ``request`` is the request as forwarded: its headers are the client's
    headers after the configured modifications only (Envoy's own x-forwarded-*,
    x-request-id and x-envoy-* headers are not modelled), without Host, which
    is ``request.host``. ``response_headers`` are the response headers the
    configuration adds or sets (header modifiers, CORS); names it removes are in
    ``response_headers_removed``, and the operations in ``response_header_ops``.
    ``caveats`` say what the answer assumes rather than knows (``explain``
    shows them). ``mirrors`` carry their share in parts per million as weight
    (0% mirrors are left out; mirrors and timeouts only on forwarded outcomes). Timeouts are in
    milliseconds; None means the proxy's default. A 500 because every backend is
    invalid has ``invalid_weight`` > 0, a 503 because no backend has a ready
    endpoint ``unavailable_weight`` > 0. ``status`` 0 means no HTTP response at
    all (no listener on the port, TLS handshake failure).
    """

    status: int
    backends: tuple[Backend, ...] = ()
    invalid_weight: int = 0
    unavailable_weight: int = 0
    request: Forwarded | None = None
    response_headers: Headers = ()
    response_headers_removed: tuple[str, ...] = ()  # lower-cased names
    # The ordered operations behind response_headers, (op, lower-cased name,
    # value) with op in RESPONSE_OPS: two models agree on responses when the ops
    # give the same headers on every upstream response (see apply_response_ops).
    response_header_ops: tuple[tuple[str, str, str], ...] = field(default=(), compare=False)
    redirect: RedirectTarget | None = None
    mirrors: tuple[Backend, ...] = ()
    request_timeout_ms: int | None = None
    backend_timeout_ms: int | None = None
    route: RouteRef | None = field(default=None, compare=False)
    notes: tuple[str, ...] = field(default=(), compare=False)
    # The TLS handshake may also fail: the client certificate's validity depends
    # on a CA bundle the configuration does not hold (SDS, a file). The rest of
    # the outcome is what happens when it passes.
    may_refuse: bool = field(default=False, compare=False)
    # The answering route matches only a share of requests (a runtime_fraction
    # below 100%): what the rest get. The spec has no such routes, so every
    # possibility must meet it, not just the likelier one.
    otherwise: Outcome | None = field(default=None, compare=False)
    # What this answer rests on that the model assumes (Caveat); one that decides
    # the answer makes it unjudged.
    caveats: tuple[Caveat, ...] = field(default=(), compare=False)

    def possibilities(self) -> list[Outcome]:
        """This outcome, then each one the same request may get instead."""
        found = [self]
        while found[-1].otherwise is not None:
            found.append(found[-1].otherwise)
        return found

    def all_caveats(self) -> tuple[Caveat, ...]:
        """The caveats of every possible answer, each once."""
        if self.otherwise is None:
            return self.caveats
        return tuple(dict.fromkeys(c for o in self.possibilities() for c in o.caveats))

    @property
    def unjudged(self) -> bool:
        """Whether some possible answer rests on an assumption that decides it."""
        return any(c.decides for c in self.all_caveats())

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "backends": [b.to_json() for b in self.backends],
            "invalid_weight": self.invalid_weight,
            "unavailable_weight": self.unavailable_weight,
            "request": self.request.to_json() if self.request else None,
            "response_headers": headers_to_json(self.response_headers),
            "response_headers_removed": list(self.response_headers_removed),
            "redirect": self.redirect.to_json() if self.redirect else None,
            "mirrors": [b.to_json() for b in self.mirrors],
            "timeouts": {
                "request_ms": self.request_timeout_ms,
                "backend_ms": self.backend_timeout_ms,
            },
            "route": self.route.to_json() if self.route else None,
        }


RESPONSE_OPS = ("set", "add", "remove", "add-if-absent", "overwrite-if-exists")


def apply_response_ops(upstream: Headers, ops: tuple[tuple[str, str, str], ...]) -> Headers:
    """The headers a client gets when the backend sent ``upstream``."""
    headers = {k: list(v) for k, v in upstream}
    for op, name, value in ops:
        if op == "set":
            headers[name] = [value]
        elif op == "add":
            headers.setdefault(name, []).append(value)
        elif op == "add-if-absent":
            headers.setdefault(name, [value])
        elif op == "overwrite-if-exists":
            if name in headers:
                headers[name] = [value]
        else:
            headers.pop(name, None)
    return tuple(sorted((k, tuple(v)) for k, v in headers.items() if v))


@dataclass(frozen=True)
class Evaluation:
    """An outcome and the steps that led to it, for ``explain`` and findings."""

    outcome: Outcome
    trace: tuple[str, ...] = ()
