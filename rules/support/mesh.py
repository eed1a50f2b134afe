"""What the mesh rules share: how each judged sidecar dials mesh workloads.

aether's mesh contract (docs/mesh.md): traffic between mesh workloads leaves the pod
only over mutual TLS to the workload's tunnel port 15008, presenting the sidecar's
certificate, and accepting exactly the identity of the pod it reaches,
``spiffe://<trust domain>/ns/<ns>/sa/<serviceaccount>``. Which identity answers where
is the directory's (``verifier.semantics.directory``: each pod's ServiceAccount), never
the xDS's own names or metadata. Every routed cluster of every judged sidecar whose
endpoints are the pods (or the name) of a mesh-registered Service is read here once
per context, and each mistake is a ``Dialling`` of rule ``mesh-mtls`` (cleartext, no
client certificate, another port) or ``mesh-identity`` (an identity too many or too
few). ``shown_by`` finds where a finding about one can point: a request the models
disagree on because of it, else one whose route dials that cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from verifier.rules.support import backends as bk
from verifier.rules.support import served, walk

from verifier.check import Comparison, Context
from verifier.findings import Finding, new
from verifier.gatewayapi import model as m
from verifier.gatewayapi import workloads as wl
from verifier.mesh_compare import CAPTURED, sidecar_label
from verifier.semantics import witness as wt
from verifier.semantics.directory import MESH_PORT
from verifier.semantics.envoy.strings import ModelError, string_matcher
from verifier.semantics.request import Request, Source, service_host
from verifier.semantics.spec.backends import SUPPORTED_APP_PROTOCOLS
from verifier.semantics.witness_mesh import MESH
from verifier.xds import read
from verifier.xds.snapshot import Snapshot

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.config.cluster.v3 import Cluster
    from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import CommonTlsContext
    from envoy_data_plane.envoy.type.matcher.v3 import StringMatcher

MTLS = "mesh-mtls"
IDENTITY = "mesh-identity"
CACHE_KEY = "mesh-dialling"
COMMON_TLS = "envoy.extensions.transport_sockets.tls.v3.CommonTlsContext"
_ROUTED = walk.PerSnapshot(bk.routed_clusters)


@dataclass(frozen=True)
class Dialling:
    """One way a sidecar's cluster breaks the mesh contract, and whose rule it is."""

    rule: str
    source: Source
    cluster: str
    service: m.Service
    problem: str
    routes: tuple[str, ...]  # the xDS paths of the routes that send traffic there
    # Set when no route sends traffic there: the Service frontend (ClusterIP, port)
    # whose connections the sidecar passes through the cluster (``tcp_proxy``).
    frontend: Request | None = None


def dialling(ctx: Context) -> list[Dialling]:
    """Every judged sidecar's mistakes in dialling mesh workloads, worked out once."""
    found = ctx.rule_cache.get(CACHE_KEY)
    if found is None:
        found = [d for src, snap in sorted(ctx.mesh.sidecars.items()) for d in _of(ctx, src, snap)]
        ctx.rule_cache[CACHE_KEY] = found
    assert isinstance(found, list)
    return found


def _of(ctx: Context, source: Source, snap: Snapshot) -> list[Dialling]:
    out = _passed_through(ctx, source, snap) + _tunnel_sni(ctx, source, snap)
    routed = _ROUTED(snap)
    for cluster, found, refs in bk.with_service(snap, ctx.res, shared=True):
        meshed = [
            s
            for s in (found.service, *found.others)
            if wl.mesh_service(ctx.res, ctx.mesh_registry, *s.meta.key)
        ]
        if not meshed:
            continue
        paths = tuple(r.path for r in refs or routed.get(cluster.name, []))
        svc = _named(ctx, found, meshed)
        problems: dict[str, list[str]] = {}
        for rule, problem in _problems(ctx, cluster, found, svc):
            problems.setdefault(rule, []).append(problem)
        out += [
            Dialling(rule, source, cluster.name, svc, "; ".join(said), paths)
            for rule, said in problems.items()
        ]
    return out


