#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages: the build's, and what the
# README's Python client needs), builds, and runs attention-server in the
# foreground. Without flags it serves the built-in
# demo models on 0.0.0.0: gRPC on 50051 and the Open Inference Protocol's
# HTTP/JSON on 8000 (as the container does); any flags are passed to the
# server and win over those defaults:
#
#   deploy/run.sh
#   deploy/run.sh --model-dir /srv/models --port 6000 --log-level debug
#   deploy/run.sh --http-port -1          # gRPC only
#
# ATTN_HTTP_PORT, when set, replaces the HTTP default (as in the container).
# Idempotent: a second run installs nothing and only rebuilds what changed.
# BUILD_DIR (default build-deploy) chooses the build folder.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=deploy/packages.sh
. deploy/packages.sh
ensure_packages "${BUILD_PACKAGES[@]}" "${PYTHON_CLIENT_PACKAGES[@]}"

build_dir=${BUILD_DIR:-build-deploy}
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DATTN_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$build_dir" -j"$(nproc)" --target attention-server attention-client >/dev/null
export ATTN_HTTP_PORT=${ATTN_HTTP_PORT:-8000}
echo "== starting $build_dir/bin/attention-server $* (HTTP/JSON on ${ATTN_HTTP_PORT} unless --http-port says otherwise)"
exec "$build_dir/bin/attention-server" "$@"
