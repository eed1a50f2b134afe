"""The spec model against every scenario's cases.yaml, plus focused unit tests.

Each case is a Request and what the Gateway API requires for it; the spec
model must meet every expectation. Some expectations depend on the echo
backend's own behaviour (``?delay=``, ``X-Echo-Set-Header``, the ``/ws``
WebSocket handshake, see fixtures/README.md): ``_client_view`` composes the
model's outcome with that documented behaviour, explicitly, so those cases are
judged rather than skipped. Fields ``parse_cases`` does not read
(``header_lists``, ``valid_header_values``, mirrors, ratios, method, proto) are
checked here from the raw case.
"""

from __future__ import annotations

import dataclasses
import gc
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import (
    BASE,
    GATEWAY_NS_GW,
    MESH_REGISTRY,
    edge_scenarios,
    scenario_params,
    valid_scenarios,
)

from verifier.destinations import Destinations
from verifier.gatewayapi.addresses import Addressing
from verifier.gatewayapi.load import load_texts
from verifier.gatewayapi.mesh_registry import load_mesh_registry
from verifier.gatewayapi.model import PathModifier, Redirect
from verifier.gatewayapi.resources import Resources, build, load_resources
from verifier.live.echo_model import spec_client_view
from verifier.pipeline import with_ports
from verifier.semantics.cases import Case, parse_cases, unmet
from verifier.semantics.request import Outcome, Request
from verifier.semantics.spec import model as spec_module
from verifier.semantics.spec.backends import duration_ms
from verifier.semantics.spec.cors import origin_allowed
from verifier.semantics.spec.filters import modify_path, redirect_target
from verifier.semantics.spec.hostnames import (
    hostname_matches,
    intersect,
    listener_specificity,
    route_hostname_key,
)
from verifier.semantics.spec.index import path_segment, regex_segment
from verifier.semantics.spec.match import regex_full_match
from verifier.semantics.spec.mesh import spec_evaluate_mesh
from verifier.semantics.spec.model import (
    NO_RESPONSE,
    SpecModel,
    default_port,
    index_for,
    spec_evaluate,
    spec_evaluate_scan,
)
from verifier.semantics.witness import witnesses

# ------------------------------------------------------------ echo-basic behaviour


def _app_protocol(res: Resources, outcome: Outcome) -> set[str | None]:
    found: set[str | None] = set()
    for b in outcome.backends:
        svc = res.services[(b.namespace, b.name)]
        found |= {p.app_protocol for p in svc.ports if p.port == b.port}
    return found


def _client_view(res: Resources, gateway: tuple[str, str], req: Request, out: Outcome) -> Outcome:
    """What the client sees: the model's outcome composed with echo-basic (the
    shared ``verifier.live.echo_model`` behaviour that check and explain use)."""
    return spec_client_view(res, req, out)


# ------------------------------------------------------------ raw-case checks


def _list_items(value: str) -> set[str]:
    return {v.strip() for v in value.split(",") if v.strip()}


def _extra_problems(res: Resources, raw: dict[str, Any], req: Request, out: Outcome) -> list[str]:
    """Expectations ``unmet`` does not read, judged on what the model decides."""
    exp = raw.get("expect") or {}
    problems: list[str] = []
    resp = dict(out.response_headers)
    response = exp.get("response") or {}
    for name, allowed in (response.get("valid_header_values") or {}).items():
        got = ",".join(resp.get(name.lower(), ()))
        if got not in [str(a) for a in allowed]:
            problems.append(f"response header {name} is {got!r}, expected one of {allowed}")
    for name, items in (response.get("header_lists") or {}).items():
        got_items = _list_items(",".join(resp.get(name.lower(), ())))
        if got_items != {str(i) for i in items}:
            problems.append(f"response header {name} lists {sorted(got_items)}, expected {items}")
    fwd = out.request
    ereq = exp.get("request") or {}
    if fwd is not None and out.status == 200:
        method = ereq.get("method", req.method)
        if fwd.method != method:
            problems.append(f"backend saw method {fwd.method}, expected {method}")
        if "path" not in ereq and fwd.path != req.path:
            problems.append(f"backend saw path {fwd.path!r}, expected the request's {req.path!r}")
        if "host" not in ereq and req.host and fwd.host != req.host:
            problems.append(f"backend saw host {fwd.host!r}, expected the request's {req.host!r}")
        if "proto" in ereq:
            proto = "HTTP/2.0" if _app_protocol(res, out) == {"kubernetes.io/h2c"} else "HTTP/1.1"
            if proto != ereq["proto"]:
                problems.append(f"backend protocol {proto}, expected {ereq['proto']}")
    problems += _share_problems(exp, out)
    return problems


