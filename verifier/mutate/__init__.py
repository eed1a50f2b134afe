"""The mutation engine: plausible translator mistakes applied to xDS, to measure ``check``.

``catalog`` lists the operators (``operators/``, one module per xDS area); ``proofs`` (with
``algebra``, ``regex_prefixes``, ``scope``) shows a mutant equivalent; ``run`` scores check.
Operators and proofs see only xDS: they never import the translator or the spec model
(``run`` alone drives the whole pipeline, to score check on each mutant).
"""
