"""Cases: a Request plus what must happen to it, as in ``fixtures/*/cases.yaml``.

The same table drives the static check, the live pass and the fuzzer's
regression fixtures, so expectations are judged in one place
(``verifier.semantics.expect``) against an ``Outcome`` from any source (a model
or a live response). Fields mean what Gateway API conformance's
ExpectedResponse means. Parsing only; pure: the caller reads files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from verifier.errors import InputErrors
from verifier.inputs import read_text
from verifier.semantics.expect import (
    Expectation,
    HeaderLists,
    model_unmet,
    possible_statuses,
    unmet,
)
from verifier.semantics.pem import fingerprints
from verifier.semantics.request import (
    ClientCert,
    Request,
    Source,
    headers_from_mapping,
    wire_problem,
)
from verifier.semantics.shares import PodRef, Ratio
from verifier.suggest import closest

__all__ = [
    "LIVE_ONLY",
    "Case",
    "CaseError",
    "Expectation",
    "GatewayRef",
    "ServiceRef",
    "model_unmet",
    "parse_case",
    "parse_cases",
    "possible_statuses",
    "unmet",
]


class CaseError(ValueError):
    """A malformed case; ``field`` is the path inside the cases document."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class _Target:
    """What a case is sent to, and on which of its ports (None: not given)."""

    namespace: str
    name: str
    port: int | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


class GatewayRef(_Target):
    """The Gateway an edge case is sent to."""


class ServiceRef(_Target):
    """The Service a mesh case is sent to: its frontend is the ClusterIP and ``port``."""


# Expectations a cases table may state that no model's Outcome can show: the
# protocol the backend was spoken to in (echo's ``proto``) and what a WebSocket
# echoes after the handshake. Only the live pass judges them; check says so.
LIVE_ONLY: Final = ("expect.request.proto", "expect.websocket")


@dataclass(frozen=True)
class Case:
    """A request and what must happen to it. An edge case is sent to a ``gateway``; a
    mesh case to a ``service`` from the client workload ``request.source`` (exactly
    one of ``gateway`` and ``service`` is set)."""

    name: str
    gateway: GatewayRef | None
    request: Request
    expect: Expectation
    index: int = field(default=0, compare=False)
    # The expectations of LIVE_ONLY this case states (check leaves them to live).
    live_only: tuple[str, ...] = field(default=(), compare=False)
    service: ServiceRef | None = None

    @property
    def mesh(self) -> bool:
        """A mesh case: sent from a client workload to a Service (docs/mesh.md)."""
        return self.service is not None

    @property
    def parent_key(self) -> tuple[str, str]:
        """(namespace, name) of what the case is sent to: its Gateway, or its Service."""
        target = self.service or self.gateway
        assert target is not None  # parse_case sets exactly one
        return target.key

    @property
    def port(self) -> int | None:
        """The port the case names on its Gateway or Service (None: not given)."""
        target = self.service or self.gateway
        return None if target is None else target.port


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise CaseError(where, "expected a mapping")
    return value


# Every key a cases table may use, per level: the static check's and the live pass's
# (docs/cases.md). A key outside these is a typo, and a typo must not turn into
# a default ("requesst:" sent as GET /, "statuss:" expecting 200).
KEYS: Final[dict[str, frozenset[str]]] = {
    "": frozenset({"name", "gateway", "from", "service", "request", "expect", "samples"}),
    "gateway": frozenset({"namespace", "name", "port"}),
    "from": frozenset({"namespace", "workload"}),
    "service": frozenset({"namespace", "name", "port"}),
    "request": frozenset(
        {"method", "scheme", "host", "path", "headers", "protocol", "sni", "client_cert"}
    ),
    "expect": frozenset(
        {
            "status",
            "statuses",
            "backend",
            "backends",
            "namespace",
            "request",
            "response",
            "redirect",
            "websocket",
            "status_ratio",
            "backend_ratio",
            "mirrored_to",
            "not_mirrored_to",
            "mirrored_ratio",
        }
    ),
    "expect.request": frozenset({"host", "path", "method", "headers", "absent_headers", "proto"}),
    "expect.response": frozenset(
        {"headers", "absent_headers", "valid_header_values", "header_lists"}
    ),
    "expect.redirect": frozenset({"scheme", "host", "port", "path"}),
    "expect.websocket": frozenset({"messages"}),
}


