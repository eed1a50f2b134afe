"""Cross-namespace references and the ReferenceGrants that allow them.

Used for Gateway -> Secret (listener certificates) and HTTPRoute -> Service
(backendRefs, mirrors). Written from ``apis/v1/referencegrant_types.go``.
"""

from __future__ import annotations

from verifier.gatewayapi.model import GATEWAY_GROUP
from verifier.gatewayapi.resources import Resources

# ReferenceGrant: "identifies kinds of resources in other namespaces that are
# trusted to reference the specified kinds of resources in the same namespace
# as the policy." ReferenceGrantTo.name: "When unspecified, this policy refers
# to all resources of the specified Group and Kind in the local namespace."
# HTTPBackendRef: "when a namespace different than the local namespace is
# specified, a ReferenceGrant object is required in the referent namespace".


def reference_allowed(
    res: Resources,
    *,
    from_group: str,
    from_kind: str,
    from_namespace: str,
    to_group: str,
    to_kind: str,
    to_namespace: str,
    to_name: str,
) -> tuple[bool, str]:
    """Is this reference allowed, and which grant (or rule) says so?

    Same-namespace references need no grant. Otherwise a ReferenceGrant in the
    *target* namespace must list the source (group, kind, namespace) in
    ``from`` and the target (group, kind[, name]) in ``to``.
    """
    if from_namespace == to_namespace:
        return True, "same namespace"
    for (ns, name), grant in sorted(res.reference_grants.items()):
        if ns != to_namespace:
            continue
        from_ok = any(
            g == from_group and k == from_kind and n == from_namespace for g, k, n in grant.from_
        )
        to_ok = any(
            g == to_group and k == to_kind and (n is None or n == to_name) for g, k, n in grant.to
        )
        if from_ok and to_ok:
            return True, f"ReferenceGrant {ns}/{name}"
    return False, f"no ReferenceGrant in namespace {to_namespace} allows it"


def gateway_may_use(
    res: Resources,
    gateway_namespace: str,
    kind: str,
    namespace: str,
    name: str,
    *,
    from_kind: str = "Gateway",
) -> tuple[bool, str]:
    """A Gateway's (or ListenerSet's) reference to a core object (a certificate
    Secret, a CA ConfigMap)."""
    return reference_allowed(
        res,
        from_group=GATEWAY_GROUP,
        from_kind=from_kind,
        from_namespace=gateway_namespace,
        to_group="",
        to_kind=kind,
        to_namespace=namespace,
        to_name=name,
    )
