"""Witness requests: concrete requests that exercise each HTTPRoute match and
its boundaries, so two models can be compared on the requests that matter.

Generation explores, it does not decide: it proposes requests for every
route/parentRef/hostname/match it sees, including ones the spec may reject
(unattached routes, other hosts); the models say what happens to them. Each
witness carries the feature it probes so a disagreement can be attributed to
the rule that owns that feature.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

# The stdlib's regex *parser* builds sample strings; matching is always RE2.
from re import _constants as sre_c  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Protocol

import re2

from verifier.gatewayapi import model as m
from verifier.gatewayapi.resources import Resources
from verifier.semantics import witness_pairs as wp
from verifier.semantics.pem import fingerprints
from verifier.semantics.request import (
    ClientCert,
    Headers,
    Request,
    evolve,
    normalize_headers,
    percent_encode,
    sendable_value,
)

# Feature tags (Gateway API feature names where one exists).
PATH = "HTTPRoute"  # core path matching
HEADER = "HTTPRouteHeaderMatching"
QUERY = "HTTPRouteQueryParamMatching"
METHOD = "HTTPRouteMethodMatching"
HOST = "HTTPRouteHostnames"
PRECEDENCE = "HTTPRouteMatchingPrecedence"
FILTERS = "HTTPRouteFilters"
CORS = "HTTPRouteCORS"
CASE = "case"  # a request from a cases.yaml table
MISDIRECTED = "GatewayHTTPSListenerDetectMisdirectedRequests"
FRONTEND = "GatewayFrontendClientCertificateValidation"
LISTENER_SET = "ListenerSet"

# The issuer of a client certificate no configuration trusts: the SHA-256 of no
# real CA certificate (the live pass presents a throw-away CA's certificate).
# The port a "Host with another port" witness names (the second when the request
# is sent to the first): a Service's usual second port.
OTHER_HOST_PORTS = (8080, 8081)

UNTRUSTED_ISSUER = hashlib.sha256(b"edge-verifier: a CA nobody trusts").hexdigest()


class WitnessMaker(Protocol):
    def __call__(
        self, feature: str, note: str, path: str, hdrs: list[tuple[str, str]], meth: str = ...
    ) -> Witness: ...


@dataclass(frozen=True, slots=True)
class Witness:
    """A request to send to ``gateway`` and why it was generated (slotted: there are
    ~80,000 per 10,000 rules)."""

    gateway: tuple[str, str]
    request: Request
    feature: str
    route: tuple[str, str] | None = None
    rule: int | None = None
    match: int | None = None
    note: str = ""


# ---------------------------------------------------------------- regex samples


def _sample(parsed: object, depth: int = 0) -> str:
    """One string the parsed regex accepts; simple constructs only."""
    out = []
    for op, av in parsed:  # type: ignore[attr-defined]
        if op == sre_c.LITERAL:
            out.append(chr(av))
        elif op == sre_c.ANY:
            out.append("a")
        elif op == sre_c.IN:
            out.append(_class_sample(av))
        elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
            lo, _hi, sub = av
            out.append(_sample(sub, depth + 1) * max(lo, 1 if depth < 3 else lo))
        elif op == sre_c.SUBPATTERN:
            out.append(_sample(av[-1], depth + 1))
        elif op == sre_c.BRANCH:
            out.append(_sample(av[1][0], depth + 1))
        elif op in (sre_c.AT, sre_c.ASSERT, sre_c.ASSERT_NOT):
            continue
        elif op == sre_c.NOT_LITERAL:
            out.append("a" if av != ord("a") else "b")
        else:
            raise ValueError(f"unsupported regex construct {op}")
    return "".join(out)


def _class_sample(items: list[tuple[object, object]]) -> str:
    negate = any(op == sre_c.NEGATE for op, _ in items)
    if negate:
        banned = {av for op, av in items if op == sre_c.LITERAL}
        return next(c for c in "az09_" if ord(c) not in banned)
    for op, av in items:
        if op == sre_c.LITERAL:
            return chr(av)  # type: ignore[arg-type]
        if op == sre_c.RANGE:
            return chr(av[0])  # type: ignore[index]
        if op == sre_c.CATEGORY:
            return {sre_c.CATEGORY_DIGIT: "0", sre_c.CATEGORY_SPACE: " "}.get(av, "a")
    return "a"


@lru_cache(maxsize=8192)
def regex_sample(pattern: str) -> str | None:
    """A string RE2 fully matches, or None when this simple sampler cannot find one."""
    try:
        candidate = _sample(sre_parse.parse(pattern))
    except Exception:  # any construct the sampler lacks means "no sample"
        return None
    try:
        return candidate if re2.fullmatch(pattern, candidate) else None
    except re2.error:
        return None


# ---------------------------------------------------------------- hosts and paths


def concrete_hosts(hostname: str) -> list[str]:
    """Hosts to try for a hostname pattern: the name, a label under a wildcard, the
    apex; for an exact name also a sibling, which a stray wildcard would catch."""
    if hostname == "*":
        return ["any.example.net"]
    if hostname.startswith("*."):
        base = hostname[2:]
        return [f"wild.{base}", f"a.b.{base}", base]
    parent = hostname.split(".", 1)[1] if "." in hostname else "invalid"
    return [hostname, f"sibling-of-{hostname.split('.', 1)[0]}.{parent}"]


def path_variants(match: m.PathMatch) -> list[tuple[str, str]]:
    """(path, note) pairs on both sides of the match's boundary."""
    v = match.value
    if match.type == "Exact":
        return [
            (v, "exact"),
            (
                v.rstrip("/") + "/" if not v.endswith("/") else v.rstrip("/") or "/",
                "trailing slash",
            ),
            (v + "x", "longer"),
            (v.upper() if v.upper() != v else v.lower() + "x", "case"),
            (v + "?q=1", "with query"),
        ]
    if match.type == "PathPrefix":
        base = v.rstrip("/") or "/"
        if base == "/":
            return [("/", "root"), ("/anything/else", "deep"), ("/?q=1", "with query")]
        return [
            (base, "prefix itself"),
            (base + "/", "trailing slash"),
            (base + "/sub/path", "below"),
            (base + "suffix", "segment boundary"),
            (base[:-1] or "/", "shorter"),
            (base.upper() + "/x" if base.upper() != base else base + "X/x", "case"),
            (base + "/x?q=1", "with query"),
        ]
    sample = regex_sample(v)
    # As a client sends it: percent-encoded where a target cannot hold the
    # character raw ('?' too: a path regex never sees the query).
    sample = percent_encode(sample).replace("?", "%3F") if sample else None
    out = [(sample, "regex sample")] if sample and sample.startswith("/") else []
    out.append(("/no-such-regex-path", "regex miss"))
    return out


