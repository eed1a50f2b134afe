"""Every cluster a route forwards or mirrors to exists in the snapshot.

Why it matters: Envoy answers a request whose route names a missing cluster with the
route's ``cluster_not_found_response_code`` (503 by default), and silently drops a
mirror to a missing cluster, while the spec routes those requests to a backend.

Not a finding: a route (or weighted share) whose ``cluster_not_found_response_code`` is
``INTERNAL_SERVER_ERROR``: that is how an implementation answers the spec's 500 for an
invalid backendRef ("requests that would have been sent to that backend MUST receive
a 500 status code", HTTPBackendRef). Routes that choose their cluster at request time
(``cluster_header``, cluster specifier plugins) are not judged.

Example: ``route: {cluster: k8s/shop/cart/8080}`` with no such cluster in CDS answers
503 where the spec forwards to ``shop/cart:8080``.
"""

from __future__ import annotations

from collections.abc import Iterable

from verifier.rules.support import walk

from verifier.check import Context
from verifier.findings import Finding, new
from verifier.registry import Rule
from verifier.xds.enums import RouteActionClusterNotFoundResponseCode as Cnf

NAME = "no-missing-clusters"
CODE = "EV102"
STATUS: dict[int, str] = {
    Cnf.SERVICE_UNAVAILABLE: "503",
    Cnf.NOT_FOUND: "404",
    Cnf.INTERNAL_SERVER_ERROR: "500",
}
MIRROR = "the request without mirroring it"


def _references(ref: walk.RouteRef) -> list[tuple[str, str, str]]:
    """(cluster, field, what Envoy answers) for every cluster name the route uses."""
    act = walk.action(ref.route)
    if act is None:
        return []
    out: list[tuple[str, str, str]] = []
    code = int(act.cluster_not_found_response_code or 0)  # any number: enums are open
    if code != Cnf.INTERNAL_SERVER_ERROR:
        out += [(c, f, STATUS.get(code, "503")) for c, f in walk.forward_clusters(act)]
    mirrors = walk.mirror_clusters(act.request_mirror_policies, "route.request_mirror_policies")
    return out + [(c, f, MIRROR) for c, f in mirrors]


def check(ctx: Context) -> Iterable[Finding]:
    existing = {c.name for c in ctx.snapshot.clusters}
    for ref in walk.routes(ctx.snapshot):
        if ctx.unjudged.has(ref):
            continue  # serves a route kind the edge does not read
        for cluster, field, answer in _references(ref):
            if cluster in existing:
                continue
            yield new(
                CODE,
                NAME,
                route=ref.label,
                cluster=cluster,
                status=answer,
                **walk.route_where(ctx, ref),
                xds_path=f"{ref.path}.{field}",
                actual={"cluster": cluster, "exists": False},
            )
    yield from _vhost_mirrors(ctx, existing)


def _vhost_mirrors(ctx: Context, existing: set[str]) -> Iterable[Finding]:
    """Mirror policies on virtual hosts and route configurations apply to every route."""
    for base, rc in walk.route_configs(ctx.snapshot):
        scopes = [(base, rc.request_mirror_policies)] + [
            (f"{base}.virtual_hosts[{vh.name}]", vh.request_mirror_policies)
            for vh in rc.virtual_hosts
        ]
        for path, policies in scopes:
            for cluster, field in walk.mirror_clusters(policies, "request_mirror_policies"):
                if cluster not in existing:
                    yield new(
                        CODE,
                        NAME,
                        route=path,
                        cluster=cluster,
                        status=MIRROR,
                        resource=f"RouteConfiguration {rc.name}",
                        xds_path=f"{path}.{field}",
                        actual={"cluster": cluster, "exists": False},
                    )


RULE = Rule(
    name=NAME,
    codes=(CODE,),
    features=("HTTPRoute",),
    spec_ref="https://gateway-api.sigs.k8s.io/reference/spec/#httpbackendref",
    doc=(__doc__ or "").strip(),
    check=check,
)
