"""`edge-verify explain`: both models' answer to a request, step by step.

When a finding says the models disagree, the first question is "why does
each of them think so"; explain prints both traces and the outcomes so the
answer is on one screen, and its JSON form is a stable contract for scripts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import zip_longest
from typing import Any
from urllib.parse import urlsplit

from rich.console import Console
from rich.table import Table

from verifier.check import Context, brief, first_difference
from verifier.errors import InputError, InputErrors
from verifier.gatewayapi import workloads
from verifier.gatewayapi.addresses import no_cluster_ip
from verifier.gatewayapi.model import GatewayListener
from verifier.gatewayapi.resources import Resources
from verifier.inputs import read_text
from verifier.mesh_compare import KUBE_PROXY
from verifier.semantics.cases import Case, model_unmet
from verifier.semantics.directory import dns_service_keys
from verifier.semantics.pem import fingerprints
from verifier.semantics.request import (
    ClientCert,
    Evaluation,
    Request,
    Source,
    normalize_headers,
    wire_problem,
)
from verifier.suggest import closest

DEFAULT_PORTS = {"http": 80, "https": 443}


def _bad(flag: str, code: str, message: str) -> InputErrors:
    return InputErrors([InputError(flag, 0, "", code, message)])


def client_cert(issuer_file: str | None) -> ClientCert | None:
    """``--client-cert-issuer CA.pem``: the request presents a certificate of that CA."""
    if issuer_file is None:
        return None
    found = fingerprints(read_text(issuer_file))
    if not found:
        raise _bad(
            "--client-cert-issuer", "pem", f"{issuer_file} holds no PEM certificate (the CA's)"
        )
    return ClientCert(found[0])


def _utf8(flag: str, text: str) -> str:
    """A command-line value as UTF-8 text. CPython hands argv bytes that are not UTF-8
    over as lone surrogates (U+DC80-U+DCFF for 0x80-0xFF): no request can carry them
    and no output can print them, so they are refused as a file's would be."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        byte = code - 0xDC00 if 0xDC80 <= code <= 0xDCFF else code
        raise _bad(flag, "encoding", f"not UTF-8: byte {byte:#x} in {text!r}") from None
    return text


def parse_request(line: str, headers: Sequence[str], cert: ClientCert | None = None) -> Request:
    """``'GET http://foo.example/v2?x=1'`` plus ``-H 'Name: value'`` lines; a problem is
    reported against the option that holds it."""
    expected = f"expected 'METHOD http(s)://host[:port]/path', got {line!r}"
    parts = _utf8("--request", line).split(None, 1)
    if not parts:
        raise _bad("--request", "request", expected)
    if len(parts) == 1:
        method, url = "GET", parts[0]
    else:
        method, url = parts[0].upper(), parts[1].strip()
    try:
        split = urlsplit(url)
    except ValueError as exc:  # e.g. a bracketed host that is no IPv6 address: [zz]
        raise _bad("--request", "request", f"{expected}: {exc}") from None
    if split.scheme not in DEFAULT_PORTS or not split.netloc:
        raise _bad("--request", "request", expected)
    try:
        explicit = split.port
    except ValueError:  # urllib: not a number, or outside 0-65535
        explicit = 0
    if explicit == 0 and ":" in split.netloc.rpartition("]")[2]:
        raise _bad("--request", "request", f"the port in {url!r} is not a number in 1-65535")
    port = explicit or DEFAULT_PORTS[split.scheme]
    pairs = []
    for h in headers:
        name, sep, value = _utf8("-H", h).partition(":")
        if not sep or not name.strip():
            raise _bad("-H", "header", f"expected 'Name: value', got {h!r}")
        pairs.append((name.strip(), value.strip()))
    path = (split.path or "/") + (f"?{split.query}" if split.query else "")
    request = Request(
        method=method,
        scheme=split.scheme,
        host=split.netloc,
        port=port,
        path=path,
        client_cert=cert if split.scheme == "https" else None,
    )
    if cert is not None and split.scheme != "https":
        raise _bad("--client-cert-issuer", "scheme", "a client certificate needs an https request")
    problem = wire_problem(request)
    if problem is not None:
        raise _bad("--request", "request", f"not sendable over HTTP/1.1: {problem}")
    request = replace(request, headers=normalize_headers(pairs))
    problem = wire_problem(request)
    if problem is not None:
        raise _bad("-H", "header", f"not sendable over HTTP/1.1: {problem}")
    return request