# ---------------------------------------------------------------- witnesses


def _hosts_for(route: m.HTTPRoute, listener: m.GatewayListener) -> list[str]:
    return [host for host, _ in _hosts_and_roles(route, listener)]


def _hosts_and_roles(route: m.HTTPRoute, listener: m.GatewayListener) -> list[tuple[str, bool]]:
    """(host, primary): the first concrete host of each hostname is primary and
    gets every witness of every match; the others (a sibling, a deeper label,
    the apex) probe which hostnames are served, which is decided per host, so
    each match sends them only its own request."""
    names = list(route.hostnames) or ([listener.hostname] if listener.hostname else ["*"])
    if listener.hostname and route.hostnames:
        names.append(listener.hostname)
    hosts: dict[str, bool] = {}
    for n in names:
        for i, h in enumerate(concrete_hosts(n)):
            hosts[h] = hosts.get(h, False) or i == 0
    return list(hosts.items())


def _base_headers(match: m.RouteMatch) -> list[tuple[str, str]]:
    """One value per header name: later entries with an equivalent name are
    ignored by the spec, and a header sent twice is matched differently by
    HTTP (one comma-joined list) and Envoy (each value alone)."""
    pairs = []
    seen: set[str] = set()
    for h in match.headers:
        if h.name.lower() in seen:
            continue
        seen.add(h.name.lower())
        sample = regex_sample(h.value) if h.type == "RegularExpression" else h.value
        pairs.append((h.name, sendable_value(sample if sample is not None else h.value)))
    return pairs


