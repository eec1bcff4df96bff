# Podman on a machine without a Docker engine or a registry, for the tests
# that build and run the Dockerfile's image (deploy/container_test.sh,
# deploy/kube_test.sh); see shared/notes/containers.md. Sourced, with $work a
# scratch directory that the caller removes.

# podman_setup: the packages, runc, and the highest ulimits root may set here.
podman_setup() {
  ensure_packages podman buildah runc debootstrap catatonit
  cat >"$work/containers.conf" <<'CONF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
CONF
  export CONTAINERS_CONF=$work/containers.conf
  podman images -q -a --no-trunc | sort -u >"$work/images.before"
}

# remove_new_images: exactly the images made since podman_setup (the test
# image, the build stage, and the base image if it was made here).
remove_new_images() {
  podman images -q -a --no-trunc | sort -u | comm -13 "$work/images.before" - \
    | xargs -r podman rmi -f >/dev/null 2>&1 || true
}

# ensure_base_image: no registry, so debian:bookworm(-slim) is made from
# Debian's archive with debootstrap, once.
ensure_base_image() {
  podman image exists docker.io/library/debian:bookworm-slim && return 0
  echo "== building the debian:bookworm base image with debootstrap"
  local mirror
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log"
  rm -rf "$work"/rootfs/var/cache/apt/archives/*.deb "$work"/rootfs/var/lib/apt/lists/*
  cp /etc/apt/sources.list.d/debian.sources "$work/rootfs/etc/apt/sources.list.d/"
  rm -f "$work/rootfs/etc/apt/sources.list"
  tar -C "$work/rootfs" -c . | podman import - docker.io/library/debian:bookworm-slim >/dev/null
  podman tag docker.io/library/debian:bookworm-slim docker.io/library/debian:bookworm
  rm -rf "$work/rootfs"
}

# build_image TAG: the Dockerfile, unchanged.
build_image() {
  ensure_base_image
  echo "== podman build (the Dockerfile, unchanged) -> $1"
  podman build --pull=never --isolation chroot -t "$1" -f Dockerfile . >"$work/build.log" 2>&1 \
    || { tail -40 "$work/build.log"; echo "FAIL: image build"; return 1; }
}

# wait_grpc_serving HOST:PORT: the Python client's health check, for up to 60 s.
# Needs PYTHONPATH with the stubs and client/python.
wait_grpc_serving() {
  for _ in $(seq 1 120); do
    /usr/bin/python3 -c "
import sys; from attention_client import AttentionClient
sys.exit(0 if AttentionClient('$1', timeout=1).health() == 'SERVING' else 1)" 2>/dev/null && return 0
    sleep 0.5
  done
  echo "FAIL: $1 never reported SERVING"
  return 1
}