def with_host_header(request: Request) -> Request:
    """A ``-H 'Host: ...'`` is the Host the request carries, as curl sends it: the URL
    still says where it goes (the Gateway port, the Service and its port) and, for
    https, the SNI. Kept as a plain header instead, both models would read the URL's
    host and lose what the Host says, its port included (a redirect keeps it)."""
    hosts = request.header("host")
    if not hosts:
        return request
    if len(hosts) > 1 or not hosts[0]:
        raise _bad("-H", "header", f"expected one non-empty Host header, got {list(hosts)!r}")
    headers = tuple((name, values) for name, values in request.headers if name != "host")
    sni = request.sni or (request.hostname if request.scheme == "https" else None)
    return replace(request, host=hosts[0], headers=headers, sni=sni)


def pick_gateway(res: Resources, controller: str, port: int, named: str | None) -> tuple[str, str]:
    """The Gateway a request on ``port`` reaches: named, or the only one on that port."""
    if named:
        ns, _, name = named.partition("/")
        if (ns, name) not in res.gateways:
            raise _bad("--gateway", "not-found", f"no Gateway {named}")
        return (ns, name)
    ours = {n for n, gc in res.gateway_classes.items() if gc.controller_name == controller}
    # A Gateway's ports include those of the ListenerSets that name it.
    sets: dict[tuple[str, str], list[GatewayListener]] = {}
    for ls in res.listener_sets.values():
        sets.setdefault((ls.parent_namespace, ls.parent_name), []).extend(ls.listeners)
    keys = sorted(
        key
        for key, gw in res.gateways.items()
        if gw.class_name in ours
        and any(lst.port == port for lst in (*gw.listeners, *sets.get(key, ())))
    )
    if not keys:
        ports = sorted(
            {
                lst.port
                for key, gw in res.gateways.items()
                if gw.class_name in ours
                for lst in (*gw.listeners, *sets.get(key, ()))
            }
        )
        if not ports:  # a mesh-only input: the request was meant for a Service
            raise _bad(
                "--request",
                "no-gateway",
                f"no Gateway of controller {controller}: a request to a Service of the mesh "
                "names its client with --from NAMESPACE/WORKLOAD",
            )
        listed = ", ".join(map(str, ports))
        raise _bad(
            "--request",
            "no-gateway-on-port",
            f"no Gateway of ours listens on port {port} (ports: {listed}): put the port in "
            "the URL, e.g. http://host:8080/path",
        )
    if len(keys) != 1:
        found = ", ".join("/".join(k) for k in keys)
        raise InputErrors(
            [
                InputError(
                    "--gateway",
                    0,
                    "",
                    "ambiguous",
                    f"{len(keys)} Gateways listen on port {port} ({found}): "
                    "name one with --gateway NAMESPACE/NAME",
                )
            ]
        )
    return keys[0]


