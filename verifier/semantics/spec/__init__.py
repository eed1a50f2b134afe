"""The Gateway API model: what the spec says a Gateway does with a request.

Written from the spec text: attachment, listeners, hostnames, matching, precedence, filters.
Never imports the Envoy model (``verifier.semantics.envoy``), the translator, ``verifier.xds``
or envoy-data-plane: it must not share a single decision with what it judges.
"""
