"""An mTLS cluster to mesh workloads accepts exactly the identities of the pods it dials.

Why it matters: mutual TLS authenticates only as much as the client checks. Each pod
of a mesh workload presents ``spiffe://<trust domain>/ns/<ns>/sa/<serviceaccount>``,
its own ServiceAccount's identity; a sidecar cluster that also accepts another
ServiceAccount, another trust domain, or any identity a prefix, suffix or regex
admits lets an impostor with such a certificate take the Service's traffic; one
that does not accept the identity its pods present fails every request to them.

Checked on every judged sidecar's xDS, for every cluster with an ``UpstreamTlsContext``
to a mesh-registered Service's pods: its SAN matchers (typed URI matchers, or the
legacy ``match_subject_alt_names``) must be exactly one ``exact`` matcher per identity
its pods present, in this check's trust domain (``--trust-domain``). Which identity
answers where is the directory's (each pod's ServiceAccount, from its workload),
never the cluster's name or metadata. A refused identity shows in the answers (a 503
where the spec forwards): those disagreements are this rule's; the finding points at
the HTTPRoute match of a request that goes through the cluster, else at the Service.

Example: the cluster ``mesh/mesh-apps/echo-v1/80`` matching ``prefix
'spiffe://cluster.local/ns/mesh-apps/'``: it accepts every ServiceAccount of
mesh-apps, where only ``.../sa/echo-v1`` answers there.
"""

from __future__ import annotations

from collections.abc import Iterable

from verifier.rules.support import mesh

from verifier.check import Context
from verifier.findings import Finding
from verifier.registry import Rule

NAME = mesh.IDENTITY
CODE = "EV920"


def check(ctx: Context) -> Iterable[Finding]:
    return mesh.findings(ctx, NAME, CODE)


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("Mesh", "AetherEdgeBackends"),
    spec_ref="docs/mesh.md#what-check-judges",
    doc=(__doc__ or "").strip(),
    check=check,
    reads_models=True,
)
