"""The Envoy 1.40 model: what Envoy does with a request, given only the xDS.

Written from Envoy's docs and held to the real binary by the live tests: listeners, filter
chains, virtual hosts, route matching, actions, clusters. Never imports the spec model
(``verifier.semantics.spec``) or the translator: it judges xDS from any source.
"""