@dataclass(frozen=True)
class Explanation:
    name: str
    request: Request
    spec: Evaluation
    envoy: Evaluation
    spec_meets: bool | None
    envoy_meets: bool | None
    problems: tuple[str, ...] = ()
    # A mesh request's: who answered in the Envoy model's place, the client's sidecar
    # ("sidecar NS/WORKLOAD": the Envoy model on its xDS) or "kube-proxy" (no sidecar
    # sees the connection); "" for a request to a Gateway.
    answered_by: str = ""

    @property
    def envoy_side(self) -> str:
        """How the text names the answer held to the spec model's."""
        if self.answered_by == KUBE_PROXY:
            return "kube-proxy (the Envoy model is not asked)"
        if self.answered_by:
            return f"Envoy model ({self.answered_by})"
        return "Envoy model"

    @property
    def diffs(self) -> tuple[str, ...]:
        return first_difference(self.spec.outcome, self.envoy.outcome)[0]

    @property
    def judged(self) -> bool:
        """False when the Envoy answer rests on an assumption (a Caveat that decides
        it): check counts such a request unjudged, and so does explain."""
        return not self.envoy.outcome.unjudged

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "request": self.request.to_json(),
            "spec": self.spec.outcome.to_json(),
            "envoy": self.envoy.outcome.to_json(),
            "spec_meets_expectation": self.spec_meets,
            "envoy_meets_expectation": self.envoy_meets,
            "judged": self.judged,
            "agree": not self.diffs if self.judged else None,
            "differs_in": list(self.diffs),
            "caveats": [c.to_json() for c in self.envoy.outcome.all_caveats()],
            "notes": {"spec": _notes(self.spec), "envoy": _notes(self.envoy)},
            **({"answered_by": self.answered_by} if self.answered_by else {}),
        }


def explain_request(ctx: Context, gateway: tuple[str, str], request: Request) -> Explanation:
    request = ctx.sent(gateway, request)
    spec = ctx.spec(gateway, request)
    envoy = ctx.envoy.evaluate(request)
    return Explanation(request.line(), request, spec, envoy, None, None)


def explain_case(ctx: Context, case: Case) -> Explanation:
    """Judged as `check` judges cases: sent as check and live send it (to its
    Gateway's address, which is its Host when it names none), and both outcomes
    meet the echo backend first."""
    from dataclasses import replace

    from verifier.live.echo_model import echo_reply, spec_client_view

    gateway = case.parent_key
    request = ctx.sent(gateway, case.request)
    spec = ctx.spec(gateway, request)
    spec = replace(spec, outcome=spec_client_view(ctx.res, request, spec.outcome))
    envoy = ctx.envoy.evaluate(request, echo_reply(request))
    spec_problems = model_unmet(case.expect, spec.outcome, request)
    envoy_problems = model_unmet(case.expect, envoy.outcome, request)
    problems = tuple(f"spec: {p}" for p in spec_problems) + tuple(
        f"Envoy: {p}" for p in envoy_problems
    )
    return Explanation(
        case.name, request, spec, envoy, not spec_problems, not envoy_problems, problems
    )


def render_text(ex: Explanation) -> str:
    """Plain text (pipes, files): the traces one after the other."""
    lines = [f"case: {ex.name}"] if ex.spec_meets is not None else []
    lines += [f"request: {ex.request.line()}", "", "spec model:"]
    lines += [f"  {step}" for step in ex.spec.trace]
    lines += ["", f"{ex.envoy_side}:"]
    lines += [f"  {step}" for step in ex.envoy.trace]
    who = "kube-proxy" if ex.answered_by == KUBE_PROXY else "Envoy"
    lines += ["", f"spec outcome:  {_short(ex.spec)}", f"{who} outcome: {_short(ex.envoy)}"]
    lines += [f"  {c.line()}" for c in ex.envoy.outcome.all_caveats()]
    lines.append(_verdict(ex))
    for who, ev in (("spec", ex.spec), ("Envoy", ex.envoy)):
        lines += [f"{who} model note: {n}" for n in _notes(ev)]
    if ex.spec_meets is not None:
        lines.append(
            f"case expectation: spec {'met' if ex.spec_meets else 'NOT met'}, "
            f"Envoy {'met' if ex.envoy_meets else 'NOT met'}"
        )
        lines += [f"  {p}" for p in ex.problems]
    return "\n".join(lines) + "\n"


