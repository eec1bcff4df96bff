#!/usr/bin/env bash
# Generates the Python gRPC stubs for the API, OIP and health protos, for
# using the client from the source tree (an installed package has its own).
#   client/python/generate_stubs.sh [OUT_DIR]   (default client/python/generated)
# Needs protobuf-compiler, protobuf-compiler-grpc (grpc_python_plugin) and,
# to use them, python3-grpcio under /usr/bin/python3.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
proto=$here/../../proto
out=${1:-$here/generated}
mkdir -p "$out"
plugin=--plugin=protoc-gen-grpc_python=$(command -v grpc_python_plugin)
protoc -I "$proto" --python_out="$out" --grpc_python_out="$out" "$plugin" \
  "$proto/attention/v1/attention.proto" "$proto/attention/v1/session.proto" \
  "$proto/inference/open_inference_grpc.proto"
# health.proto is generated at the top level: a grpc/ folder would shadow the
# grpcio package.
protoc -I "$proto/grpc/health/v1" --python_out="$out" --grpc_python_out="$out" "$plugin" \
  "$proto/grpc/health/v1/health.proto"
echo "stubs written to $out"