def _query(match: m.RouteMatch, drop: int | None = None, change: int | None = None) -> str:
    parts = []
    for i, q in enumerate(match.query_params):
        if i == drop:
            continue
        value = regex_sample(q.value) if q.type == "RegularExpression" else q.value
        value = percent_encode(value if value is not None else q.value)
        parts.append(f"{q.name}={value + 'x' if i == change else value}")
    return "&".join(parts)


def _with_query(path: str, query: str) -> str:
    if not query:
        return path
    return f"{path}&{query}" if "?" in path else f"{path}?{query}"


def match_witnesses(
    gw: tuple[str, str],
    port: int,
    scheme: str,
    host: str,
    route: m.HTTPRoute,
    rule: m.RouteRule,
    mi: int,
    match: m.RouteMatch,
    host_probes: bool = True,
    default_method: str = "GET",
    primary: bool = True,
) -> Iterator[Witness]:
    """Witnesses for one match on one host. ``host_probes``: also the Host
    spellings (with the port, in upper case), which virtual host selection
    decides for the whole host, so once per host is enough, unless the
    match itself reads the Host header. ``default_method``: the method when
    the match names none (see ``free_method``). Not ``primary``: only the
    request the match accepts (see ``_hosts_and_roles``)."""
    method = match.method or default_method
    headers = _base_headers(match)
    query = _query(match)
    key = route.meta.key  # one tuple for all the match's witnesses, not one each

    def w(
        feature: str,
        note: str,
        path: str,
        hdrs: list[tuple[str, str]],
        meth: str = method,
        h: str = host,
    ) -> Witness:
        request = Request(
            method=meth,
            scheme=scheme,
            host=h,
            port=port,
            path=path,
            headers=normalize_headers(hdrs) if hdrs else (),
        )
        return Witness(gw, request, feature, key, rule.index, mi, note)

    variants = path_variants(match.path)
    if not primary and not _reads_host(match):
        yield w(HOST, "other host of the hostname", _with_query(variants[0][0], query), headers)
        return
    for path, note in variants:
        yield w(PATH, note, _with_query(path, query), headers)
    base_path = variants[0][0]
    full = _with_query(base_path, query)
    if host_probes or _reads_host(match):
        yield w(HOST, "port in Host", full, headers, h=f"{host}:{port}")
        yield w(HOST, "Host case", full, headers, h=host.upper())
    if any(f.request_redirect is not None for f in rule.filters):
        # A Host naming another port than the one the request reached: the spec
        # derives a redirect's port from the scheme or the listener, never from
        # the Host, while Envoy keeps the Host's port unless told one.
        bare = host.rsplit(":", 1)[0] if ":" in host.rpartition("]")[2] else host
        elsewhere = OTHER_HOST_PORTS[0] if port != OTHER_HOST_PORTS[0] else OTHER_HOST_PORTS[1]
        yield w(FILTERS, "Host with another port", full, headers, h=f"{bare}:{elsewhere}")
    for i, (name, value) in enumerate(headers):
        others = headers[:i] + headers[i + 1 :]
        yield w(HEADER, f"without {name}", full, others)
        yield w(HEADER, f"{name} value changed", full, [*others, (name, value + "x")])
        yield w(HEADER, f"{name} name case", full, [*others, (name.swapcase(), value)])
        if value.swapcase() != value:
            yield w(HEADER, f"{name} value case", full, [*others, (name, value.swapcase())])
    for i, q in enumerate(match.query_params):
        yield w(QUERY, f"without {q.name}", _with_query(base_path, _query(match, drop=i)), headers)
        changed = _with_query(base_path, _query(match, change=i))
        yield w(QUERY, f"{q.name} value changed", changed, headers)
    if match.method:
        other = "POST" if match.method != "POST" else "PUT"
        yield w(METHOD, "other method", full, headers, meth=other)
        # (No lower-case method witness: clients upper-case the method, as the
        # live pass's does, and Envoy's codec refuses a raw lower-case one.)
    for q in match.query_params:
        if q.type == "Exact" and q.value.swapcase() != q.value:
            cased = full.replace(f"{q.name}={q.value}", f"{q.name}={q.value.swapcase()}", 1)
            yield w(QUERY, f"{q.name} value case", cased, headers)
    if any(f.cors is not None for f in rule.filters):
        # Next to the match: below it, in other case, past its segment boundary
        # (a guard route for foreign preflights must not reach further than the rule).
        near = ("below", "case", "segment boundary")
        below = [p for p, note in variants if note in near]
        yield from _cors_witnesses(w, rule, [full, *below], headers, method)
    touched = _touched_request_headers(rule)
    # Set and add differ only when the client already sends the header. A header
    # the match already sends is not sent twice: which of a repeated header's
    # values a match reads is left to implementations (Envoy matches any one, a
    # comma-joined reading only the whole), and a probe of the filter must not
    # turn on it.
    sent = {n.lower() for n, _ in headers}
    client = [(n, "from-client") for n in touched if n.lower() not in sent]
    if client:
        yield w(FILTERS, "client sends modified headers", full, headers + client)


