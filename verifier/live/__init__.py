"""The live data plane: real Envoy fed our xDS, echo backends, DNS; the I/O side of the verifier.

Nothing here decides what *should* happen (that is ``semantics``); it only
observes what a real Envoy *does* with a snapshot, so the models can be
checked against it. The models never import this package (they stay pure); it may
use them, to say which of three answers is the odd one out.
"""
