"""Istio's echo control service (``proto.EchoTestService``): message types and grpclib
stubs, generated from echo.proto by scripts/gen_echo_proto.sh. Never edited by hand;
it never imports anything of verifier but its own generated modules."""
