"""Gateway API input: YAML to typed, frozen resources with file:line, validated and attached.

load (YAML, strict schemas in ``schema_*``), validate (the CRDs' rules), attach (parentRefs,
allowedRoutes, hostnames, ReferenceGrants, status), mesh_registry. The input layer: never
imports the models, the translator, ``verifier.xds`` or envoy-data-plane.
"""

# The controllerName the aether edge acts for: a constant the command line needs
# before it loads anything else.
DEFAULT_CONTROLLER = "gateway.aether.io/edge"