def print_side_by_side(ex: Explanation, console: Console) -> None:
    """On a terminal: the two traces in two columns, so each step lines up."""
    table = Table(title=ex.name, show_lines=False, expand=True)
    table.add_column("spec model", ratio=1, overflow="fold")
    table.add_column(ex.envoy_side, ratio=1, overflow="fold")
    for left, right in zip_longest(ex.spec.trace, ex.envoy.trace, fillvalue=""):
        table.add_row(left, right)
    table.add_row(f"[bold]{_short(ex.spec)}", f"[bold]{_short(ex.envoy)}")
    for c in ex.envoy.outcome.all_caveats():
        table.add_row("", c.line())
    console.print(table)
    style = "yellow" if not ex.judged else "red" if ex.diffs else "green"
    console.print(_verdict(ex), style=style, highlight=False)
    for who, ev in (("spec", ex.spec), ("Envoy", ex.envoy)):
        for n in _notes(ev):
            console.print(f"{who} model note: {n}", highlight=False)
    if ex.spec_meets is not None:
        console.print(
            f"case expectation: spec {'met' if ex.spec_meets else 'NOT met'}, "
            f"Envoy {'met' if ex.envoy_meets else 'NOT met'}"
        )
        for p in ex.problems:
            console.print(f"  {p}", highlight=False)


def _verdict(ex: Explanation) -> str:
    """Agree, disagree, or not judged: an Envoy answer that rests on an assumption is
    neither (the caveats above it say which)."""
    if not ex.judged:
        found = f"; they differ on {', '.join(ex.diffs)}" if ex.diffs else ""
        return f"NOT JUDGED: the Envoy answer rests on an assumption (its caveats){found}"
    return f"DISAGREE on: {', '.join(ex.diffs)}" if ex.diffs else "agree"


def _notes(ev: Evaluation) -> list[str]:
    return list(dict.fromkeys(n for o in ev.outcome.possibilities() for n in o.notes))


def _short(ev: Evaluation) -> str:
    """The outcome; with a runtime_fraction, each answer the request may get."""
    ways = ev.outcome.possibilities()
    if len(ways) == 1:
        return brief(ev.outcome)
    return " | or, when the runtime_fraction passes it on: ".join(brief(o) for o in ways)


# ---------------------------------------------------------------- mesh requests


def parse_source(res: Resources, text: str) -> Source:
    """``--from NS/WORKLOAD``: the client workload of a mesh request, which the input
    must hold (its namespace and annotations decide what its sidecar captures)."""
    ns, sep, name = _utf8("--from", text).partition("/")
    if not sep or not ns or not name or "/" in name:
        raise _bad("--from", "source", f"expected NAMESPACE/WORKLOAD, got {text!r}")
    if workloads.workload(res, ns, name) is None:
        raise _bad("--from", "not-found", workloads.workload_missing(res, ns, name)[1])
    return Source(ns, name)


def pick_service(res: Resources, request: Request) -> tuple[str, str]:
    """The Service a mesh request's URL names: ``<svc>.<ns>[.svc[.cluster.local]]`` or a
    ClusterIP, with the port of the URL among the Service's ports."""
    host = request.hostname
    keys = [k for k in dns_service_keys(host) if k in res.services]
    keys += [k for k, svc in sorted(res.services.items()) if svc.cluster_ip == host]
    if not keys:
        short = ".".join(host.split(".")[:2])
        near = closest(short, [f"{name}.{ns}" for ns, name in res.services])
        hint = f"; did you mean {near}?" if near else ""
        raise _bad(
            "--request",
            "no-service",
            f"{host!r} names no Service of the input: give <service>.<namespace>"
            f"[.svc.cluster.local] or a Service's ClusterIP{hint}",
        )
    key = keys[0]
    svc = res.services[key]
    ports = sorted(p.port for p in svc.ports)
    if request.port not in ports:
        listed = ", ".join(map(str, ports)) or "none"
        raise _bad(
            "--request",
            "no-port",
            f"Service {key[0]}/{key[1]} has no port {request.port} (ports: {listed}): "
            f"name one of them in the URL (http://{host}:{ports[0] if ports else 'PORT'}/...)",
        )
    headless = no_cluster_ip(svc)
    if headless is not None:
        raise _bad("--request", "no-cluster-ip", headless)
    return key


