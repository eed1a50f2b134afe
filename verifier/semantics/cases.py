"""Cases: a Request plus what must happen to it, as in ``fixtures/*/cases.yaml``.

The same table drives the static check, the live pass and the fuzzer's
regression fixtures, so expectations are judged in one place against an
``Outcome`` from any source (a model or a live response). Fields mean what
Gateway API conformance's ExpectedResponse means. Pure: the caller reads files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from verifier.errors import InputErrors
from verifier.inputs import read_text
from verifier.semantics.pem import fingerprints
from verifier.semantics.request import (
    ClientCert,
    Headers,
    Outcome,
    Request,
    headers_from_mapping,
    wire_problem,
)


class CaseError(ValueError):
    """A malformed case; ``field`` is the path inside the cases document."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class GatewayRef:
    namespace: str
    name: str
    port: int | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@dataclass(frozen=True)
class Expectation:
    statuses: tuple[int, ...] = (200,)
    backends: tuple[str, ...] = ()  # acceptable pod-name prefixes
    namespace: str | None = None
    request_host: str | None = None
    request_path: str | None = None
    request_headers: Headers = ()
    request_absent: tuple[str, ...] = ()
    response_headers: Headers = ()
    response_absent: tuple[str, ...] = ()
    redirect: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Case:
    name: str
    gateway: GatewayRef
    request: Request
    expect: Expectation
    index: int = field(default=0, compare=False)


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise CaseError(where, "expected a mapping")
    return value


# Every key a cases table may use, per level: the static check's and the live pass's
# (fixtures/README.md). A key outside these is a typo, and a typo must not turn into
# a default ("requesst:" sent as GET /, "statuss:" expecting 200).
KEYS: Final[dict[str, frozenset[str]]] = {
    "": frozenset({"name", "gateway", "request", "expect", "samples"}),
    "gateway": frozenset({"namespace", "name", "port"}),
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
            raise CaseError(at, f"unknown key; expected one of {', '.join(sorted(allowed))}")


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
    from verifier.semantics.live_fields import check_live_fields  # it raises CaseError

    where = f"[{index}]"
    item = _mapping(data, where)
    _known_keys(item, where)
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise CaseError(f"{where}.name", "required: a unique case name")
    gw = _mapping(item.get("gateway"), f"{where}.gateway")
    if not gw.get("name") or not gw.get("namespace"):
        raise CaseError(f"{where}.gateway", "expected {namespace, name, port?}")
    port = gw.get("port", default_port)
    port_num = None if port is None else _int(port, f"{where}.gateway.port")
    gateway = GatewayRef(str(gw["namespace"]), str(gw["name"]), port_num)
    req = _mapping(item.get("request"), f"{where}.request")
    path = str(req.get("path", "/"))
    if not path.startswith("/"):
        raise CaseError(f"{where}.request.path", f"must start with '/', got {path!r}")
    request = Request(
        method=str(req.get("method", "GET")),
        scheme=str(req.get("scheme", "http")),
        host=str(req.get("host", "")),
        port=gateway.port or 0,
        path=path,
        headers=headers_from_mapping(_mapping(req.get("headers"), f"{where}.request.headers")),
        sni=None if req.get("sni") is None else str(req["sni"]),
        client_cert=_client_cert(req.get("client_cert"), f"{where}.request.client_cert", base_dir),
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
    )
    check_live_fields(item, where)  # read here too, so that a typo fails every command
    return Case(name, gateway, request, expect, index)


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


def possible_statuses(outcome: Outcome) -> set[int]:
    statuses = {outcome.status}
    if outcome.invalid_weight and outcome.backends:
        statuses.add(500)
    if outcome.may_refuse:
        statuses.add(0)  # NO_RESPONSE: the handshake may fail
    return statuses


def _check_headers(
    kind: str, expected: Headers, absent: tuple[str, ...], actual: Headers
) -> list[str]:
    have = dict(actual)
    problems = []
    for name, values in expected:
        got = have.get(name)
        if got is None:
            problems.append(f"{kind} header {name!r} missing (expected {list(values)})")
        elif list(got) != list(values) and ",".join(got) != ",".join(values):
            problems.append(f"{kind} header {name!r} is {list(got)}, expected {list(values)}")
    for name in absent:
        if name.lower() in have:
            problems.append(f"{kind} header {name!r} present, expected absent")
    return problems


DEFAULT_PORTS = {"http": 80, "https": 443}


def _check_redirect(want: Mapping[str, Any], outcome: Outcome, request: Request) -> list[str]:
    """Omitted scheme/path mean the request's; omitted port the scheme's default."""
    red = outcome.redirect
    if red is None:
        return ["no redirect, expected one"]
    scheme = str(want.get("scheme", request.scheme))
    expected = {
        "scheme": scheme,
        "host": want.get("host", red.host),
        "port": int(want.get("port") or DEFAULT_PORTS.get(scheme, 0)),
        "path": str(want.get("path", request.path_only)),
    }
    # Host names compare case-insensitively, as outcome_diff compares the models'
    # (found by the fuzzer: Envoy writes Location's host lower-cased, the spec model
    # keeps the request's, and a case recorded from either must accept the other).
    return [
        f"redirect {key} {getattr(red, key)!r}, expected {value!r}"
        for key, value in expected.items()
        if (_folded(getattr(red, key)) if key == "host" else getattr(red, key))
        != (_folded(value) if key == "host" else value)
    ]


def _folded(host: object) -> object:
    return host.lower() if isinstance(host, str) else host


def unmet(expect: Expectation, outcome: Outcome, request: Request) -> list[str]:
    """Why ``outcome`` does not meet ``expect``; empty when it does. Every outcome the
    request may get must meet it (a route with a runtime_fraction answers only some)."""
    problems = _unmet(expect, outcome, request)
    for other in outcome.possibilities()[1:]:
        problems += [
            f"when a runtime_fraction passes the request on: {p}"
            for p in _unmet(expect, other, request)
        ]
    return problems


def _unmet(expect: Expectation, outcome: Outcome, request: Request) -> list[str]:
    problems: list[str] = []
    statuses = possible_statuses(outcome)
    if not statuses <= set(expect.statuses):
        problems.append(f"status {sorted(statuses)}, expected {list(expect.statuses)}")
    if expect.backends:
        names = [b.name for b in outcome.backends]
        stray = [n for n in names if not any(n.startswith(p) for p in expect.backends)]
        if not names or stray:
            problems.append(f"backends {names}, expected {list(expect.backends)}")
    if expect.namespace is not None and any(
        b.namespace != expect.namespace for b in outcome.backends
    ):
        problems.append(
            f"backend namespace {sorted({b.namespace for b in outcome.backends})}, "
            f"expected {expect.namespace}"
        )
    fwd = outcome.request
    if expect.request_host is not None or expect.request_path is not None or expect.request_headers:
        if fwd is None:
            problems.append("the request was not forwarded to a backend")
        else:
            if expect.request_host is not None and fwd.host != expect.request_host:
                problems.append(f"backend saw host {fwd.host!r}, expected {expect.request_host!r}")
            if expect.request_path is not None and fwd.path != expect.request_path:
                problems.append(f"backend saw path {fwd.path!r}, expected {expect.request_path!r}")
    if fwd is not None:
        problems += _check_headers(
            "request", expect.request_headers, expect.request_absent, fwd.headers
        )
    problems += _check_headers(
        "response", expect.response_headers, expect.response_absent, outcome.response_headers
    )
    if expect.redirect is not None:
        problems += _check_redirect(expect.redirect, outcome, request)
    return problems
