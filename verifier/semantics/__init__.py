"""The two executable models that must agree, and the vocabulary they share.

``spec/`` models the Gateway API, ``envoy/`` models Envoy 1.40; beside them the shared
vocabulary: ``request`` (Request, Outcome), ``cases``, ``directory``, ``pem``, and the
witness requests (``witness*``, drawn from the spec's matches, never from the Envoy model).
Pure (no I/O); nothing here imports the translator, and neither model imports the other.
"""