def _reads_host(match: m.RouteMatch) -> bool:
    return any(h.name.lower() in ("host", ":authority") for h in match.headers)


def _cors_witnesses(
    w: WitnessMaker,
    rule: m.RouteRule,
    paths: list[str],
    headers: list[tuple[str, str]],
    method: str,
) -> Iterator[Witness]:
    """Preflights (and near misses) and simple requests from allowed and foreign origins."""
    cors = next(f.cors for f in rule.filters if f.cors is not None)
    allowed = [
        "https://any.example.org" if o == "*" else o.replace("*", "wild", 1)
        for o in cors.allow_origins[:2]
    ]
    for path in paths:
        for origin in [*allowed, "https://foreign.invalid"]:
            preflight = [*headers, ("origin", origin), ("access-control-request-method", "GET")]
            yield w(CORS, f"preflight from {origin}", path, preflight, meth="OPTIONS")
            yield w(CORS, f"request from {origin}", path, [*headers, ("origin", origin)])
        # Not a preflight: OPTIONS without Access-Control-Request-Method. (A
        # lower-case `options` is one to Envoy whatever the configuration says,
        # so it is not a witness: it would blame every CORS config for Envoy.)
        foreign = [*headers, ("origin", "https://foreign.invalid")]
        yield w(CORS, "OPTIONS without request method", path, foreign, meth="OPTIONS")
        # Nor is a request of another method that carries the preflight's header.
        asking = [*foreign, ("access-control-request-method", "GET")]
        other = method if method != "OPTIONS" else "GET"
        yield w(CORS, "not OPTIONS, with a request method header", path, asking, meth=other)


def _touched_request_headers(rule: m.RouteRule) -> list[str]:
    names: list[str] = []
    filters = list(rule.filters) + [f for b in rule.backend_refs for f in b.filters]
    for f in filters:
        hm = f.request_header_modifier
        if hm is not None:
            names += [n for n, _ in hm.set] + [n for n, _ in hm.add] + list(hm.remove)
    return sorted({n.lower() for n in names} - {"host"})


def witnesses(res: Resources, controller_name: str, sent: Sent | None = None) -> list[Witness]:
    """Every witness for every route on every Gateway of ``controller_name``, deduplicated.

    ``sent`` stamps each request as it reaches its Gateway (check: the Gateway's
    address, as Host when the request names none) as its witness is kept. Stamped
    afterwards, every witness was made twice and both sets were alive at once: 38 MiB
    more at 10,000 rules, which the process kept. Stamping is one-to-one on what is
    generated here (no request carries an address, and no host is a Gateway's
    address), so deduplicating stamped requests keeps the same witnesses.
    """
    return to_ask(res, controller_name, sent)[0]


