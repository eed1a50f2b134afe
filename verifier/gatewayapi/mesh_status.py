"""The mesh route status a GAMMA controller writes: one RouteParentStatus per parentRef
to a Service (docs/mesh.md, "Status").

The controller's side only: which Service parents it accepts and how their refs
resolve, as ``verifier.gatewayapi.attach`` decides it for Gateway parents (and calls
this for Service ones). The spec model reads the same spec text on its own
(``verifier.semantics.spec.status``); the two are compared, never shared.

- Accepted: False with ``NoMatchingParent`` when the Service does not exist ("there are
  no matching Parents"), or when the parentRef's ``port`` or ``sectionName`` names no
  port of it ("a Route ParentRef specifies a Port and/or SectionName that does not
  match"); False with ``UnsupportedValue`` when the route uses what the aether mesh
  does not implement (as on a Gateway); else True.
- ResolvedRefs: the route's backendRefs, as for a Gateway parent.
"""

from __future__ import annotations

from verifier.gatewayapi import model as m
from verifier.gatewayapi.resources import Resources

# The controller that writes a mesh route's parent status (controllerName): aether's
# mesh, apart from the edge's Gateway controller.
MESH_CONTROLLER = "gateway.aether.io/mesh"


def is_service_parent(ref: m.ParentRef) -> bool:
    """A parentRef to a core Service: group "" and kind Service (a mesh route's)."""
    return ref.service_parent


def accepted(res: Resources, ref: m.ParentRef, unsupported: str | None) -> tuple[str, str, str]:
    """(status, reason, message) of the Accepted condition for the Service parent ``ref``."""
    svc = res.services.get((ref.namespace, ref.name))
    if svc is None:
        return "False", "NoMatchingParent", f"Service {ref.namespace}/{ref.name} not found"
    ports = [
        p
        for p in svc.ports
        if (ref.port is None or p.port == ref.port)
        and (ref.section_name is None or p.name == ref.section_name)
    ]
    if not ports:
        wanted = " and ".join(
            ([f"port {ref.port}"] if ref.port is not None else [])
            + ([f"name {ref.section_name}"] if ref.section_name is not None else [])
        )
        message = f"Service {ref.namespace}/{ref.name} has no port with {wanted}"
        return "False", "NoMatchingParent", message
    if unsupported:
        return "False", "UnsupportedValue", unsupported
    return "True", "Accepted", ""
