"""Every Service parentRef of a mesh route names a Service frontend: the route applies.

Why it matters: a mesh route (an HTTPRoute whose parentRef is a Service, GAMMA) that
names a Service that does not exist, or a port the Service lacks, applies to no
request: the mesh's clients keep reaching the Service as kube-proxy sends them, and
nothing in a sidecar's xDS shows a route that is missing. A GAMMA controller says so
in the route's status (Accepted=False, NoMatchingParent), which nobody reads before
the change is live. This rule gives that status at the field at fault:
EV916 at ``parentRefs[i].name`` for a Service that does not exist (with the closest
name: "did you mean"), EV917 at ``port`` or ``sectionName`` for a port the Service
lacks (with the Service's ports). EV918: a parentRef with ``kind: Service`` and no
``group`` names a Service of the Gateway API group, which does not exist ("To set
the core API group (such as for a "Service" kind referent), Group must be explicitly
set to "" (empty string)"): no mesh and no Gateway applies the route. It reads the
spec model's own reading (``verifier.semantics.spec.status``), never the
controller's; a Service in a namespace a ``--kubeconfig --namespace`` read did not
cover is not judged.

Example: ``parentRefs: [{group: "", kind: Service, name: echo-v3, port: 80}]`` beside
Services echo-v1 and echo-v2: EV916, "did you mean echo-v1?"; ``port: 8081`` on a
Service with ports 80 and 8080: EV917, "the Service's ports are 80 (http), 8080
(http-alt)".
"""

from __future__ import annotations

from collections.abc import Iterable

from verifier.rules.support.mistakes import at, name_fix, refused_at, unknowable

from verifier.check import Context
from verifier.findings import Finding, hint
from verifier.gatewayapi import model as m
from verifier.registry import Rule
from verifier.semantics.spec.mesh import service_parent
from verifier.semantics.spec.status import service_kind_in_gateway_group, service_parent_refusal

NAME = "mesh-route-accepted"


def _parent(ref: m.ParentRef) -> str:
    port = f" port {ref.port}" if ref.port is not None else ""
    section = f" sectionName {ref.section_name}" if ref.section_name else ""
    return f"Service {ref.namespace}/{ref.name}{port}{section}"


def _ports_fix(ctx: Context, ref: m.ParentRef) -> str:
    svc = ctx.res.services[(ref.namespace, ref.name)]
    ports = ", ".join(f"{p.port}" + (f" ({p.name})" if p.name else "") for p in svc.ports)
    return hint("ports-of", ports=ports or "none")


def check(ctx: Context) -> Iterable[Finding]:
    for key in sorted(ctx.res.httproutes):
        route = ctx.res.httproutes[key]
        for ref in route.parent_refs:
            if service_kind_in_gateway_group(ref):
                yield at("EV918", NAME, route.meta, f"{ref.path}.kind", parent=_parent(ref))
                continue
            if not service_parent(ref):
                continue
            refusal = service_parent_refusal(ctx.res, ref)
            if refusal is None or unknowable(ctx.res, refusal):
                continue
            near = None
            if refusal.missing is not None:
                fix, near = name_fix(ctx.res, *refusal.missing)
                code = "EV916"
            else:
                fix, code = _ports_fix(ctx, ref), "EV917"
            yield refused_at(code, NAME, route.meta, refusal, fix, near, parent=_parent(ref))


RULE = Rule(
    name=NAME,
    codes=("EV916", "EV917", "EV918"),
    features=("Mesh",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#routeconditionreason",
    doc=(__doc__ or "").strip(),
    check=check,
)
