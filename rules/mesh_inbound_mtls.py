"""A sidecar's tunnel port admits only mesh clients, each Service port to its targetPort.

Why it matters: every mesh call to a workload arrives on its sidecar's port 15008 over
mutual TLS (docs/mesh.md): that listener is where the mesh authenticates its callers.
One that does not require a client certificate, trusts certificates of any CA, or
admits an identity outside the trust domain lets anyone who can reach the pod call it
as if from the mesh; one that refuses the mesh's own identities, listens elsewhere, or
passes a Service port's SNI to another port's targetPort breaks every call to it. No
request of the spec model shows it: the models answer a client's request at its own
sidecar.

Checked on every judged sidecar's xDS, for each TCP port of each Service selecting the
workload whose targetPort its pods have: a listener on port 15008 with a filter chain
for the SNI mesh clients send (``<svc>.<ns>.svc.cluster.local`` for a Service with
one port, ``<port>.<svc>.<ns>.svc.cluster.local`` otherwise) that terminates TLS,
requires a client certificate, verifies it, admits the SPIFFE identity of every
workload with a sidecar in this trust domain (``--trust-domain``) and refuses another
domain's, and passes the bytes, in cleartext, to ``127.0.0.1:<targetPort>`` only.
The finding points at the workload.

Example: the inbound chain ``80.echo.mesh-apps.svc.cluster.local`` of mesh-apps/echo-v1
without ``require_client_certificate``: a client with no certificate reaches echo-v1.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from verifier.rules.support import backends as bk
from verifier.rules.support import sidecar as sc

from verifier.check import Context
from verifier.findings import Finding
from verifier.gatewayapi import model as m
from verifier.gatewayapi import workloads as wl
from verifier.registry import Rule
from verifier.semantics.directory import MESH_PORT
from verifier.semantics.envoy.strings import ModelError, string_matcher
from verifier.xds import read

NAME = "mesh-inbound-mtls"
CODE = "EV930"
COMMON_TLS = "envoy.extensions.transport_sockets.tls.v3.CommonTlsContext"
ACCEPT_UNTRUSTED = 1  # CertificateValidationContext.TrustChainVerification
FOREIGN_DOMAIN = "foreign-trust-domain.invalid"
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def expected(ctx: Context, car: sc.Sidecar) -> Iterator[tuple[m.Service, m.ServicePort, str, int]]:
    """(Service, port, SNI, targetPort) of each Service port mesh clients reach it on."""
    ns, labels = car.source.namespace, dict(car.workload.pod_labels)
    for key in sorted(ctx.res.services):
        svc = ctx.res.services[key]
        if key[0] != ns or not svc.selector or not wl.selects(svc.selector, labels):
            continue
        for port in svc.ports:
            target = wl.target_port(port, car.workload)
            if port.protocol != "TCP" or target is None:
                continue
            stem = f"{svc.meta.name}.{ns}.svc.cluster.local"
            yield svc, port, stem if len(svc.ports) == 1 else f"{port.port}.{stem}", target


def _chain(li: Any, sni: str) -> tuple[str, Any] | None:
    """The chain Envoy picks for ``sni`` (exact server name, then none named, then the
    default chain), with its path."""
    chains = [
        (i, c, c.filter_chain_match.server_names if c.filter_chain_match else [])
        for i, c in enumerate(li.filter_chains)
    ]
    named = [(i, c) for i, c, names in chains if sni in names]
    anyname = [(i, c) for i, c, names in chains if not names]
    for i, c in named or anyname:
        return f"listeners[{li.name}].filter_chains[{i}]", c
    if li.default_filter_chain is not None:
        return f"listeners[{li.name}].default_filter_chain", li.default_filter_chain
    return None


def _identities(ctx: Context) -> list[str]:
    """The identities mesh clients present: every workload with a sidecar."""
    found = {
        f"spiffe://{ctx.trust_domain}/ns/{w.meta.namespace}/sa/{w.service_account}"
        for w in ctx.res.workloads.values()
        if wl.has_sidecar(ctx.res, w)
    }
    return sorted(found)


def _admits(sans: list[tuple[str, Any]], identity: str) -> bool:
    for kind, matcher in sans:
        try:
            if kind in ("", "URI") and string_matcher(matcher)(identity):
                return True
        except ModelError:
            continue
    return False


def _tls_problems(ctx: Context, tls: Any, sni: str) -> Iterator[str]:
    if tls is None:
        yield f"takes SNI {sni} without terminating TLS"
        return
    if not tls.require_client_certificate:
        yield f"does not require a client certificate for SNI {sni}"
    common = tls.common_tls_context or read.empty(COMMON_TLS)
    combined = common.combined_validation_context
    vc = common.validation_context or (combined.default_validation_context if combined else None)
    trusted = (
        common.validation_context is not None
        or common.validation_context_sds_secret_config is not None
        or (combined is not None and combined.validation_context_sds_secret_config is not None)
    )
    if not trusted:
        yield f"verifies no client certificate for SNI {sni}"
    elif vc is not None and (vc.trust_chain_verification or 0) == ACCEPT_UNTRUSTED:
        yield f"accepts client certificates of any CA for SNI {sni}"
    sans = bk.san_matchers(common)
    if not sans:
        yield f"admits a client of any trust domain for SNI {sni} (no SAN matcher)"
        return
    refused = [i for i in _identities(ctx) if not _admits(sans, i)]
    if refused:
        yield f"refuses the mesh client identity {refused[0]} for SNI {sni}"
    foreign = f"spiffe://{FOREIGN_DOMAIN}/ns/default/sa/default"
    if _admits(sans, foreign):
        yield f"admits {foreign}, of another trust domain, for SNI {sni}"


def _target_problems(car: sc.Sidecar, chain: Any, sni: str, target: int) -> Iterator[str]:
    name = sc.tcp_cluster(chain)
    if name is None or not sc.only_tcp_proxy(chain):
        yield f"does not pass SNI {sni} through a tcp_proxy to 127.0.0.1:{target}"
        return
    cl = sc.cluster(car.snapshot, name)
    if cl is None:
        yield f"passes SNI {sni} to cluster {name}, which does not exist"
        return
    dialled = set(bk.targets(bk.assignment(cl, car.snapshot)))
    if not dialled or any(h not in LOOPBACK or p != target for h, p in dialled):
        shown = ", ".join(f"{h}:{p}" for h, p in sorted(dialled)) or "no endpoint"
        yield f"passes SNI {sni} to {shown}, not the targetPort 127.0.0.1:{target}"
    if bk.encrypts(cl):
        yield f"speaks TLS to the application behind SNI {sni} (cluster {name})"


def check(ctx: Context) -> Iterable[Finding]:
    for car in sc.judged(ctx):
        wanted = list(expected(ctx, car))
        if not wanted:
            continue
        listeners = sc.listeners_on(car.snapshot, MESH_PORT)
        if not listeners:
            problem = f"has no listener on port {MESH_PORT}: every mesh call to it is refused"
            yield sc.finding(ctx, CODE, NAME, car, "listeners", problem)
            continue
        said: set[tuple[str, str]] = set()
        for _svc, _port, sni, target in wanted:
            found = _chain(listeners[0], sni)
            if found is None:
                path, problems = f"listeners[{listeners[0].name}]", [f"refuses SNI {sni}"]
            else:
                path, chain = found
                problems = [
                    *_tls_problems(ctx, sc.downstream_tls(chain), sni),
                    *_target_problems(car, chain, sni, target),
                ]
            for problem in problems:
                if (path, problem) not in said:
                    said.add((path, problem))
                    yield sc.finding(ctx, CODE, NAME, car, path, problem)


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("Mesh",),
    spec_ref="docs/mesh.md#the-sidecars-xds-reference-translator-translate---proxy-nsworkload",
    doc=(__doc__ or "").strip(),
    check=check,
    reads_models=True,
)
