"""edge-verifier: proves an Envoy edge's xDS does what the Gateway API resources say.

The pipeline and the folders are described in docs/architecture.md; ``cli`` only parses
arguments and hands each command to one function (``pipeline``, ``check``, ``explain``).
"""

from verifier import _deferred

_deferred.install()