def _share_problems(exp: dict[str, Any], out: Outcome) -> list[str]:
    """mirrored_to (every request), not_mirrored_to, and the sampled ratios."""
    problems: list[str] = []
    mirrors = {(m.namespace, m.name): m.weight / 1_000_000 for m in out.mirrors}
    for m in exp.get("mirrored_to") or []:
        if mirrors.get((m["namespace"], m["name"]), 0) != 1:
            problems.append(f"not every request is mirrored to {m['name']}: {mirrors}")
    for m in exp.get("not_mirrored_to") or []:
        if mirrors.get((m["namespace"], m["name"]), 0) > 0:
            problems.append(f"requests are mirrored to {m['name']}")
    for m in exp.get("mirrored_ratio") or []:
        share = mirrors.get((m["namespace"], m["name"]), 0)
        if abs(share - m["ratio"]) > m["tolerance"]:
            problems.append(f"mirror share to {m['name']} is {share}, expected {m['ratio']}")
    total = sum(b.weight for b in out.backends) + out.invalid_weight
    for status, want in (exp.get("status_ratio") or {}).items():
        share = out.invalid_weight / total if str(status) == "500" and total else 0.0
        if abs(share - want["ratio"]) > want["tolerance"]:
            problems.append(f"share of {status} is {share}, expected {want['ratio']}")
    valid = sum(b.weight for b in out.backends)
    for name, want in (exp.get("backend_ratio") or {}).items():
        share = sum(b.weight for b in out.backends if b.name.startswith(name)) / (valid or 1)
        if abs(share - want["ratio"]) > want["tolerance"]:
            problems.append(f"share of {name} is {share:.2f}, expected {want['ratio']}")
    return problems


def _case_problems(
    res: Resources, case: Case, raw: dict[str, Any], registry: frozenset[tuple[str, str]]
) -> list[str]:
    if case.mesh:
        return _mesh_case_problems(res, case, raw, registry)
    assert case.gateway is not None
    gateway = (case.gateway.namespace, case.gateway.name)
    req = case.request
    if case.gateway.port is None:
        port = default_port(res, gateway)
        assert port is not None, f"{case.name}: gateway port omitted but not unique"
        req = dataclasses.replace(req, port=port)
    model = spec_evaluate(res, gateway, req).outcome
    seen = _client_view(res, gateway, req, model)
    return unmet(case.expect, seen, req) + _extra_problems(res, raw, req, seen)


def _mesh_case_problems(
    res: Resources, case: Case, raw: dict[str, Any], registry: frozenset[tuple[str, str]]
) -> list[str]:
    """A mesh case, sent as every command sends it (``with_ports``, ``Destinations``),
    answered by the mesh spec model."""
    (case,) = with_ports(res, [case], "cases.yaml")
    req = Destinations.of(res, spec_module.DEFAULT_CONTROLLER, Addressing()).sent(
        case.parent_key, case.request
    )
    seen = spec_client_view(res, req, spec_evaluate_mesh(res, req, registry=registry).outcome)
    return unmet(case.expect, seen, req) + _extra_problems(res, raw, req, seen)


@pytest.mark.parametrize("scenario", scenario_params(valid_scenarios()))
def test_spec_model_meets_cases(scenario: Path) -> None:
    """Every case of every scenario, the mesh scenarios' mesh cases included."""
    res = load_resources([str(BASE), str(scenario)])
    registry_file = scenario / MESH_REGISTRY
    registry = load_mesh_registry(str(registry_file)) if registry_file.is_file() else frozenset()
    raw_cases = yaml.safe_load((scenario / "cases.yaml").read_text())
    failures = []
    for case in parse_cases(raw_cases, str(scenario)):
        problems = _case_problems(res, case, raw_cases[case.index], registry)
        if problems:
            failures.append(f"{case.name}: " + "; ".join(problems))
    assert not failures, f"{scenario.name}:\n  " + "\n  ".join(failures)