def to_ask(
    res: Resources, controller_name: str, sent: Sent | None = None, settle: Settle | None = None
) -> tuple[list[Witness], int]:
    """``witnesses``, without those ``settle`` answers already (check: the requests the
    decision lists prove, ``verifier.structural``), and how many it answered: the
    witnesses ``witnesses`` would keep are exactly the ones returned and the ones
    counted, so a proven request is neither stamped, kept nor handed to a worker."""
    ours = {n for n, gc in res.gateway_classes.items() if gc.controller_name == controller_name}
    out = _Kept(sent, settle)
    probed: set[tuple[tuple[str, str], int, str]] = set()  # (gateway, port, host)
    for gkey in sorted(res.gateways):
        gateway = _with_named_listener_sets(res, res.gateways[gkey])
        if gateway.class_name not in ours:
            continue
        method = free_method(res, gkey)
        for rkey in sorted(res.httproutes):
            route = res.httproutes[rkey]
            if not _names(route, gateway):
                continue
            for listener in gateway.listeners:
                scheme = "https" if listener.protocol == "HTTPS" else "http"
                for host, primary in _hosts_and_roles(route, listener):
                    for rule in route.rules:
                        for mi, match in enumerate(rule.matches):
                            first = (gkey, listener.port, host) not in probed
                            probed.add((gkey, listener.port, host))
                            for wit in match_witnesses(
                                gkey,
                                listener.port,
                                scheme,
                                host,
                                route,
                                rule,
                                mi,
                                match,
                                first,
                                method,
                                primary,
                            ):
                                out.keep(wit)
                stray = Request(scheme=scheme, host="unmatched.invalid", port=listener.port)
                out.keep(Witness(gkey, stray, HOST, note="no route hostname"))
                # The same host on a path the Route serves: a catch-all domain that
                # reached this Route's virtual host would answer it.
                pm = next((mt.path for r in route.rules for mt in r.matches if mt.path), None)
                if pm is not None and pm.type != "RegularExpression":
                    # Over TLS the handshake needs a name the listener serves.
                    sni = concrete_hosts(listener.hostname)[0] if listener.hostname else None
                    served = dataclasses.replace(
                        stray, path=path_variants(pm)[0][0], sni=sni if scheme == "https" else None
                    )
                    note = "no route hostname, on a path the route serves"
                    out.keep(Witness(gkey, served, HOST, note=note))
        for wit in _gateway_witnesses(res, gkey, gateway):
            out.keep(wit)
        for wit in _client_cert_witnesses(res, gkey, gateway):
            out.keep(wit)
        for wit in _listener_set_witnesses(gkey, gateway):
            out.keep(wit, claim=True)  # claims the request for its feature
    carriers: dict[tuple[tuple[str, str], int], ClientCert | None] = {}
    kept = [_with_carrier_cert(res, w, carriers) for w in out.kept.values()]
    return kept, len(out.settled)


class Sent(Protocol):
    def __call__(self, gateway: tuple[str, str], request: Request) -> Request: ...


class Settle(Protocol):
    """Whether a witness's answer is known without asking (``verifier.structural``): a
    function of the witness's Gateway, request (as generated, before ``Sent``) and
    feature alone, so that equal requests are settled alike."""

    def __call__(self, gateway: tuple[str, str], request: Request, feature: str) -> bool: ...


_Key = tuple[tuple[str, str], Request]


class _Kept:
    """The witnesses kept so far, one per (Gateway, request), each stamped by ``sent``;
    with ``settle``, the requests it answers are only remembered (as generated), so the
    count of those and the kept ones is what would be kept without it."""

    def __init__(self, sent: Sent | None, settle: Settle | None = None) -> None:
        self.sent = sent
        self.settle = settle
        self.kept: dict[_Key, Witness] = {}
        self.settled: set[_Key] = set()
        self.generated: set[_Key] = set()  # the kept ones as generated (with ``settle``)

    def keep(self, wit: Witness, *, claim: bool = False) -> None:
        """Keep ``wit`` unless its request is kept already (``claim``: replace it)."""
        if self.settle is not None:
            key = (wit.gateway, wit.request)
            if key in self.generated and not claim:
                return  # already kept: as without ``settle``
            if key in self.settled:
                if not claim:
                    return  # the first of equal requests is the one kept, and it is settled
                self.settled.discard(key)  # a claim replaces it: asked as the claimant
            elif self.settle(wit.gateway, wit.request, wit.feature):
                self.settled.add(key)
                return
            self.generated.add(key)
        if self.sent is not None:
            request = self.sent(wit.gateway, wit.request)
            if request is not wit.request:
                wit = evolve(wit, request=request)
        key = (wit.gateway, wit.request)
        if claim or key not in self.kept:
            self.kept[key] = wit


