#!/usr/bin/env bash
# Regenerates the echo control service's message types (verifier/live/echoproto/) from
# verifier/live/echoproto/echo.proto with betterproto2's compiler (protoc from grpcio-tools).
#
# The generator is a dev-time tool, not a runtime dependency: its pins are the `protogen`
# extra in pyproject.toml. It runs in a throwaway venv because betterproto2-compiler pins
# ruff~=0.9 (it formats its own output), which would downgrade the project's ruff.
# The output is committed as the compiler writes it; ruff and mypy skip it (pyproject.toml).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$root/verifier/live/echoproto"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

mapfile -t pins < <(python3 -c '
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["optional-dependencies"]["protogen"]))
' "$root/pyproject.toml")

python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q --disable-pip-version-check "${pins[@]}"
mkdir "$tmp/out"
PATH="$tmp/venv/bin:$PATH" "$tmp/venv/bin/python" -m grpc_tools.protoc -I "$dir" \
    --python_betterproto2_out="$tmp/out" \
    --python_betterproto2_opt=client_generation=async,server_generation=async \
    echo.proto

# Everything in the package but the .proto itself is generated: replace it whole.
find "$dir" -mindepth 1 -not -name echo.proto -not -path "$dir" -delete
cp -r "$tmp/out/." "$dir/"
find "$dir" -name __pycache__ -prune -exec rm -rf {} +
# The compiler leaves the root package empty: say what it is (tests/test_architecture.py).
cat > "$dir/__init__.py" <<'PY'
"""Istio's echo control service (``proto.EchoTestService``): message types and grpclib
stubs, generated from echo.proto by scripts/gen_echo_proto.sh. Never edited by hand;
it never imports anything of verifier but its own generated modules."""
PY
echo "regenerated $(find "$dir" -name '*.py' | wc -l) modules in ${dir#"$root"/}"
