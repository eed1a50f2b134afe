"""A consumer route changes only its own namespace's traffic, and there it takes precedence.

Why it matters: GEP-1294 (MeshConsumerRoute): a mesh route in another namespace than
its Service is a consumer route, "only applied to outbound connections originating
from the same namespace as the Route", and for those clients it replaces the Service's
producer routes. A sidecar that applies a consumer route to a client of another
namespace lets one team reroute, rewrite or break another team's calls; one that
keeps the producer routes where the client's namespace has its own leaves the
consumer's routing unapplied.

Owns the disagreements between the spec model and the Envoy model on a mesh request
whose client's route table for that Service port (its sidecar's xDS) holds a consumer
route of another namespace, or a producer route where the client's namespace has a
consumer route, or lacks that consumer route (docs/mesh.md, per port). One finding
per leaked or outranked route, at its match; the message says which happened, to the
clients of which namespace.

Example: mesh-client's consumer route for echo-v2 in mesh-apps/client's route table:
``GET http://echo-v2.mesh-apps.svc.cluster.local/`` from mesh-apps/client gets the
consumer route's answer, where the spec says the producer route's: "consumer route
HTTPRoute mesh-client/echo-v2-consumer of namespace mesh-client changes traffic it
must not: it is applied for the clients of namespace mesh-apps".
"""

from __future__ import annotations

from collections.abc import Iterable

from verifier.rules.ownership import route_table

from verifier.check import Comparison, Context
from verifier.findings import Finding, hint
from verifier.registry import Rule

NAME = "mesh-consumer-route"
CODE = "EV921"


def _effect(ctx: Context, c: Comparison) -> str:
    """Which of the three happened: the consumer route ``c`` is about applied to another
    namespace's client, outranked by a producer route, or missing from its own client's
    route table (ownership's reading of that table)."""
    assert c.request.source is not None
    service_namespace, service = c.witness.gateway
    route = ctx.route(c.witness.route)
    if route is None:  # ownership always names the route; say what is known
        return hint("consumer-route-missing", route=f"for Service {service_namespace}/{service}")
    name = f"HTTPRoute {route.meta.namespace}/{route.meta.name}"
    if route.meta.namespace != c.request.source.namespace:
        return hint("consumer-route-leaked", route=name, namespace=route.meta.namespace)
    producers = [
        f"HTTPRoute {ns}/{n}"
        for (ns, n), _rule, _match in route_table(c, ctx) or []
        if ns == service_namespace
    ]
    if producers:
        return hint("consumer-route-outranked", route=name, producer=producers[0])
    return hint("consumer-route-missing", route=name)


def check(ctx: Context) -> Iterable[Finding]:
    for c in ctx.disagreements.get(NAME, []):
        assert c.request.source is not None  # only mesh requests are this rule's
        client = c.request.source.namespace
        effect = _effect(ctx, c)
        yield ctx.comparison_finding(CODE, NAME, c, effect=effect, client_namespace=client)


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("MeshConsumerRoute",),
    spec_ref="https://gateway-api.sigs.k8s.io/geps/gep-1294/",
    doc=(__doc__ or "").strip(),
    check=check,
    reads_models=True,
)