# ------------------------------------------------------------ focused unit tests

GATEWAY = GATEWAY_NS_GW
SERVICES = "".join(
    f"""---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: ns}}
spec: {{ports: [{{port: 8080}}]}}
"""
    for name in ("a", "b", "c")
)


def _route(name: str, rules: str, *, ns: str = "ns", ts: str | None = None, extra: str = "") -> str:
    stamp = f", creationTimestamp: '{ts}'" if ts else ""
    return f"""---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: {ns}{stamp}}}
spec:
  parentRefs: [{{name: gw, namespace: ns}}]
{extra}  rules:
{rules}"""


def _rule(backend: str, match: str = "{path: {type: PathPrefix, value: /}}") -> str:
    return f"  - matches: [{match}]\n    backendRefs: [{{name: {backend}, port: 8080}}]\n"


def _resources(*docs: str) -> Resources:
    return build(load_texts([("test.yaml", GATEWAY + SERVICES + "".join(docs))]))


def _served(res: Resources, path: str = "/", host: str = "h.example", **kw: Any) -> Outcome:
    request = Request(host=host, port=80, path=path, **kw)
    return spec_evaluate(res, ("ns", "gw"), request).outcome


def _backend(out: Outcome) -> str:
    return ",".join(b.name for b in out.backends) or f"status {out.status}"


def test_oldest_route_wins_then_namespace_name() -> None:
    res = _resources(
        _route("z-old", _rule("a"), ts="2024-01-01T00:00:00Z"),
        _route("a-new", _rule("b"), ts="2024-01-02T00:00:00Z"),
    )
    assert _backend(_served(res)) == "a"
    res = _resources(
        _route("bravo", _rule("a"), ts="2024-01-01T00:00:00Z"),
        _route("alpha", _rule("b"), ts="2024-01-01T00:00:00Z"),
        _route("zulu", _rule("c"), ns="aaa", ts="2024-01-01T00:00:00Z"),
    )
    out = _served(res)  # "aaa/zulu" < "ns/alpha"; aaa has no Service c: 500
    assert out.route is not None and out.route.httproute == "aaa/zulu"
    assert out.status == 500


def test_rule_order_then_match_order_within_a_route() -> None:
    two_matches = "{path: {type: PathPrefix, value: /x}}, {path: {type: PathPrefix, value: /x}}"
    res = _resources(_route("r", _rule("a", two_matches) + _rule("b", two_matches)))
    out = _served(res, "/x/y")
    assert _backend(out) == "a"
    assert out.route is not None and (out.route.rule, out.route.match) == (0, 0)


def test_path_type_order_exact_regex_prefix() -> None:
    res = _resources(
        _route(
            "r",
            _rule("c", "{path: {type: PathPrefix, value: /p/q}}")
            + _rule("b", "{path: {type: RegularExpression, value: '/p/.*'}}")
            + _rule("a", "{path: {type: Exact, value: /p/q}}"),
        )
    )
    assert _backend(_served(res, "/p/q")) == "a"
    assert _backend(_served(res, "/p/q/r")) == "b"  # implementation-specific: regex before prefix
    longer = _rule("c", "{path: {type: RegularExpression, value: '/p/q.*'}}")
    res = _resources(
        _route("r", _rule("b", "{path: {type: RegularExpression, value: '/p/.*'}}") + longer)
    )
    assert _backend(_served(res, "/p/q")) == "c"


def test_trailing_slash_prefix_counts_like_its_value_without_slash() -> None:
    res = _resources(
        _route(
            "r",
            _rule("a", "{path: {type: PathPrefix, value: /bar/}}")
            + _rule("b", "{path: {type: PathPrefix, value: /bar}}"),
        )
    )
    assert _backend(_served(res, "/bar")) == "a"  # tie on characters: first rule


def test_route_hostname_precedence_beats_longer_path() -> None:
    res = _resources(
        _route(
            "wild",
            _rule("a", "{path: {type: PathPrefix, value: /long/path}}"),
            extra="  hostnames: ['*.example.com']\n",
        ),
        _route("exact", _rule("b"), extra="  hostnames: [foo.example.com]\n"),
    )
    assert _backend(_served(res, "/long/path", host="foo.example.com")) == "b"
    assert _backend(_served(res, "/long/path", host="bar.example.com")) == "a"
    assert _served(res, "/", host="example.com").status == 404  # a wildcard never matches the apex


