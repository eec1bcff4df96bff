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
ensure_packages podman buildah runc debootstrap python3-grpcio python3-numpy protobuf-compiler protobuf-compiler-grpc

work=$(mktemp -d)
image=localhost/attention-server:test
name=attention-test-$$
podman images -q -a --no-trunc | sort -u >"$work/images.before"
# Removes the container, and exactly the images this run created (the test
# image, the build stage, and the base image if it was made here).
cleanup() {
  podman rm -f "$name" >/dev/null 2>&1 || true
  podman images -q -a --no-trunc | sort -u | comm -13 "$work/images.before" - \
    | xargs -r podman rmi -f >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# runc, and the highest ulimits root may set here.
cat >"$work/containers.conf" <<'CONF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
CONF
export CONTAINERS_CONF=$work/containers.conf

# No registry: make debian:bookworm(-slim) from Debian's archive, once.
if ! podman image exists docker.io/library/debian:bookworm-slim; then
  echo "== building the debian:bookworm base image with debootstrap"
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log"
  rm -rf "$work"/rootfs/var/cache/apt/archives/*.deb "$work"/rootfs/var/lib/apt/lists/*
  cp /etc/apt/sources.list.d/debian.sources "$work/rootfs/etc/apt/sources.list.d/"
  rm -f "$work/rootfs/etc/apt/sources.list"
  tar -C "$work/rootfs" -c . | podman import - docker.io/library/debian:bookworm-slim >/dev/null
  podman tag docker.io/library/debian:bookworm-slim docker.io/library/debian:bookworm
  rm -rf "$work/rootfs"
fi

echo "== podman build (the Dockerfile, unchanged)"
podman build --pull=never --isolation chroot -t "$image" -f Dockerfile . >"$work/build.log" 2>&1 \
  || { tail -40 "$work/build.log"; echo "FAIL: image build"; exit 1; }
size=$(podman image inspect "$image" --format '{{.Size}}')
echo "image size: $(( size / 1000000 )) MB"

. tests/scripts/loopback.sh
port=$(free_port)
mport=$(free_port)
podman run -d --name "$name" -p "127.0.0.1:$port:50051" -p "127.0.0.1:$mport:9090" "$image" >/dev/null
stubs="$work/stubs"
client/python/generate_stubs.sh "$stubs" >/dev/null
export PYTHONPATH=$stubs:$root/client/python
for _ in $(seq 1 120); do
  /usr/bin/python3 -c "
import sys; from attention_client import AttentionClient
sys.exit(0 if AttentionClient('127.0.0.1:$port', timeout=1).health() == 'SERVING' else 1)" 2>/dev/null && break
  sleep 0.5
done
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
