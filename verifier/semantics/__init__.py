"""edge-verifier."""
