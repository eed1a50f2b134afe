"""A mesh workload's sidecar admits only mutual TLS from its trust domain, on :15008.

Why it matters: the tunnel port is how every other mesh workload reaches this one
(docs/mesh.md, "Inbound"). A sidecar whose inbound listener admits a client without a
certificate, one of another trust domain, or cleartext lets anyone who can reach the
pod call the application as if it were a mesh peer; one that sends a Service port's
tunnel to another targetPort (or guesses for an SNI it does not know) answers calls
with the wrong application port; one that refuses its mesh peers fails every call to
it, which no client's answers show (check models the peer's handshake from the
directory, not from this xDS).

Checked on every judged sidecar's xDS whose workload some Service selects, for each
TCP port of each such Service whose targetPort the pods have, by asking the Envoy
model what the sidecar does with connections to the pod's :15008: with the SNI a mesh
client sends for that port (``<svc>.<ns>.svc.cluster.local``, with ``<port>.`` before
it when the Service has several ports) and a certificate of the trust domain
(``--trust-domain``), the connection must be passed to ``127.0.0.1:<targetPort>``; the
same without a client certificate, with one of another trust domain, in cleartext, or
with an SNI no Service port of the workload has, it must be refused. The finding is at
the Service port, with the request that shows it.

Example: the inbound chain ``inbound/mesh-apps/echo-v1/80`` without
``require_client_certificate``: a connection without a client certificate reaches
``127.0.0.1:3000``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from verifier.rules.support import backends as bk
from verifier.rules.support.mistakes import at

from verifier.check import Context
from verifier.findings import Finding
from verifier.gatewayapi import model as m
from verifier.gatewayapi import workloads as wl
from verifier.registry import Rule
from verifier.semantics.directory import MESH_PORT
from verifier.semantics.envoy.model import EnvoyModel
from verifier.semantics.request import ClientCert, Request, Source, evolve
from verifier.xds.snapshot import Snapshot

NAME = "mesh-inbound"
CODE = "EV924"
LOOPBACK = "127.0.0.1"
# The issuer a probe's certificate names: the inbound chain's trusted CAs are the
# agent's (SDS ROOTCA), not in the xDS, so the model judges only its SAN matchers.
MESH_CA = "mesh-ca"
ELSEWHERE = "spiffe://elsewhere.invalid/ns/other/sa/other"


@dataclass(frozen=True)
class Probe:
    """One connection to the pod's :15008, and whether the sidecar must admit it."""

    what: str
    request: Request
    admit: bool


def _sni(svc: m.Service, port: int) -> str:
    """The SNI a mesh client sends for ``port`` of ``svc`` (docs/mesh.md)."""
    name = f"{svc.meta.name}.{svc.meta.namespace}.svc.cluster.local"
    return f"{port}.{name}" if len(svc.ports) > 1 else name


def _probes(ctx: Context, svc: m.Service, port: int, address: str) -> list[Probe]:
    sni = _sni(svc, port)
    ns = svc.meta.namespace
    peer = ClientCert(MESH_CA, uri_sans=(f"spiffe://{ctx.trust_domain}/ns/{ns}/sa/peer",))
    other = ClientCert(MESH_CA, uri_sans=(ELSEWHERE,))
    base = Request(
        scheme="https", host=sni, port=MESH_PORT, address=address, sni=sni, client_cert=peer
    )
    return [
        Probe("a mesh peer's connection", base, True),
        Probe("a connection without a client certificate", evolve(base, client_cert=None), False),
        Probe(
            "a client certificate of another trust domain", evolve(base, client_cert=other), False
        ),
        Probe(
            "a cleartext connection",
            evolve(base, scheme="http", sni=None, client_cert=None),
            False,
        ),
        Probe(
            "an SNI naming no port of the workload",
            evolve(base, sni=f"nowhere.{ns}.invalid"),
            False,
        ),
    ]


def _address(ctx: Context, svc: m.Service, workload: m.Workload) -> str:
    """A pod of ``workload`` among ``svc``'s endpoints, else the
    wildcard: the inbound listener binds every address of the pod."""
    owners = wl.address_owners(ctx.res)
    mine = (workload.meta.kind, *workload.meta.key)
    for key in sorted(ctx.res.endpoint_slices):
        sl = ctx.res.endpoint_slices[key]
        if (sl.meta.namespace, sl.service_name) != svc.meta.key:
            continue
        for address in sl.addresses:
            if owners.get(address) == {mine}:
                return address
    return "0.0.0.0"


