"""Every mesh route reaches the clients it is written for: no namespace lacks the mesh label.

Why it matters: a mesh route is applied by the client's sidecar, and aether gives a
sidecar only to workloads of mesh-registered namespaces (``aether.io/managed:
"true"``), which captures connections to mesh-registered Services only, unless the
pod redirects all its outbound traffic (``capture.aether.io/redirect-all``). A GAMMA
controller accepts the route all the same (Accepted, ResolvedRefs), so nothing in its
status, and nothing in any sidecar's xDS, shows that the route is never applied: the
clients' requests go through kube-proxy, unchanged. Two ways, each at the parentRef:

- EV926: the parent Service is not mesh-registered (its namespace lacks the label and
  no ``--mesh-registry`` names it): only redirect-all sidecars apply the route; the
  finding names the clients of the input that do, or says none does;
- EV927: a consumer route in a namespace that is not mesh-registered: its workloads
  have no sidecar, so the route, which applies to that namespace's clients only,
  applies to no request.

Warnings, not errors: the route is valid and accepted by the spec, and whether it is
applied rests on aether's deployment facts as the input shows them (a namespace's
label may be set by another tool than the one that ships the routes). The reading is
the spec model's, the one ``explain --from`` traces (``rules/support/mesh_clients.py``).
A mesh case that fails for this reason points at the parentRef (``case-expectations``,
a related location of its EV703). Namespaces a ``--kubeconfig --namespace`` read did
not cover are not judged.

Example: namespace ``payments`` without the label, HTTPRoute ``payments/ledger-canary``
on Service ``payments/ledger``: EV926 at its parentRef, "no client's sidecar applies
it ... (client storefront/web: its sidecar captures mesh-registered Services only, and
payments/ledger is not one: not captured)".
"""

from __future__ import annotations

from collections.abc import Iterable

from verifier.rules.support.mesh_clients import UNREGISTERED_SERVICE, Unapplied, unapplied
from verifier.rules.support.mistakes import at

from verifier.check import Context
from verifier.findings import Finding, hint
from verifier.registry import Rule

NAME = "mesh-route-clients"


def _finding(u: Unapplied) -> Finding:
    ref, svc = u.ref, u.service
    parent = f"Service {ref.namespace}/{ref.name}" + (f" port {ref.port}" if ref.port else "")
    clients = [s.line() for s in u.clients]
    said: dict[str, str] = {"namespace": u.route.meta.namespace}
    if u.code == UNREGISTERED_SERVICE:
        applied = (
            hint("mesh-applied-by", clients=", ".join(clients))
            if clients
            else hint("mesh-applied-by-none")
        )
        said = {"namespace": svc.meta.namespace, "applied": applied}
    return at(
        u.code,
        NAME,
        u.route.meta,
        ref.path,
        actual={"clients": clients, "service_namespace": svc.meta.namespace},
        parent=parent,
        why=u.why or hint("mesh-no-clients"),
        **said,
    )


def check(ctx: Context) -> Iterable[Finding]:
    for u in unapplied(ctx):
        yield _finding(u)


RULE = Rule(
    name=NAME,
    codes=("EV926", "EV927"),
    features=("Mesh",),
    spec_ref="https://gateway-api.sigs.k8s.io/mesh/gamma/",
    doc=(__doc__ or "").strip(),
    check=check,
)