def _passed_through(ctx: Context, source: Source, snap: Snapshot) -> list[Dialling]:
    """The frontends of mesh-registered Services the sidecar captures and would speak
    HTTP to (an appProtocol the spec supports) whose connections it passes through
    (``tcp_proxy``) to a cluster without TLS rather than routing them: they reach the
    ClusterIP, or wherever the cluster dials, in cleartext, whatever they get back. The
    reference translator passes through only ports it does not speak HTTP on
    (docs/mesh.md)."""
    model = ctx.mesh_plane.model(source)
    if model is None:
        return []
    clusters = {c.name: c for c in snap.clusters}
    out = []
    for key in sorted(ctx.res.services):
        svc = ctx.res.services[key]
        if svc.cluster_ip in (None, "", "None"):
            continue
        if not wl.mesh_service(ctx.res, ctx.mesh_registry, *key):
            continue
        for port in svc.ports:
            if port.protocol != "TCP" or port.app_protocol not in SUPPORTED_APP_PROTOCOLS:
                continue
            host = service_host(*key, port.port)
            request = Request(host=host, port=port.port, address=svc.cluster_ip, source=source)
            if not ctx.mesh_plane.deployment.captured(request):
                continue
            selected = model.connection_of(request, CAPTURED)
            tcp = selected.chain.tcp if selected is not None else None
            if tcp is None or not tcp.clusters:
                continue
            dialled = [clusters[n] for n, _w in tcp.clusters if n in clusters]
            if dialled and all(bk.encrypts(c) for c in dialled):
                continue  # a TLS tunnel, not cleartext: its identity is another matter
            chain = selected.chain.name if selected is not None else ""
            problem = (
                f"is where filter chain {chain or '(unnamed)'} passes connections to "
                f"{svc.cluster_ip}:{port.port} (tcp_proxy), through no route: they leave "
                "in cleartext"
            )
            out.append(Dialling(MTLS, source, tcp.clusters[0][0], svc, problem, (), request))
    return out


def _endpoints(ctx: Context) -> dict[tuple[str, str], set[str]]:
    """Each Service's endpoint addresses, from its EndpointSlices."""
    out: dict[tuple[str, str], set[str]] = {}
    for sl in ctx.res.endpoint_slices.values():
        out.setdefault((sl.meta.namespace, sl.service_name), set()).update(sl.addresses)
    return out


def _named(ctx: Context, found: bk.Dialled, meshed: list[m.Service]) -> m.Service:
    """The Service a cluster is for, of those its endpoints may be: the one whose ready
    endpoints are fewest while holding every pod dialled (pods of echo-v1 are also
    pods of echo, which has echo-v2's too)."""
    hosts = {h for h, _p in found.targets}
    endpoints = _endpoints(ctx)
    fits = [s for s in meshed if hosts <= endpoints.get(s.meta.key, set())]
    return min(fits or meshed, key=lambda s: (len(endpoints.get(s.meta.key, set())), s.meta.key))


def _tunnel_sni(ctx: Context, source: Source, snap: Snapshot) -> list[Dialling]:
    """Routed clusters dialling mesh pods' :15008 whose SNI names no port of any mesh
    Service those pods all serve, as a mesh client names one (docs/mesh.md:
    ``<svc>.<ns>.svc.cluster.local`` for a Service with one port, ``<port>.`` before it
    for one with several): the peer's inbound listener chooses the targetPort by SNI
    and refuses one it has no chain for, never guessing."""
    routed = _ROUTED(snap)
    endpoints = _endpoints(ctx)
    out = []
    for cluster in snap.clusters:
        refs, tls = routed.get(cluster.name), bk.upstream_tls(cluster)
        if not refs or tls is None:
            continue
        hosts = {h for h, p in bk.targets(bk.assignment(cluster, snap)) if p == MESH_PORT}
        fits = [
            ctx.res.services[key]
            for key in sorted(endpoints)
            if hosts
            and hosts <= endpoints[key]
            and key in ctx.res.services
            and wl.mesh_service(ctx.res, ctx.mesh_registry, *key)
        ]
        if not fits or any(_names_a_port(tls.sni or "", s) for s in fits):
            continue
        svc = min(fits, key=lambda s: (len(endpoints[s.meta.key]), s.meta.key))
        said = f"sends SNI {tls.sni!r}" if tls.sni else "sends no SNI"
        problem = (
            f"{said}, which names no port of {svc.meta.namespace}/{svc.meta.name} (nor of "
            "another Service of its pods): their sidecar's inbound listener refuses it"
        )
        out.append(Dialling(MTLS, source, cluster.name, svc, problem, tuple(r.path for r in refs)))
    return out