def _known_keys(item: Mapping[str, Any], where: str) -> None:
    """Refuse a key no level of a case knows, naming where it is."""
    for level, allowed in KEYS.items():
        node: Any = item
        for part in filter(None, level.split(".")):
            node = node.get(part) if isinstance(node, Mapping) else None
        if not isinstance(node, Mapping):
            continue
        unknown = sorted(str(k) for k in node if k not in allowed)
        if unknown:
            at = f"{where}.{level}.{unknown[0]}" if level else f"{where}.{unknown[0]}"
            raise unknown_key(at, unknown[0], allowed)


def unknown_key(at: str, key: str, allowed: Iterable[str]) -> CaseError:
    """A key no case knows at ``at``: the one meant when one is close (``staus``:
    ``status``), then every key allowed there."""
    names = sorted(allowed)
    near = closest(key, names)
    meant = f"did you mean {near!r}? " if near else ""
    return CaseError(at, f"unknown key; {meant}expected one of {', '.join(names)}")


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise CaseError(where, f"expected an integer, got {value!r}")
    try:
        return int(value)
    except ValueError:
        raise CaseError(where, f"expected an integer, got {value!r}") from None


def _strs(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise CaseError(where, "expected a list of strings")
    return tuple(str(v) for v in value)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CaseError(where, f"expected a number, got {value!r}")
    return float(value)


def _ratio(value: Any, where: str, extra: frozenset[str] = frozenset()) -> Ratio:
    """``{ratio: 0.7, tolerance: 0.15}``: a share from 0 to 1 and how far off it may be."""
    spec = _mapping(value, where)
    unknown = sorted(str(k) for k in set(spec) - {"ratio", "tolerance"} - extra)
    if unknown:
        raise unknown_key(f"{where}.{unknown[0]}", unknown[0], {"ratio", "tolerance", *extra})
    if "ratio" not in spec:
        raise CaseError(f"{where}.ratio", "required: the expected share, from 0 to 1")
    return Ratio(
        _number(spec["ratio"], f"{where}.ratio"),
        _number(spec.get("tolerance", 0), f"{where}.tolerance"),
    )


def _pod(value: Any, where: str) -> PodRef:
    spec = _mapping(value, where)
    if not spec.get("name") or not spec.get("namespace"):
        raise CaseError(where, "expected {name, namespace} of an echo pod")
    return PodRef(str(spec["namespace"]), str(spec["name"]))


def _pods(value: Any, where: str) -> tuple[PodRef, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise CaseError(where, "expected a list of {name, namespace}")
    return tuple(_pod(v, f"{where}[{i}]") for i, v in enumerate(value))


def _header_lists(value: Any, where: str) -> HeaderLists:
    return tuple(
        (str(k).lower(), _strs(v, f"{where}.{k}")) for k, v in _mapping(value, where).items()
    )


def _shares(exp: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The ratio expectations of ``expect`` (docs/cases.md, "Sampled cases")."""
    statuses = _mapping(exp.get("status_ratio"), f"{where}.status_ratio")
    backends = _mapping(exp.get("backend_ratio"), f"{where}.backend_ratio")
    mirrored = exp.get("mirrored_ratio")
    if mirrored is not None and not isinstance(mirrored, list):
        raise CaseError(
            f"{where}.mirrored_ratio", "expected a list of {name, namespace, ratio, tolerance}"
        )
    pod_keys = frozenset({"name", "namespace"})
    return {
        "status_ratio": tuple(
            (_int(k, f"{where}.status_ratio"), _ratio(v, f"{where}.status_ratio.{k}"))
            for k, v in statuses.items()
        ),
        "backend_ratio": tuple(
            (str(k), _ratio(v, f"{where}.backend_ratio.{k}")) for k, v in backends.items()
        ),
        "mirrored_ratio": tuple(
            (
                _pod(m, f"{where}.mirrored_ratio[{i}]"),
                _ratio(m, f"{where}.mirrored_ratio[{i}]", pod_keys),
            )
            for i, m in enumerate(mirrored or [])
        ),
    }


def _client_cert(value: Any, where: str, base_dir: str | None) -> ClientCert | None:
    """``client_cert: {issuer: ca.crt, cert: client.crt, key: client.key}``, files
    relative to the cases file. The issuer's fingerprint is what the models
    compare; the certificate and key are what the live pass presents."""
    if value is None:
        return None
    spec = _mapping(value, where)
    unknown = sorted(set(spec) - {"issuer", "cert", "key"})
    if unknown:
        raise CaseError(f"{where}.{unknown[0]}", "expected only issuer, cert and key")
    files: dict[str, str] = {}
    for key in ("issuer", "cert", "key"):
        name = spec.get(key)
        if key == "issuer" and not isinstance(name, str):
            raise CaseError(f"{where}.issuer", "required: the PEM file of the issuing CA")
        if name is None:
            continue
        if not isinstance(name, str) or not name:
            raise CaseError(f"{where}.{key}", "expected a file name")
        files[key] = str(Path(base_dir or ".") / name)
    if ("cert" in files) != ("key" in files):
        raise CaseError(where, "cert and key go together (the live pass presents both)")
    try:
        issuer_pem = read_text(files["issuer"])
        for key in ("cert", "key"):
            if key in files:
                read_text(files[key])
    except InputErrors as exc:
        first = exc.errors[0]
        raise CaseError(f"{where}", f"unreadable file {first.file}: {first.message}") from None
    found = fingerprints(issuer_pem)
    if not found:
        raise CaseError(f"{where}.issuer", f"{files['issuer']} holds no PEM certificate")
    return ClientCert(found[0], files.get("cert", ""), files.get("key", ""))


def parse_case(
    data: Any, index: int, default_port: int | None = None, base_dir: str | None = None
) -> Case:
    # it raises CaseError
    from verifier.semantics.live_fields import check_live_fields, check_mesh_fields

    where = f"[{index}]"
    item = _mapping(data, where)
    _known_keys(item, where)
    # The fields only live reads (samples, ratios, mirrors, protocol), with their
    # bounds, first: so that a typo fails every command, at its own field.
    check_live_fields(item, where)
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise CaseError(f"{where}.name", "required: a unique case name")
    gateway, service, source = _target(item, where, default_port)
    if source is not None:  # before a client_cert's files are read
        check_mesh_fields(item, where)
    port_num = service.port if service is not None else gateway.port if gateway else None
    req = _mapping(item.get("request"), f"{where}.request")
    path = str(req.get("path", "/"))
    if not path.startswith("/"):
        raise CaseError(f"{where}.request.path", f"must start with '/', got {path!r}")
    request = Request(
        method=str(req.get("method", "GET")),
        scheme=str(req.get("scheme", "http")),
        host=str(req.get("host", "")),
        port=port_num or 0,
        path=path,
        headers=headers_from_mapping(_mapping(req.get("headers"), f"{where}.request.headers")),
        sni=None if req.get("sni") is None else str(req["sni"]),
        client_cert=_client_cert(req.get("client_cert"), f"{where}.request.client_cert", base_dir),
        source=source,
    )
    problem = wire_problem(request)
    if problem is not None:
        raise CaseError(f"{where}.request", f"not a request HTTP/1.1 can carry: {problem}")
    exp = _mapping(item.get("expect"), f"{where}.expect")
    if "statuses" in exp:
        if not isinstance(exp["statuses"], list) or not exp["statuses"]:
            raise CaseError(f"{where}.expect.statuses", "expected a non-empty list of status codes")
        statuses = tuple(_int(s, f"{where}.expect.statuses") for s in exp["statuses"])
    else:
        statuses = (_int(exp.get("status", 200), f"{where}.expect.status"),)
    backends = _strs(exp.get("backends"), f"{where}.expect.backends")
    if exp.get("backend"):
        backends = (str(exp["backend"]), *backends)
    ereq = _mapping(exp.get("request"), f"{where}.expect.request")
    eresp = _mapping(exp.get("response"), f"{where}.expect.response")
    redirect = exp.get("redirect")
    if isinstance(redirect, Mapping) and redirect.get("port") is not None:
        redirect = {**redirect, "port": _int(redirect["port"], f"{where}.expect.redirect.port")}
    expect = Expectation(
        statuses=statuses,
        backends=backends,
        namespace=None if exp.get("namespace") is None else str(exp["namespace"]),
        request_host=None if ereq.get("host") is None else str(ereq["host"]),
        request_path=None if ereq.get("path") is None else str(ereq["path"]),
        request_headers=headers_from_mapping(
            _mapping(ereq.get("headers"), f"{where}.expect.request.headers")
        ),
        request_absent=_strs(ereq.get("absent_headers"), f"{where}.expect.request.absent_headers"),
        response_headers=headers_from_mapping(
            _mapping(eresp.get("headers"), f"{where}.expect.response.headers")
        ),
        response_absent=_strs(
            eresp.get("absent_headers"), f"{where}.expect.response.absent_headers"
        ),
        redirect=None if redirect is None else _mapping(redirect, f"{where}.expect.redirect"),
        request_method=None if ereq.get("method") is None else str(ereq["method"]),
        valid_header_values=_header_lists(
            eresp.get("valid_header_values"), f"{where}.expect.response.valid_header_values"
        ),
        header_lists=_header_lists(
            eresp.get("header_lists"), f"{where}.expect.response.header_lists"
        ),
        mirrored_to=_pods(exp.get("mirrored_to"), f"{where}.expect.mirrored_to"),
        not_mirrored_to=_pods(exp.get("not_mirrored_to"), f"{where}.expect.not_mirrored_to"),
        **_shares(exp, f"{where}.expect"),
    )
    stated = {"expect.request.proto": ereq.get("proto"), "expect.websocket": exp.get("websocket")}
    live_only = tuple(key for key in LIVE_ONLY if stated[key] is not None)
    return Case(name, gateway, request, expect, index, live_only, service)


def _ref(
    item: Mapping[str, Any], key: str, names: tuple[str, str], where: str
) -> Mapping[str, Any]:
    """The ``key`` mapping of a case with both ``names`` given as non-empty strings."""
    spec = _mapping(item.get(key), f"{where}.{key}")
    for name in names:
        value = spec.get(name)
        if not isinstance(value, str) or not value:
            keys = ", ".join(names)
            raise CaseError(f"{where}.{key}.{name}", f"required: {{{keys}}} as non-empty strings")
    return spec


def _target(
    item: Mapping[str, Any], where: str, default_port: int | None
) -> tuple[GatewayRef | None, ServiceRef | None, Source | None]:
    """Where a case is sent: ``gateway`` (an edge case), or ``service`` from the client
    workload ``from`` (a mesh case). Exactly one of ``gateway`` and ``service``."""
    if ("gateway" in item) == ("service" in item):
        raise CaseError(
            f"{where}.service" if "gateway" in item else f"{where}.gateway",
            "give exactly one of gateway: {namespace, name, port?} (a request to a Gateway) "
            "and service: {namespace, name, port?} with from: {namespace, workload} "
            "(a mesh request)",
        )
    if "gateway" in item:
        if "from" in item:
            raise CaseError(
                f"{where}.from",
                "a request to a Gateway comes from outside the mesh: from goes with service",
            )
        gw = _mapping(item.get("gateway"), f"{where}.gateway")
        if not gw.get("name") or not gw.get("namespace"):
            raise CaseError(f"{where}.gateway", "expected {namespace, name, port?}")
        port = gw.get("port", default_port)
        port_num = None if port is None else _int(port, f"{where}.gateway.port")
        return GatewayRef(str(gw["namespace"]), str(gw["name"]), port_num), None, None
    if "from" not in item:
        raise CaseError(
            f"{where}.service",
            "a mesh case names its client too: from: {namespace, workload}",
        )
    svc = _ref(item, "service", ("namespace", "name"), where)
    client = _ref(item, "from", ("namespace", "workload"), where)
    port = svc.get("port")
    port_num = None if port is None else _int(port, f"{where}.service.port")
    if port_num is not None and not 1 <= port_num <= 65535:
        raise CaseError(f"{where}.service.port", f"expected a port from 1 to 65535, got {port_num}")
    service = ServiceRef(str(svc["namespace"]), str(svc["name"]), port_num)
    return None, service, Source(str(client["namespace"]), str(client["workload"]))


def parse_cases(data: Any, base_dir: str | None = None) -> list[Case]:
    """``base_dir``: where the files a case names (client certificates) are."""
    if data is None:
        return []
    if not isinstance(data, list):
        raise CaseError("", "a cases file is a YAML list of cases")
    cases = [parse_case(item, i, base_dir=base_dir) for i, item in enumerate(data)]
    seen: set[str] = set()
    for c in cases:
        if c.name in seen:
            raise CaseError(f"[{c.index}].name", f"duplicate case name {c.name!r}")
        seen.add(c.name)
    return cases
