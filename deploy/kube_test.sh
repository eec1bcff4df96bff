#!/usr/bin/env bash
# Runs deploy/kubernetes/ for real, with `podman kube play` and the image
# built from the Dockerfile: the PersistentVolumeClaim (a podman volume,
# filled with tests/golden/models), then the Deployment with its image, args,
# env, ports, volume mount, resources and securityContext as written. Checks
# from 127.0.0.1 through the published ports: gRPC health, ListModels (the
# volume's models), every PyTorch golden case, the OIP HTTP port and
# /metrics. Podman does not run gRPC probes, so the test runs each probe's
# check inside the pod instead. Then `podman kube down` and a check that
# nothing it made is left. See shared/notes/containers.md.
#
#   deploy/kube_test.sh            (tests/run.sh --all runs it)
#
# What the test changes in its copy of deployment.yaml, and why:
#   image     the tag it just built (the manifest's attention-server:latest
#             is whatever the cluster's registry holds);
#   replicas  1, since every replica would publish the same host ports;
#   hostPort  a free port per container port, with hostIP 127.0.0.1, so that
#             the pod is reachable from the host and from nowhere else.
# ATTN_KUBE_IMAGE=TAG uses an image built before instead of building one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. deploy/packages.sh
. deploy/podman_env.sh
. tests/scripts/loopback.sh
ensure_packages python3-grpcio python3-numpy python3-yaml protobuf-compiler protobuf-compiler-grpc curl

work=$(mktemp -d)
podman_setup
image=${ATTN_KUBE_IMAGE:-localhost/attention-server:kube-test-$$}
volume=attention-models  # the manifest's claimName
if podman volume exists "$volume"; then
  echo "FAIL: a podman volume named $volume exists already; not touching it"
  exit 1
fi
played=0
cleanup() {
  [ "$played" = 1 ] && podman kube down "$work/deployment.yaml" >/dev/null 2>&1 || true
  podman volume rm -f "$volume" >/dev/null 2>&1 || true
  [ -n "${ATTN_KUBE_IMAGE:-}" ] || podman rmi "$image" >/dev/null 2>&1 || true  # the tag
  remove_new_images  # images made here: the build, podman's pause image
  rm -rf "$work"
}
trap cleanup EXIT

[ -n "${ATTN_KUBE_IMAGE:-}" ] || build_image "$image"

grpc_port=$(free_port)
http_port=$(free_port)
metrics_port=$(free_port)
/usr/bin/python3 - deploy/kubernetes/deployment.yaml "$work/deployment.yaml" "$image" \
  "$grpc_port" "$http_port" "$metrics_port" <<'PY'
import sys, yaml
src, dst, image, grpc_port, http_port, metrics_port = sys.argv[1:]
d = yaml.safe_load(open(src))
d["spec"]["replicas"] = 1
(c,) = d["spec"]["template"]["spec"]["containers"]
c["image"] = image
host = {"grpc": grpc_port, "http": http_port, "metrics": metrics_port}
for p in c["ports"]:
    p["hostPort"], p["hostIP"] = int(host[p["name"]]), "127.0.0.1"
yaml.safe_dump(d, open(dst, "w"), sort_keys=False)
PY

