#!/usr/bin/env bash
# Two attention-server replicas behind nginx (deploy/nginx/nginx.conf), on
# loopback, without containers:
#   1. starts both replicas and nginx (prefix, pid and temp paths in a
#      temporary directory);
#   2. runs attention-client bench through nginx, with the client's retry
#      policy for UNAVAILABLE (--retry);
#   3. kills one replica (SIGKILL) in the middle of the run;
#   4. checks that no call failed and that both replicas served calls, and
#      prints the counts;
#   5. with three fresh replicas, KV-cache session families through nginx
#      (deploy/lb_session_test.py): 30 families (10 named by the client),
#      each root forked twice, every member stepped and checked, none
#      NOT_FOUND, each family on one replica; one replica killed: its
#      families are lost whole, and nothing else.
#   deploy/lb_test.sh [BUILD_DIR] [SECONDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
seconds=${2:-6}
server="$build/bin/attention-server"
client="$build/bin/attention-client"
. "$root/deploy/packages.sh"
ensure_packages nginx-light
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  [ -f "$tmp/nginx.pid" ] && kill "$(cat "$tmp/nginx.pid")" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
. "$root/tests/scripts/loopback.sh"

# COUNT replicas (logs $tmp/NAME1.log, NAME2.log, ... at LEVEL) and nginx
# in front of them: sets pids, ports and lb_port.
start_replicas_and_nginx() {  # NAME LEVEL COUNT
  pids=() ports=()
  for i in $(seq "$3"); do
    port=$(free_port)
    "$server" --host 127.0.0.1 --port "$port" --log-level "$2" >"$tmp/$1$i.log" 2>&1 &
    pids+=($!)
    ports+=("$port")
    wait_serving "127.0.0.1:$port" "${pids[-1]}"
  done
  mkdir -p "$tmp/conf" "$tmp/temp"
  cp "$root/deploy/nginx/nginx.conf" "$tmp/conf/nginx.conf"
  for port in "${ports[@]}"; do
    echo "server 127.0.0.1:$port max_fails=1 fail_timeout=5s;"
  done >"$tmp/conf/upstream.conf"
  lb_port=$(free_port)
  echo "listen 127.0.0.1:$lb_port http2;" >"$tmp/conf/listen.conf"
  nginx -p "$tmp" -c "$tmp/conf/nginx.conf" \
    -g "pid $tmp/nginx.pid; error_log $tmp/error.log; user $(id -un);"
  wait_serving "127.0.0.1:$lb_port"
  echo "replicas on ${ports[*]}, nginx on $lb_port"
}

start_replicas_and_nginx replica debug 2

"$client" bench --target "127.0.0.1:$lb_port" --retry --op mha --model demo-mha-small --seq-q 16 \
  --concurrency 8 --duration "${seconds}s" --warmup 0.5s --no-progress --json "$tmp/bench.json" \
  >"$tmp/bench.log" 2>&1 &
bench=$!
sleep "$(( seconds / 2 ))"
served2=$(grep -c 'rpc=MultiHeadAttention' "$tmp/replica2.log" || true)
kill -9 "${pids[1]}"
echo "killed replica 2 (SIGKILL) after it served $served2 calls"
rc=0
wait $bench || rc=$?
cat "$tmp/bench.log" | sed -n '1,6p'
served1=$(grep -c 'rpc=MultiHeadAttention' "$tmp/replica1.log" || true)
echo "calls served: replica 1 $served1, replica 2 $served2 (before it was killed)"
[ "$served1" -gt 0 ] && [ "$served2" -gt 0 ] || { echo "FAIL: a replica served no calls"; exit 1; }
grep -q '"errors": {}' "$tmp/bench.json" || { echo "FAIL: calls failed through the balancer"; exit 1; }
[ $rc -eq 0 ] || { tail -40 "$tmp/bench.log"; echo "FAIL: bench exit $rc"; exit 1; }
echo "PASS: both replicas served; no call failed when one was killed"

# 5. KV-cache sessions: two fresh replicas behind a fresh nginx, routed by
# the x-attn-session header's consistent hash.
kill "$(cat "$tmp/nginx.pid")"
for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
start_replicas_and_nginx session info 3
stubs="$build/tests/client/python-stubs"
PYTHONPATH="$stubs:$root/client/python" timeout 300 /usr/bin/python3 "$root/deploy/lb_session_test.py" \
  "127.0.0.1:$lb_port" 1 "127.0.0.1:${ports[0]}:${pids[0]}" "127.0.0.1:${ports[1]}:${pids[1]}" \
  "127.0.0.1:${ports[2]}:${pids[2]}"
