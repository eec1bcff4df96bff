#!/usr/bin/env bash
# Builds the image from the Dockerfile (unchanged) with podman, runs it with
# the port published on 127.0.0.1, waits for SERVING, calls each RPC with the
# Python client, checks the process is not root, prints the image size, and
# removes what it made. There is no Docker engine here: podman with runc and
# a debootstrap'd base image stand in (see shared/notes/containers.md).
#   deploy/container_test.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. deploy/packages.sh
. deploy/podman_env.sh
ensure_packages python3-grpcio python3-numpy protobuf-compiler protobuf-compiler-grpc

work=$(mktemp -d)
image=localhost/attention-server:test
name=attention-test-$$
podman_setup
cleanup() {
  podman rm -f "$name" >/dev/null 2>&1 || true
  podman rmi "$image" >/dev/null 2>&1 || true  # the tag, if its image was there before
  remove_new_images
  rm -rf "$work"
}
trap cleanup EXIT

build_image "$image"
size=$(podman image inspect "$image" --format '{{.Size}}')
echo "image size: $(( size / 1000000 )) MB"

. tests/scripts/loopback.sh
port=$(free_port)
mport=$(free_port)
podman run -d --name "$name" -p "127.0.0.1:$port:50051" -p "127.0.0.1:$mport:9090" "$image" >/dev/null
stubs="$work/stubs"
client/python/generate_stubs.sh "$stubs" >/dev/null
export PYTHONPATH=$stubs:$root/client/python
wait_grpc_serving "127.0.0.1:$port"
/usr/bin/python3 tests/client/python/check_rpcs.py "127.0.0.1:$port"
/usr/bin/python3 - "$mport" <<'PY' || { echo "FAIL: /metrics on 9090"; exit 1; }
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
assert 'attn_requests_total{rpc="MultiHeadAttention"' in text, text[:2000]
assert "process_resident_memory_bytes" in text
print("/metrics on 9090: ok")
PY
uid=$(podman exec "$name" id -u)
echo "server process uid in the container: $uid"
[ "$uid" != 0 ] || { echo "FAIL: runs as root"; exit 1; }
podman exec "$name" attention-client health --target 127.0.0.1:50051 >/dev/null \
  || { echo "FAIL: the HEALTHCHECK command does not pass"; exit 1; }
podman logs "$name" 2>&1 | head -3
[ $(( size / 1000000 )) -le 250 ] || { echo "FAIL: image is over 250 MB"; exit 1; }
echo "PASS: image built, serving, every RPC correct, non-root (uid $uid), $(( size / 1000000 )) MB"