def _listener_set_witnesses(gkey: tuple[str, str], gw: m.Gateway) -> Iterator[Witness]:
    """For each ListenerSet listener: a request for its hostname and one for a host
    no Route names. Whether the listener serves at all (admitted, not conflicted),
    and that only its own Routes answer there, shows on these."""
    for lst in gw.listeners:
        if lst.listener_set is None or lst.protocol not in ("HTTP", "HTTPS"):
            continue
        scheme = "https" if lst.protocol == "HTTPS" else "http"
        ns, name = lst.listener_set
        host = concrete_hosts(lst.hostname)[0] if lst.hostname else "listener-set.example"
        on = f"ListenerSet {ns}/{name} listener {lst.name}"
        for path in ("/", "/listener-set-probe"):
            req = Request(scheme=scheme, host=host, port=lst.port, path=path)
            yield Witness(gkey, req, LISTENER_SET, note=f"{on}: {host}{path}")


def _with_named_listener_sets(res: Resources, gw: m.Gateway) -> m.Gateway:
    """The Gateway with the listeners of every ListenerSet whose parentRef names it,
    admitted or not: the models say which serve."""
    extra = tuple(
        lst
        for key in sorted(res.listener_sets)
        if (res.listener_sets[key].parent_namespace, res.listener_sets[key].parent_name)
        == gw.meta.key
        for lst in res.listener_sets[key].listeners
    )
    return dataclasses.replace(gw, listeners=gw.listeners + extra) if extra else gw


def _names(route: m.HTTPRoute, gw: m.Gateway) -> bool:
    """A parentRef of ``route`` names the Gateway or a ListenerSet of it."""
    targets = {gw.meta.key} | {lst.listener_set for lst in gw.listeners if lst.listener_set}
    return any((p.namespace, p.name) in targets for p in route.parent_refs)


def named_cas(res: Resources, gw: m.Gateway, port: int) -> list[str]:
    """Fingerprints of the CA certificates the Gateway's client certificate
    validation for ``port`` names, whether or not the references are valid."""
    validation = gw.frontend_validation(port)
    found: list[str] = []
    for ref in validation.ca_refs if validation is not None else ():
        cm = res.config_maps.get((ref.namespace or gw.meta.namespace, ref.name))
        if cm is not None and cm.ca_crt:
            found += [fp for fp in fingerprints(cm.ca_crt) if fp not in found]
    return found


def _with_carrier_cert(
    res: Resources,
    w: Witness,
    carriers: dict[tuple[tuple[str, str], int], ClientCert | None],
) -> Witness:
    """On a port that validates client certificates, a witness that does not probe
    the validation presents a certificate of a CA the Gateway names, so its
    request gets past the handshake to the routing it was made for. ``carriers``
    remembers the certificate per (Gateway, port): the CA bundles are parsed once."""
    req = w.request
    if req.scheme != "https" or w.feature == FRONTEND or req.client_cert is not None:
        return w
    key = (w.gateway, req.port)
    if key not in carriers:
        gw = res.gateways.get(w.gateway)
        cas = named_cas(res, gw, req.port) if gw is not None else []
        carriers[key] = ClientCert(cas[0]) if cas else None
    cert = carriers[key]
    if cert is None:
        return w
    return dataclasses.replace(w, request=dataclasses.replace(req, client_cert=cert))