def _names_a_port(sni: str, svc: m.Service) -> bool:
    stem = f"{svc.meta.name}.{svc.meta.namespace}.svc.cluster.local"
    if len(svc.ports) == 1:
        return sni == stem
    head, dot, rest = sni.partition(".")
    return bool(dot) and rest == stem and any(str(p.port) == head for p in svc.ports)


def _problems(
    ctx: Context, cluster: Cluster, found: bk.Dialled, svc: m.Service
) -> list[tuple[str, str]]:
    tls = bk.upstream_tls(cluster)
    if tls is None:
        return [(MTLS, "has no TLS transport socket: it sends cleartext")]
    out: list[tuple[str, str]] = []
    common = tls.common_tls_context or read.empty(COMMON_TLS)
    certs = (
        common.tls_certificates
        or common.tls_certificate_sds_secret_configs
        or common.tls_certificate_provider_instance
        or common.tls_certificate_certificate_provider_instance
    )
    if not certs:
        out.append((MTLS, "presents no client certificate, which the mesh requires"))
    wrong = sorted({f"{h}:{p}" for h, p in found.targets if p != MESH_PORT})
    if wrong:
        out.append((MTLS, f"dials {', '.join(wrong)}, not the workloads' port {MESH_PORT}"))
    out += [(IDENTITY, p) for p in _identity_problems(ctx, common, found, svc)]
    return out


def _identities(ctx: Context, found: bk.Dialled, svc: m.Service) -> dict[str, str]:
    """Each identity the cluster's peers present, with where it answers: the
    directory's for each pod dialled on the mesh port; for a name (DNS), those of the
    workloads the Service selects."""
    directory = ctx.mesh_plane.directory
    out: dict[str, str] = {}
    for host, port in found.targets:
        if port == MESH_PORT and directory.identity(host) is not None:
            out.setdefault(directory.identity(host) or "", f"pod {host}")
    if not out:
        ns = svc.meta.namespace
        for sa in sorted(served.service_accounts(ctx.res, svc)):
            out[f"spiffe://{ctx.trust_domain}/ns/{ns}/sa/{sa}"] = f"Service {ns}/{svc.meta.name}"
    return out


def _identity_problems(
    ctx: Context, common: CommonTlsContext, found: bk.Dialled, svc: m.Service
) -> list[str]:
    """What the cluster accepts besides exactly its peers' identities, and which of
    them it refuses."""
    wanted = _identities(ctx, found, svc)
    expected = " or ".join(sorted(wanted))
    sans = bk.san_matchers(common)
    if not sans:
        return [f"accepts any identity its CA signed (no SAN matcher; expected exactly {expected})"]
    out = [
        f"accepts {bk.describe_matcher(matcher)}"
        for kind, matcher in sans
        if _exact_uri(kind, matcher) not in wanted
    ]
    out += [
        f"refuses {identity}, which {where} presents"
        for identity, where in wanted.items()
        if not any(_accepts(kind, matcher, identity) for kind, matcher in sans)
    ]
    return [f"{'; '.join(out)} (expected exactly {expected})"] if out else []


def _accepts(kind: str, matcher: StringMatcher, identity: str) -> bool:
    """Whether a SAN matcher admits a certificate whose one URI SAN is ``identity``."""
    if kind not in ("", "URI"):
        return False
    try:
        return string_matcher(matcher)(identity)
    except ModelError:  # a regex RE2 refuses: Envoy refuses the cluster (EV101)
        return False