def _reaches(model: EnvoyModel, snap: Snapshot, request: Request) -> list[tuple[str, int]] | None:
    """Where the sidecar passes the connection (its tcp_proxy cluster's endpoints); None
    when it is refused or not passed on."""
    selected = model.connection_of(request)
    tcp = selected.chain.tcp if selected is not None else None
    if tcp is None or not tcp.clusters:
        return None
    if model.evaluate(request, trace=False).outcome.status == 0:
        return None
    out: list[tuple[str, int]] = []
    clusters = {c.name: c for c in snap.clusters}
    for name, _weight in tcp.clusters:
        found = clusters.get(name)
        out += bk.targets(bk.assignment(found, snap)) if found is not None else []
    return out


def _wrapped(model: EnvoyModel, snap: Snapshot, request: Request) -> str | None:
    """The application behind the tunnel speaks what the client sent, in cleartext on
    the loopback: a cluster that wraps it in TLS breaks every call."""
    selected = model.connection_of(request)
    tcp = selected.chain.tcp if selected is not None else None
    clusters = {c.name: c for c in snap.clusters}
    for name, _weight in tcp.clusters if tcp is not None else ():
        found = clusters.get(name)
        if found is not None and bk.encrypts(found):
            return f"wraps a mesh peer's connection in TLS to the application (cluster {name})"
    return None


def _problem(probe: Probe, reached: list[tuple[str, int]] | None, target: int) -> str | None:
    if not probe.admit:
        return None if reached is None else f"admits {probe.what} (to {_show(reached)})"
    if reached is None:
        return f"refuses {probe.what}"
    if reached != [(LOOPBACK, target)]:
        return f"passes {probe.what} to {_show(reached)}, not {LOOPBACK}:{target}"
    return None


def _show(targets: list[tuple[str, int]]) -> str:
    return ", ".join(f"{h}:{p}" for h, p in targets) or "no endpoint"


def _selecting(ctx: Context, workload: m.Workload) -> Iterator[m.Service]:
    labels = dict(workload.pod_labels)
    for key in sorted(ctx.res.services):
        svc = ctx.res.services[key]
        if key[0] == workload.meta.namespace and svc.selector and wl.selects(svc.selector, labels):
            yield svc


@dataclass(frozen=True)
class PortProbe:
    """One probe of a workload's :15008 for one port of a Service selecting it, and what
    the Envoy model has the sidecar do with it: the live pass sends the same probes to
    the real sidecar (``verifier.live.mesh_inbound_live``)."""

    service: m.Service
    index: int  # of the port in the Service's spec.ports
    target: int  # the targetPort the pods have
    probe: Probe
    reached: list[tuple[str, int]] | None  # where the sidecar passes it (None: refused)
    problem: str | None  # what the sidecar does wrong with it (None: right)


def port_probes(
    ctx: Context, workload: m.Workload, model: EnvoyModel, snap: Snapshot
) -> Iterator[PortProbe]:
    """Every probe of every TCP port of every Service selecting ``workload``, judged on
    ``model`` (the Envoy model of ``snap``, the workload's sidecar xDS)."""
    for svc in _selecting(ctx, workload):
        address = _address(ctx, svc, workload)
        for i, port in enumerate(svc.ports):
            target = wl.target_port(port, workload)
            if port.protocol != "TCP" or target is None:
                continue
            for probe in _probes(ctx, svc, port.port, address):
                reached = _reaches(model, snap, probe.request)
                problem = _problem(probe, reached, target)
                problem = problem or (_wrapped(model, snap, probe.request) if probe.admit else None)
                yield PortProbe(svc, i, target, probe, reached, problem)


def _of(ctx: Context, source: Source, snap: Snapshot) -> Iterator[Finding]:
    workload = wl.workload(ctx.res, source.namespace, source.workload)
    model = ctx.mesh_plane.model(source)
    if workload is None or model is None:
        return
    said: set[str] = set()  # a listener or cluster all ports share: one finding
    shown: set[tuple[tuple[str, str], int]] = set()  # one finding per Service port
    for p in port_probes(ctx, workload, model, snap):
        svc, problem = p.service, p.problem
        key = (svc.meta.key, p.index)
        if problem is None or problem in said or key in shown:
            continue
        said.add(problem)
        shown.add(key)  # the first probe that shows it
        yield at(
            CODE,
            NAME,
            svc.meta,
            f"spec.ports[{p.index}]",
            xds_path="listeners[inbound]",
            request=p.probe.request.to_json(),
            proxy=source.line(),
            problem=problem,
            service=f"{svc.meta.namespace}/{svc.meta.name}",
            port=svc.ports[p.index].port,
        )


def check(ctx: Context) -> Iterable[Finding]:
    for source, snap in sorted(ctx.mesh.sidecars.items()):
        yield from _of(ctx, source, snap)


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("Mesh",),
    spec_ref="docs/mesh.md#what-check-judges",
    doc=(__doc__ or "").strip(),
    check=check,
    reads_models=True,
)
