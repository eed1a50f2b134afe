"""The mesh part of drawn worlds: GAMMA routes (an HTTPRoute whose parent is a Service)
and the client workloads whose requests they route.

The base (``mesh_base``) has the mesh's namespaces, Services and client workloads.
A drawn mesh route is a producer route (in ``mesh-a``) or a consumer route (in
``mesh-b``), on one or both Services, with or without ``parentRef.port``; its rules
are drawn as an edge route's (matches, filters, weights, mirrors), with backends among
the edge's Services and the mesh's. The first choice of each draw is the plainest
(a producer route, every port), so a shrunk counterexample keeps a consumer route or
a port only when the failure needs it. A mesh world may also draw a client of its own
(``drawn_clients``), capturing the mesh's Services or all its traffic. Check's mesh
witnesses send every match from every client, so consumer/producer precedence and
port selection are exercised from each namespace.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from .mesh_base import (
    DRAWN_CLIENT_NS,
    MESH_NAMESPACES,
    MESH_PORTS,
    MESH_SERVICES,
    PRODUCER_NS,
    client_docs,
)
from .worlds import (
    GROUP,
    OLDEST,
    SERVICES,
    _reused,
    _sampled,
    _small,
    created,
    route_rules,
)

# Backends a mesh route draws from: the edge's Services (cleartext) and the mesh's (mTLS).
MESH_BACKENDS = SERVICES + MESH_SERVICES
MAX_MESH_ROUTES = 2


@st.composite
def mesh_routes(draw: st.DrawFn, index: int, pool: list[dict[str, Any]]) -> dict[str, Any]:
    """Mesh route ``m{index}``: producer or consumer, on one or both mesh Services,
    each parentRef on every port or one (``parentRef.port``)."""
    ns = draw(_sampled(MESH_NAMESPACES))
    names = draw(
        _reused(
            st.lists, _sampled([n for _, n in MESH_SERVICES]), min_size=1, max_size=2, unique=True
        )
    )
    refs = []
    for name in names:
        ref: dict[str, Any] = {"group": "", "kind": "Service", "name": name}
        if ns != PRODUCER_NS:
            ref["namespace"] = PRODUCER_NS
        port = draw(_sampled((None, None, *(p for p, _ in MESH_PORTS))))
        if port is not None:
            ref["port"] = port
        refs.append(ref)
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "HTTPRoute",
        "metadata": {
            "name": f"m{index}",
            "namespace": ns,
            "creationTimestamp": draw(_sampled([created(index), OLDEST])),
        },
        "spec": {"parentRefs": refs, "rules": route_rules(draw, ns, pool, MESH_BACKENDS)},
    }


def drawn_clients(draw: st.DrawFn) -> list[dict[str, Any]]:
    """None first; else a client in ``mesh-c`` (a mesh namespace with no route of its
    own), whose sidecar captures the mesh's Services only or, with the annotation, all
    its outbound traffic (then the edge's Services too, through the sidecar)."""
    how = draw(_sampled((None, None, "mesh-only", "redirect-all")))
    if how is None:
        return []
    return client_docs(DRAWN_CLIENT_NS, "client", redirect_all=how == "redirect-all")


def mesh_route_count(draw: st.DrawFn) -> int:
    """None first (the plainest world, and most edge bugs need no mesh), else one or two
    (a producer and a consumer route, or two rivals on one Service: what precedence
    between mesh routes needs)."""
    more: int = draw(_sampled((0, 1)))
    return draw(_small(MAX_MESH_ROUTES)) if more else 0


def is_mesh_route(doc: dict[str, Any]) -> bool:
    return doc["kind"] == "HTTPRoute" and any(
        ref.get("kind") == "Service" for ref in doc["spec"]["parentRefs"]
    )
