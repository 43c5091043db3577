#!/usr/bin/env bash
# Generate the Python code for proto/*.proto (committed; see docs/tls.md and docs/architecture.md).
#   bash proto/generate.sh          regenerate proto/*_pb2.py, *_pb2.pyi and *_grpc.py in place
#   bash proto/generate.sh --check  regenerate into a temporary directory and fail if the
#                                   committed files differ (CI runs this)
# Uses the pinned grpcio-tools (its bundled protoc) and grpclib's protoc plugin from .venv.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV_BIN="$ROOT/.venv/bin"
PY="${PYTHON:-$VENV_BIN/python}"
PLUGIN="$VENV_BIN/protoc-gen-grpclib_python"
[ -x "$PLUGIN" ] || PLUGIN="$(command -v protoc-gen-grpclib_python || true)"
if [ -z "$PLUGIN" ] || ! "$PY" -c 'import grpc_tools.protoc' 2>/dev/null; then
  echo "proto/generate.sh: grpcio-tools or grpclib's protoc plugin is missing:" \
       "run .venv/bin/pip install -e '.[dev]'" >&2
  exit 2
fi

generate() {  # $1: output directory (the package path proto/ is created under it)
  "$PY" -m grpc_tools.protoc -I . \
    --plugin=protoc-gen-grpclib_python="$PLUGIN" \
    --python_out="$1" --pyi_out="$1" --grpclib_python_out="$1" \
    proto/*.proto
}

if [ "${1:-}" = "--check" ]; then
  TMP="$(mktemp -d)"
  trap 'rm -rf "$TMP"' EXIT
  generate "$TMP"
  stale=0
  for f in "$TMP"/proto/*; do
    name="proto/$(basename "$f")"
    if ! cmp -s "$f" "$name"; then echo "differs or missing: $name" >&2; stale=1; fi
  done
  for f in proto/*_pb2.py proto/*_pb2.pyi proto/*_grpc.py; do
    [ -e "$f" ] || continue
    [ -e "$TMP/$f" ] || { echo "no longer generated: $f" >&2; stale=1; }
  done
  if [ $stale -ne 0 ]; then
    echo "generated code in proto/ is stale: run bash proto/generate.sh" >&2
    exit 1
  fi
  echo "generated code in proto/ is current"
elif [ $# -eq 0 ]; then
  generate .
else
  echo "usage: bash proto/generate.sh [--check]" >&2
  exit 2
fi