@dataclass(frozen=True)
class MeshExplanation:
    """The spec model's answer to a mesh request that check has no other answer to:
    its client's sidecar captures it and that sidecar's xDS is not here (``why``)."""

    name: str
    request: Request
    spec: Evaluation
    spec_meets: bool | None = None
    problems: tuple[str, ...] = ()
    why: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "request": self.request.to_json(),
            "spec": self.spec.outcome.to_json(),
            "envoy": None,
            "envoy_model": self.why,
            "spec_meets_expectation": self.spec_meets,
            "envoy_meets_expectation": None,
            "judged": False,
            "agree": None,
            "differs_in": [],
            "caveats": [],
            "notes": {"spec": _notes(self.spec), "envoy": []},
        }


def explain_mesh_request(
    ctx: Context, service: tuple[str, str], request: Request
) -> Explanation | MeshExplanation:
    """Sent as check sends a mesh case (``Destinations.sent``: the Service's ClusterIP),
    and answered as check answers it: by the spec model, and by the client's sidecar
    (the Envoy model on its xDS, the connection redirected to it) or kube-proxy."""
    request = ctx.sent(service, request)
    spec = ctx.mesh_spec(request)
    answered = ctx.mesh_answer(request)
    if answered.evaluation is None:
        return MeshExplanation(request.line(), request, spec, why=_unanswered(answered.why))
    return Explanation(
        request.line(), request, spec, answered.evaluation, None, None, answered_by=answered.by
    )


def explain_mesh_case(ctx: Context, case: Case) -> Explanation | MeshExplanation:
    """A mesh case, judged as check judges it: both answers meet echo first."""
    from verifier.live.echo_model import echo_reply, spec_client_view

    request = ctx.sent(case.parent_key, case.request)
    spec = ctx.mesh_spec(request)
    spec = replace(spec, outcome=spec_client_view(ctx.res, request, spec.outcome))
    spec_problems = model_unmet(case.expect, spec.outcome, request)
    answered = ctx.mesh_answer(request, echo_reply(request))
    if answered.evaluation is None:
        problems = tuple(f"spec: {p}" for p in spec_problems)
        why = _unanswered(answered.why)
        return MeshExplanation(case.name, request, spec, not problems, problems, why)
    other = answered.evaluation
    other_problems = model_unmet(case.expect, other.outcome, request)
    who = "kube-proxy" if answered.by == KUBE_PROXY else "Envoy"
    problems = tuple(f"spec: {p}" for p in spec_problems) + tuple(
        f"{who}: {p}" for p in other_problems
    )
    return Explanation(
        case.name,
        request,
        spec,
        other,
        not spec_problems,
        not other_problems,
        problems,
        answered.by,
    )


def _unanswered(why: str) -> str:
    return f"not asked: {why}: only the spec model's answer is shown (docs/mesh.md)"


def render_mesh_text(ex: MeshExplanation) -> str:
    lines = [f"case: {ex.name}"] if ex.spec_meets is not None else []
    lines += [f"request: {ex.request.line()}", "", "spec model:"]
    lines += [f"  {step}" for step in ex.spec.trace]
    lines += ["", f"Envoy model: {ex.why}"]
    lines += ["", f"spec outcome:  {_short(ex.spec)}", "NOT JUDGED: one model's answer only"]
    lines += [f"spec model note: {n}" for n in _notes(ex.spec)]
    if ex.spec_meets is not None:
        lines.append(f"case expectation: spec {'met' if ex.spec_meets else 'NOT met'}")
        lines += [f"  {p}" for p in ex.problems]
    return "\n".join(lines) + "\n"