echo "== podman kube play models-pvc.yaml (a volume), filled with tests/golden/models"
podman kube play deploy/kubernetes/models-pvc.yaml >/dev/null
mount=$(podman volume inspect "$volume" --format '{{.Mountpoint}}')
cp tests/golden/models/*.safetensors "$mount/"
chmod 0644 "$mount"/*.safetensors

echo "== podman kube play deployment.yaml"
played=1
podman kube play "$work/deployment.yaml" | tee "$work/play.log"
pod=$(podman pod ps --filter label=app.kubernetes.io/name=attention-server --format '{{.Name}}' \
  | head -1)
[ -z "$pod" ] && pod=$(podman pod ps --format '{{.Name}}' | grep '^attention-server' | head -1)
ctr=$(podman ps --filter "pod=$pod" --format '{{.Names}}' | grep -v -- '-infra$' | head -1)
echo "pod $pod, container $ctr"

stubs="$work/stubs"
client/python/generate_stubs.sh "$stubs" >/dev/null
export PYTHONPATH=$stubs:$root/client/python:$root/tests/client/python
wait_grpc_serving "127.0.0.1:$grpc_port" || { podman logs "$ctr" 2>&1 | tail -20; exit 1; }
podman logs "$ctr" 2>&1 | grep -E "listening on|SERVING" | head -3

echo "== from the host, through the published ports (127.0.0.1 only)"
/usr/bin/python3 tests/client/python/check_goldens.py "127.0.0.1:$grpc_port" tests/golden
curl -fsS "http://127.0.0.1:$http_port/v2/health/ready" -o /dev/null -w "OIP HTTP ready: %{http_code}\n"
curl -fsS "http://127.0.0.1:$metrics_port/metrics" | grep -q 'attn_requests_total{rpc="MultiHeadAttention"' \
  || { echo "FAIL: /metrics does not count the calls"; exit 1; }
echo "/metrics: counts the calls"
for port in "$grpc_port" "$http_port" "$metrics_port"; do
  addr=$(ss -Htln "sport = :$port" | awk '{print $4}' | sort -u)
  [ "$addr" = "127.0.0.1:$port" ] || { echo "FAIL: port $port listens on '$addr'"; exit 1; }
done
echo "host ports listen on 127.0.0.1 only"

echo "== what the manifest asks of the container"
uid=$(podman exec "$ctr" id -u)
gid=$(podman exec "$ctr" id -g)
[ "$uid" = 10001 ] && [ "$gid" = 10001 ] || { echo "FAIL: runs as $uid:$gid, not 10001:10001"; exit 1; }
podman exec "$ctr" sh -c 'touch /probe-write 2>/dev/null' \
  && { echo "FAIL: the root filesystem is writable"; exit 1; }
podman exec "$ctr" sh -c 'touch /models/probe-write 2>/dev/null' \
  && { echo "FAIL: /models is writable"; exit 1; }
caps=$(podman exec "$ctr" sh -c "awk '/^CapEff/ {print \$2}' /proc/1/status")
[ "$caps" = 0000000000000000 ] || { echo "FAIL: effective capabilities $caps"; exit 1; }
nnp=$(podman exec "$ctr" sh -c "awk '/^NoNewPrivs/ {print \$2}' /proc/1/status")
[ "$nnp" = 1 ] || { echo "FAIL: no_new_privs is $nnp (allowPrivilegeEscalation: false)"; exit 1; }
echo "uid:gid 10001:10001, read-only / and /models, no capabilities, no_new_privs"
threads=$(podman exec "$ctr" sh -c 'ls /proc/1/task | wc -l')
podman logs "$ctr" 2>&1 | grep -o "compute threads [0-9]* (CPUs this process may use: [0-9]*)" \
  | head -1
echo "server threads: $threads"

echo "== the probes (podman does not run gRPC probes: their check, run in the pod)"
/usr/bin/python3 - deploy/kubernetes/deployment.yaml <<'PY' >"$work/probes"
import sys, yaml
(c,) = yaml.safe_load(open(sys.argv[1]))["spec"]["template"]["spec"]["containers"]
for kind in ("readinessProbe", "livenessProbe"):
    print(kind, c[kind]["grpc"]["port"])
PY
while read -r kind port; do
  podman exec "$ctr" /usr/local/bin/attention-client health --target "127.0.0.1:$port" \
    --timeout 2s >/dev/null || { echo "FAIL: $kind (gRPC health on $port) fails in the pod"; exit 1; }
  echo "$kind: gRPC health on port $port: SERVING"
done <"$work/probes"

echo "== podman kube down"
podman kube down "$work/deployment.yaml" >/dev/null
played=0
left=$(podman ps -a --filter "pod=$pod" --format '{{.Names}}'; podman pod ps --format '{{.Name}}' \
  | grep -x "$pod" || true)
[ -z "$left" ] || { echo "FAIL: left after kube down: $left"; exit 1; }
podman volume rm "$volume" >/dev/null
echo "PASS: the Deployment runs under podman: SERVING, the volume's 9 models, 11 goldens," \
  "ports on 127.0.0.1, non-root and locked down, probes' checks pass; kube down removed it"
