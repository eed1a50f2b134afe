"""Mutation operators, one module per xDS area; ``verifier.mutate.catalog`` lists them all.

routes (matching and order), actions (where a route sends requests), filters (what a route
changes), clusters (clusters and endpoints), listeners (listeners, route configs, domains).
Never imports the translator or the spec model: operators see only xDS.
"""