def _client_cert_witnesses(
    res: Resources, gkey: tuple[str, str], gw: m.Gateway
) -> Iterator[Witness]:
    """Per HTTPS port: no certificate, one from a CA nobody trusts, and one from
    each CA the validation names. Ports without validation get the first two
    too, so an xDS that asks for certificates where the spec does not shows."""
    seen: set[int] = set()
    for lst in gw.listeners:
        if lst.protocol != "HTTPS" or lst.port in seen:
            continue
        seen.add(lst.port)
        host = concrete_hosts(lst.hostname or "")[0] if lst.hostname else "client-cert.example"
        # A path of its own: a routing witness for the same request would otherwise
        # keep it (and present a trusted certificate).
        base = Request(scheme="https", host=host, port=lst.port, path="/client-certificate-probe")
        on = f"port {lst.port}"
        yield Witness(gkey, base, FRONTEND, note=f"{on}: no client certificate")
        untrusted = dataclasses.replace(base, client_cert=ClientCert(UNTRUSTED_ISSUER))
        note = f"{on}: client certificate of an untrusted CA"
        yield Witness(gkey, untrusted, FRONTEND, note=note)
        for fp in named_cas(res, gw, lst.port):
            trusted = dataclasses.replace(base, client_cert=ClientCert(fp))
            yield Witness(gkey, trusted, FRONTEND, note=f"{on}: client certificate of CA {fp[:12]}")


def free_method(res: Resources, gkey: tuple[str, str]) -> str:
    """The method for witnesses of matches that name none: GET, unless some match
    of the Gateway requires GET; then one no match requires. A GET witness for
    `/p` with a header would be taken by an earlier "GET /p" match in both the
    spec and Envoy, so what it probes (that header) would go unseen."""
    required = {
        match.method.upper()
        for route in res.httproutes.values()
        if _names(route, _with_named_listener_sets(res, res.gateways[gkey]))
        for rule in route.rules
        for match in rule.matches
        if match.method
    }
    candidates = ("GET", "POST", "PUT", "PATCH", "DELETE")
    return next((verb for verb in candidates if verb not in required), "GET")


def _gateway_witnesses(res: Resources, gkey: tuple[str, str], gw: m.Gateway) -> Iterator[Witness]:
    """Requests whose answer depends on several listeners or routes at once."""
    https = [lst for lst in gw.listeners if lst.protocol == "HTTPS" and lst.hostname]
    for by_sni in https:
        for by_host in https:
            if by_sni is not by_host and by_sni.port == by_host.port:
                host = concrete_hosts(by_host.hostname or "")[0]
                sni = concrete_hosts(by_sni.hostname or "")[0]
                for path in ("/", "/deeper/path"):
                    tls = Request(scheme="https", host=host, port=by_sni.port, path=path, sni=sni)
                    yield Witness(gkey, tls, MISDIRECTED, note=f"SNI {sni}, Host {host}")
        sni = concrete_hosts(by_sni.hostname or "")[0]
        stray = Request(scheme="https", host="unmatched.invalid", port=by_sni.port, sni=sni)
        yield Witness(gkey, stray, MISDIRECTED, note=f"SNI {sni}, Host of no listener")
    for lst in gw.listeners:
        scheme = "https" if lst.protocol == "HTTPS" else "http"
        served_by_host: dict[str, list[wp.Served]] = {}
        for rkey in sorted(res.httproutes):
            route = res.httproutes[rkey]
            if not _names(route, gw):
                continue
            for host in _hosts_for(route, lst)[:1]:
                for rule in route.rules:
                    for mi, match in enumerate(rule.matches):
                        served_by_host.setdefault(host, []).append(
                            wp.Served(route, rule, mi, match)
                        )
        for host, served in sorted(served_by_host.items()):
            for a, b in wp.overlapping_pairs(served):
                req = wp.pair_request(a.match, b.match, host, lst.port, scheme)
                if req is not None:
                    yield Witness(
                        gkey,
                        req,
                        PRECEDENCE,
                        a.route.meta.key,
                        a.rule.index,
                        a.index,
                        note=f"overlaps {b.route.meta.name} rule {b.rule.index}",
                    )


def header_pairs(headers: Headers) -> list[tuple[str, str]]:
    return [(k, v) for k, vs in headers for v in vs]