def test_unsupported_features_reject_the_route() -> None:
    retry = "  - backendRefs: [{name: a, port: 8080}]\n    retry: {attempts: 2}\n"
    ext = (
        "  - backendRefs: [{name: a, port: 8080}]\n"
        "    filters: [{type: ExtensionRef, extensionRef: {group: x.io, kind: F, name: f}}]\n"
    )
    for rules in (retry, ext):
        out = spec_evaluate(_resources(_route("r", rules)), ("ns", "gw"), Request(port=80))
        assert out.outcome.status == 404
        assert any("UnsupportedValue" in line for line in out.trace)


def test_foreign_gateway_class_and_unknown_port_get_no_response() -> None:
    res = _resources(_route("r", _rule("a")))
    assert spec_evaluate(res, ("ns", "gw"), Request(port=81)).outcome.status == NO_RESPONSE
    other = spec_evaluate(res, ("ns", "gw"), Request(port=80), controller_name="example.com/other")
    assert other.outcome.status == NO_RESPONSE


def test_hostname_matching() -> None:
    assert hostname_matches("*.example.com", "a.example.com")
    assert hostname_matches("*.example.com", "a.b.example.com")
    assert not hostname_matches("*.example.com", "example.com")
    assert hostname_matches("foo.example.com", "FOO.example.com.")
    assert not hostname_matches("foo.example.com", "a.foo.example.com")
    assert intersect("*.example.com", "foo.example.com") == "foo.example.com"
    assert intersect("foo.example.com", "*.example.com") == "foo.example.com"
    assert intersect("*.example.com", "*.foo.example.com") == "*.foo.example.com"
    assert intersect("*.example.com", "example.com") is None
    assert intersect(None, "*.x.io") == "*.x.io"
    order = sorted(
        ["", "*.example.com", "*.foo.example.com", "foo.example.com"], key=listener_specificity
    )
    assert order == ["foo.example.com", "*.foo.example.com", "*.example.com", ""]
    assert route_hostname_key(("foo.x.io", "*.x.io"), "foo.x.io") == (8, 8)
    assert route_hostname_key(("*.x.io",), "foo.x.io") == (0, 6)
    assert route_hostname_key(("",), "anything") == (0, 0)
    assert route_hostname_key(("*.x.io",), "x.io") is None


# (listener port, request scheme, redirect scheme, redirect port) -> (scheme, effective port)
REDIRECT_PORTS = [
    (80, "http", None, None, "http", 80),
    (8080, "http", None, None, "http", 8080),  # "scheme is empty ... the Gateway Listener port"
    (8080, "http", "https", None, "https", 443),  # "well-known port associated with the scheme"
    (8080, "http", "http", None, "http", 80),
    (8443, "https", None, None, "https", 8443),
    (8443, "https", None, 80, "https", 80),
    (80, "http", "https", 8443, "https", 8443),
]


@pytest.mark.parametrize(
    ("lport", "rscheme", "scheme", "port", "want_scheme", "want_port"), REDIRECT_PORTS
)
def test_redirect_port_defaults(
    lport: int, rscheme: str, scheme: str | None, port: int | None, want_scheme: str, want_port: int
) -> None:
    request = Request(scheme=rscheme, host="a.example:1234", port=lport, path="/p?q=1")
    target, _ = redirect_target(Redirect(scheme, None, None, port, 302), request, lport, None)
    assert (target.scheme, target.host, target.port, target.path) == (
        want_scheme,
        "a.example",
        want_port,
        "/p",
    )


# HTTPPathModifier.replacePrefixMatch table, verbatim.
PREFIX_TABLE = [
    ("/foo/bar", "/foo", "/xyz", "/xyz/bar"),
    ("/foo/bar", "/foo", "/xyz/", "/xyz/bar"),
    ("/foo/bar", "/foo/", "/xyz", "/xyz/bar"),
    ("/foo/bar", "/foo/", "/xyz/", "/xyz/bar"),
    ("/foo", "/foo", "/xyz", "/xyz"),
    ("/foo/", "/foo", "/xyz", "/xyz/"),
    ("/foo/bar", "/foo", "", "/bar"),
    ("/foo/", "/foo", "", "/"),
    ("/foo", "/foo", "", "/"),
    ("/foo/", "/foo", "/", "/"),
    ("/foo", "/foo", "/", "/"),
    ("/x/y", "/", "/api", "/api/x/y"),
]


