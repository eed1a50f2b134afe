"""Property-based fuzzing of route translation (``edge-verify fuzz``).

The strategies (``worlds``) draw valid Gateway API worlds and requests biased to
the boundaries of their matches; the properties (``properties``) say what every
translation of a world must satisfy; the campaign (``campaign``) runs them under
Hypothesis with a time budget, keeps the example database for replay, and writes
each shrunk counterexample as a fixture that ``check`` reads as it is.

The strategies, requests and coverage never import the translator, the Envoy
model or xDS: what is drawn must not lean on what is judged. Nothing here
imports the command line (``command`` is its entry, called by ``verifier.cli``).
"""
