"""The properties' names, apart from the properties themselves.

The command line lists them in ``edge-verify fuzz --help`` and checks
``--property``; importing the properties would load the models, the
translator and Hypothesis into every command's start-up.
``verifier.fuzz.properties.PROPERTIES`` is keyed by exactly these names
(tests/test_startup.py holds it).
"""

from __future__ import annotations

# Searched by default; envoy-agrees needs a real Envoy (--envoy) and a network namespace.
DEFAULT_PROPERTIES = ("models-agree", "metamorphic", "status-consistent", "envoy-accepts")
LIVE_PROPERTIES = frozenset({"envoy-agrees"})
PROPERTY_NAMES = (*DEFAULT_PROPERTIES, *sorted(LIVE_PROPERTIES))