@pytest.mark.parametrize(("path", "prefix", "replace", "want"), PREFIX_TABLE)
def test_replace_prefix_match_table(path: str, prefix: str, replace: str, want: str) -> None:
    assert modify_path(PathModifier("ReplacePrefixMatch", None, replace), path, prefix) == want


def test_durations_and_cors_origins() -> None:
    assert duration_ms("1m30s") == 90_000
    assert duration_ms("500ms") == 500
    assert duration_ms("0s") == 0
    assert duration_ms("1x") is None
    assert origin_allowed(("https://*.bar.com",), "https://a.b.bar.com")
    assert not origin_allowed(("https://*.bar.com",), "https://bar.com")
    assert not origin_allowed(("https://www.foo.com",), "https://www.foo.com:8443")
    assert origin_allowed(("https://www.foo.com",), "https://www.foo.com:443")
    assert not origin_allowed(("https://www.foo.com",), "http://www.foo.com")
    assert origin_allowed(("*",), "null")


HTTPS = """\
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: tls, namespace: ns}
spec:
  gatewayClassName: aether
  listeners:
  - name: wild
    port: 443
    protocol: HTTPS
    hostname: "*.example.com"
    tls: {certificateRefs: [{name: cert}]}
  - name: exact
    port: 443
    protocol: HTTPS
    hostname: exact.example.com
    tls: {certificateRefs: [{name: cert, namespace: other}]}
---
apiVersion: v1
kind: Secret
metadata: {name: cert, namespace: ns}
type: kubernetes.io/tls
stringData:
  tls.crt: "-----BEGIN CERTIFICATE-----"
  tls.key: "-----BEGIN PRIVATE KEY-----"
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: ns}
spec:
  parentRefs: [{name: tls}]
  rules: [{backendRefs: [{name: a, port: 8080}]}]
"""


def _tls(host: str, sni: str | None = None, extra: str = "") -> int:
    res = _resources(HTTPS + extra)
    request = Request(scheme="https", host=host, sni=sni, port=443)
    return spec_evaluate(res, ("ns", "tls"), request).outcome.status


def test_https_listener_selection_sni_host_and_certificates() -> None:
    assert _tls("a.example.com") == 200
    # The exact listener's Secret is in another namespace without a grant:
    # that listener is not programmed, so the wildcard one owns the name.
    assert _tls("exact.example.com") == 200
    assert _tls("other.org", sni="a.example.com") == 404  # SNI listener fine, Host matches none
    assert _tls("other.org") == NO_RESPONSE  # no listener for the SNI: handshake fails
    grant = """\
---
apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {name: g, namespace: other}
spec:
  from: [{group: gateway.networking.k8s.io, kind: Gateway, namespace: ns}]
  to: [{group: "", kind: Secret}]
---
apiVersion: v1
kind: Secret
metadata: {name: cert, namespace: other}
type: kubernetes.io/tls
stringData:
  tls.crt: "-----BEGIN CERTIFICATE-----"
  tls.key: "-----BEGIN PRIVATE KEY-----"
"""
    assert _tls("exact.example.com", extra=grant) == 200
    assert _tls("exact.example.com", sni="a.example.com", extra=grant) == 421
    assert _tls("a.example.com", sni="exact.example.com", extra=grant) == 421


# ------------------------------------------------------------ the index against the scan


def _decisive(trace: tuple[str, ...]) -> tuple[str, ...]:
    """From the winner (or the 404) on: the lines both ways must share verbatim."""
    starts = ("winner ", "no attached rule matches")
    first = next((i for i, line in enumerate(trace) if line.startswith(starts)), len(trace))
    return trace[first:]