def _exact_uri(kind: str, matcher: StringMatcher) -> str | None:
    """The identity an exact URI SAN matcher accepts (None for any other matcher)."""
    which, value = read.one_of(matcher, "match_pattern")
    if which != "exact" or kind not in ("", "URI") or not isinstance(value, str):
        return None
    return value


def shown_by(ctx: Context, d: Dialling) -> Comparison | wt.Witness | None:
    """What shows ``d`` with a request: a disagreement ``d``'s rule owns, answered by its
    sidecar through a route dialling the cluster; else the first request such a route
    answered; None when no request went there."""
    label = sidecar_label(d.source)
    for c in ctx.disagreements.get(d.rule, []):
        if c.answered_by != label:
            continue
        route = c.envoy.outcome.route
        if d.frontend is not None and _same_frontend(c.request, d.frontend):
            return c
        if route is not None and route.xds_path in d.routes:
            return c
    if d.frontend is not None:
        return wt.Witness(d.service.meta.key, d.frontend, MESH, note="the Service's frontend")
    for path in d.routes:
        seen = ctx.mesh.seen.get((d.source, path))
        if seen is not None:
            return seen
    return None


def _same_frontend(a: Request, b: Request) -> bool:
    return (a.source, a.address, a.port) == (b.source, b.address, b.port)


def broken_by(ctx: Context, c: Comparison) -> set[str]:
    """The rules (mesh-mtls, mesh-identity) whose mistakes in dialling mesh workloads
    explain the answer to mesh request ``c``: a cluster its route sends to, or the
    passthrough its frontend is given."""
    dialled = clusters_answering(ctx, c)
    return {
        d.rule
        for d in dialling(ctx)
        if d.source == c.request.source
        and (
            (d.frontend is None and d.cluster in dialled)
            or (d.frontend is not None and _same_frontend(c.request, d.frontend))
        )
    }


def clusters_answering(ctx: Context, c: Comparison) -> set[str]:
    """The clusters the xDS route that answered ``c`` (on its client's sidecar) sends to."""
    route = c.envoy.outcome.route
    source = c.request.source
    snap = ctx.mesh.sidecars.get(source) if source is not None else None
    if route is None or not route.xds_path or snap is None:
        return set()
    return {
        name for name, refs in _ROUTED(snap).items() if any(r.path == route.xds_path for r in refs)
    }


def finding(ctx: Context, code: str, found: list[Dialling]) -> Finding:
    """One finding for one mistake of a cluster, seen in the sidecars of ``found``: at the
    HTTPRoute match a request it shows goes through, with that request (and both
    answers, when they differ); at the Service when no request went there."""
    d = found[0]
    shown = next((s for s in (shown_by(ctx, x) for x in found) if s is not None), None)
    svc = f"{d.service.meta.namespace}/{d.service.meta.name}"
    params: dict[str, object] = {}
    if isinstance(shown, Comparison):
        file, line, resource = ctx.where(shown.witness)
        params = {
            "request": shown.request.to_json(),
            "expected": shown.spec.outcome.to_json(),
            "actual": shown.envoy.outcome.to_json(),
        }
    elif shown is not None:
        file, line, resource = ctx.where(shown)
        params = {"request": shown.request.to_json(), "actual": {"problem": d.problem}}
    else:
        where = d.service.meta.where()
        file, line, resource = where.file, where.line, f"Service {svc}"
        params = {"actual": {"problem": d.problem}}
    return new(
        code,
        d.rule,
        file=file,
        line=line,
        resource=resource,
        xds_path=f"clusters[{d.cluster}]",
        proxy=", ".join(sorted({x.source.line() for x in found})),
        cluster=d.cluster,
        service=svc,
        problem=d.problem,
        **params,  # type: ignore[arg-type]
    )


def findings(ctx: Context, rule: str, code: str) -> list[Finding]:
    """``rule``'s findings: one per cluster name and mistake, whichever sidecars have it."""
    grouped: dict[tuple[str, str], list[Dialling]] = {}
    for d in dialling(ctx):
        if d.rule == rule:
            grouped.setdefault((d.cluster, d.problem), []).append(d)
    return [finding(ctx, code, found) for _key, found in sorted(grouped.items())]
