"""xDS as data: envoy-data-plane messages, decoded fast and held as a ``Snapshot``.

codec (Any registry, cached validators, JSON in every form Envoy writes), snapshot (reading
and writing config_dumps, per-type files, DiscoveryResponses). Knows nothing of Gateway API:
never imports ``verifier.gatewayapi``, the models, the translator or the rules.
"""