def _index_disagreements(
    res: Resources, requests: list[tuple[tuple[str, str], Request]]
) -> list[str]:
    model = SpecModel(res)
    out = []
    for gateway, request in requests:
        indexed = model.evaluate(gateway, request)
        scanned = spec_evaluate_scan(res, gateway, request)
        cached = spec_evaluate(res, gateway, request)
        if indexed != cached:
            out.append(f"{request.line()}: SpecModel and spec_evaluate differ")
        if (indexed.outcome, _decisive(indexed.trace)) != (
            scanned.outcome,
            _decisive(scanned.trace),
        ):
            out.append(
                f"{gateway} {request.line()}:\n    index: {_decisive(indexed.trace)}"
                f"\n    scan:  {_decisive(scanned.trace)}"
            )
    return out


@pytest.mark.parametrize("scenario", scenario_params(edge_scenarios()))
def test_index_agrees_with_scan_on_every_witness(scenario: Path) -> None:
    """Same outcome, same winner, runner-up and action trace, for every witness
    request of the scenario and for its cases."""
    res = load_resources([str(BASE), str(scenario)])
    requests = [(w.gateway, w.request) for w in witnesses(res, "gateway.aether.io/edge")]
    raw_cases = yaml.safe_load((scenario / "cases.yaml").read_text())
    for case in parse_cases(raw_cases, str(scenario)):
        assert case.gateway is not None
        gateway = (case.gateway.namespace, case.gateway.name)
        port = case.gateway.port if case.gateway.port is not None else default_port(res, gateway)
        requests.append((gateway, dataclasses.replace(case.request, port=port or 80)))
    assert requests
    problems = _index_disagreements(res, requests)
    assert not problems, "\n".join(problems)


TRICKY_GATEWAY = """\
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: multi, namespace: ns}
spec:
  gatewayClassName: aether
  listeners:
  - {name: any, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}
  - {name: wild, port: 80, protocol: HTTP, hostname: "*.example.com"}
  - {name: deep, port: 80, protocol: HTTP, hostname: "*.a.example.com"}
  - {name: exact, port: 80, protocol: HTTP, hostname: foo.example.com}
  - {name: other, port: 81, protocol: HTTP, hostname: "*.example.com"}
"""
TRICKY_MATCHES = [
    "{path: {type: PathPrefix, value: /}}",
    "{path: {type: PathPrefix, value: /api/}}",
    "{path: {type: PathPrefix, value: /api/v1}}",
    "{path: {type: Exact, value: /api}}",
    "{path: {type: Exact, value: /}}",
    "{path: {type: Exact, value: /api/}}",
    "{path: {type: RegularExpression, value: '/api/v[0-9]+'}}",
    "{path: {type: RegularExpression, value: '/ap/?i.*'}}",
    "{path: {type: RegularExpression, value: '/x/|/api.*'}}",
    "{path: {type: RegularExpression, value: '(?i)/API/.*'}}",
    "{path: {type: RegularExpression, value: '/api//?x'}}",
    "{path: {type: RegularExpression, value: '/[a]pi/.*'}}",
    "{path: {type: PathPrefix, value: /api}, headers: [{name: x, value: '1'}], method: POST}",
    # Filed again by the second segment:
    "{path: {type: Exact, value: /api/v1/x}}",
    "{path: {type: RegularExpression, value: '/api/v1/[0-9]+'}}",
    "{path: {type: RegularExpression, value: '/api/v+/x'}}",
    "{path: {type: RegularExpression, value: '/api/v1'}}",
    "{path: {type: PathPrefix, value: /api/v2/deep}}",
    "{path: {type: RegularExpression, value: '/api//[0-9]'}}",
    "{path: {type: PathPrefix, value: /api/v1/}}",
]
TRICKY_HOSTNAMES = [
    "",
    "  hostnames: ['*.example.com']\n",
    "  hostnames: ['*.a.example.com', foo.example.com]\n",
    "  hostnames: [foo.example.com, 'bar.a.example.com', '*.example.com']\n",
    "  hostnames: [other.org, '*.org']\n",
    "  hostnames: ['*.b.a.example.com']\n",
]
TRICKY_HOSTS = [
    "foo.example.com", "FOO.EXAMPLE.COM.", "bar.a.example.com", "x.b.a.example.com",
    "a.example.com", "example.com", "other.org", "x.other.org", "q.example.com:8080", "",
]  # fmt: skip
TRICKY_PATHS = [
    "/", "/api", "/api/", "/api/v1", "/api/v12", "/api/v1x", "/apix", "/ap/i", "/api//x",
    "/api/x", "/API/v", "/x/", "/api?x=1", "//api", "api", "",
    "/api/v1/x", "/api/v1/7", "/api/v1/", "/api/v11/1", "/api/v2", "/api/v2/deep/er",
    "/api/v2/deeper", "/api//", "/api//7", "/api/vv/x", "/api/v/x",
]  # fmt: skip


