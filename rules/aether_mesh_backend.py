"""Clusters for mesh-registered Services use mTLS to the workload's mesh port.

Why it matters: the aether mesh only accepts connections on the workload's tunnel
port 15008, authenticated by the caller's certificate; and the edge must accept only
the backend's own SPIFFE identity, ``spiffe://<trust domain>/ns/<ns>/sa/<sa>``, so a
hijacked address or DNS answer cannot impersonate it. A cluster without TLS, without
a client certificate, pinning no (or another) identity, or dialling another port
either fails every request or talks to whoever answers.

Checked for every cluster that routes forward or mirror to whose Service is
mesh-registered (namespace label ``aether.io/managed: "true"``, or the mesh registry
given to the check): an ``UpstreamTlsContext`` transport socket; a subject-alt-name
matcher (``match_typed_subject_alt_names`` URI, or legacy ``match_subject_alt_names``)
exactly ``spiffe://<any trust domain>/ns/<ns>/sa/<sa>``, where ``sa`` is the
ServiceAccount of the workloads the Service selects (``default`` if none), and no
matcher accepting anything else; a client certificate (``tls_certificates``, SDS or a
certificate provider); every endpoint on port 15008.

Example: ``mesh-apps/mesh-backend-v1`` routed through a cluster whose SAN matcher is
``spiffe://cluster.local/ns/mesh-apps/sa/default`` while its pods run as
``mesh-backend-v1``: the finding names the expected identity.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from verifier.rules.support import backends as bk
from verifier.rules.support import served as spec

from verifier.check import Context
from verifier.findings import Finding
from verifier.registry import Rule
from verifier.xds import read

if TYPE_CHECKING:  # messages or records (verifier.xds.read), read alike
    from envoy_data_plane.envoy.extensions.transport_sockets.tls.v3 import CommonTlsContext
    from envoy_data_plane.envoy.type.matcher.v3 import StringMatcher

NAME = "aether-mesh-backend"
COMMON_TLS = "envoy.extensions.transport_sockets.tls.v3.CommonTlsContext"
CODE = "EV302"
MESH_PORT = 15008


def _identity_problem(common: CommonTlsContext, ns: str, accounts: set[str]) -> str | None:
    expected = " or ".join(f"spiffe://<trust domain>/ns/{ns}/sa/{sa}" for sa in sorted(accounts))

    def good(kind: str, matcher: StringMatcher) -> bool:
        which, value = read.one_of(matcher, "match_pattern")
        if which != "exact" or kind not in ("", "URI") or not isinstance(value, str):
            return False
        head, _, tail = value.removeprefix("spiffe://").partition("/")
        return (
            value.startswith("spiffe://")
            and bool(head)
            and tail in {f"ns/{ns}/sa/{sa}" for sa in accounts}
        )

    sans = bk.san_matchers(common)
    others = [m for k, m in sans if not good(k, m)]
    if not sans:
        return f"pins no SPIFFE identity, expected {expected}"
    if others:
        shown = ", ".join(bk.describe_matcher(m) for m in others)
        verb = "pins" if len(others) == len(sans) else "also accepts"
        return f"{verb} {shown}, expected only {expected}"
    return None


def problems(ctx: Context, found: bk.Dialled, common: CommonTlsContext | None) -> list[str]:
    svc = found.service
    out = []
    if common is None:
        out.append("has no TLS transport socket (UpstreamTlsContext), expected mTLS")
    else:
        accounts = spec.service_accounts(ctx.res, svc)
        out.append(_identity_problem(common, svc.meta.namespace, accounts) or "")
        certs = (
            common.tls_certificates
            or common.tls_certificate_sds_secret_configs
            or common.tls_certificate_provider_instance
            or common.tls_certificate_certificate_provider_instance
        )
        if not certs:
            out.append("presents no client certificate, expected the edge's mesh certificate")
    wrong = sorted({f"{h}:{p}" for h, p in found.targets if p != MESH_PORT})
    if wrong:
        out.append(f"dials {', '.join(wrong)}, expected the workloads' port {MESH_PORT}")
    return [p for p in out if p]


def check(ctx: Context) -> Iterable[Finding]:
    registry = ctx.mesh_registry
    for cluster, found, _refs in bk.with_service(
        ctx.snapshot, ctx.res, unjudged=ctx.unjudged.clusters
    ):
        svc = found.service
        if not spec.is_mesh(ctx.res, svc.meta.namespace, svc.meta.name, registry):
            continue
        tls = bk.upstream_tls(cluster)
        common = (tls.common_tls_context or read.empty(COMMON_TLS)) if tls is not None else None
        for problem in problems(ctx, found, common):
            yield bk.backend_finding(CODE, NAME, cluster, svc, problem)


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("AetherEdgeBackends",),
    spec_ref="docs/translate.md#clusters-the-aether-edges-two-backend-paths",
    doc=(__doc__ or "").strip(),
    check=check,
    edge_xds=True,
)