def test_index_agrees_with_scan_on_tricky_hostnames_and_paths() -> None:
    routes = [
        _route(
            f"r{i}",
            "".join(_rule("abc"[j % 3], m) for j, m in enumerate(TRICKY_MATCHES[i % 4 :: 2])),
            ns="ns" if i % 2 else "aaa",
            ts=f"2024-01-0{1 + i % 3}T00:00:00Z",
            extra=hostnames,
        ).replace("{name: gw, namespace: ns}", "{name: multi, namespace: ns}")
        for i, hostnames in enumerate(TRICKY_HOSTNAMES * 2)
    ]
    res = _resources(TRICKY_GATEWAY, *routes)
    requests = [
        (("ns", "multi"), Request(method=meth, host=h, port=port, path=p, headers=hdrs))
        for h in TRICKY_HOSTS
        for p in TRICKY_PATHS
        for port in (80, 81)
        for meth, hdrs in (("GET", ()), ("POST", (("x", ("1",)),)))
    ]
    assert sum(spec_evaluate(res, g, r).outcome.status == 200 for g, r in requests) > 50
    problems = _index_disagreements(res, requests)
    assert not problems, "\n".join(problems)


REGEX_SEGMENTS = [
    ("/api/v[0-9]+", "api"),
    ("/r1/re4/[0-9]+", "r1"),
    ("//x", ""),
    ("/api/?x", None),  # the second "/" is optional: "/apix" starts with another segment
    ("/ap?i/x", None),
    ("/x/|/api/.*", None),
    ("(?i)/api/.*", None),
    ("/[a]pi/.*", None),
    ("/a.i/x", None),
    ("/api", None),
    ("^/api/x", "api"),  # a full match: the leading anchor says nothing
    ("^/api/x|/y/", None),
    ("/api/{2}", None),
]


@pytest.mark.parametrize(("pattern", "segment"), REGEX_SEGMENTS)
def test_regex_segment_only_when_every_match_has_it(pattern: str, segment: str | None) -> None:
    assert regex_segment(pattern) == segment
    samples = ["/api/v1", "/api/x", "/apix", "/x/", "/API/x", "/r1/re4/7", "//x", "/api//"]
    for path in samples:
        if segment is not None and regex_full_match(pattern, path):
            assert path_segment(path) == segment, (pattern, path)


def test_index_follows_a_new_resources_object_and_is_dropped_with_it() -> None:
    res = _resources(_route("r", _rule("a", "{path: {type: Exact, value: /x}}")))
    assert _served(res, "/x").status == 200
    index = index_for(res)
    assert index_for(res) is index
    res2 = _resources(_route("r", _rule("a", "{path: {type: Exact, value: /y}}")))
    assert _served(res2, "/x").status == 404
    assert index_for(res2) is not index
    del res
    gc.collect()
    assert all(entry[0]() is not None for entry in spec_module._INDEXES.entries.values())


def test_index_trace_summarises_skipped_routes() -> None:
    many = [
        _route(f"r{i}", _rule("a", f"{{path: {{type: Exact, value: /p{i}}}}}")) for i in range(30)
    ]
    broken = _route("zz", _rule("a"), extra="  hostnames: [other.example]\n").replace(
        "{name: gw, namespace: ns}", "{name: gw, namespace: ns, sectionName: nope}"
    )
    res = _resources(*many, broken)
    trace = spec_evaluate(res, ("ns", "gw"), Request(host="h.example", path="/p7")).trace
    assert "HTTPRoute ns/r7 serves host 'h.example': 1 matching match(es)" in trace
    assert any(line.startswith("29 of 30 HTTPRoute(s)") for line in trace)
    assert any("HTTPRoute ns/zz does not serve" in line for line in trace)
    assert not any("ns/r8" in line for line in trace)
