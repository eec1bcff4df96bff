#!/usr/bin/env bash
# Unix socket against loopback TCP, side by side on one server: Health and a
# 1-token Extend (decode over a short cache), ROUNDS interleaved rounds of
# SECONDS each, one client; prints each round's p50 and the medians' ratio
# (unix / tcp). The issue's target is <= 0.6.
#   tests/bench/unix_socket_bench.sh [BUILD_DIR] [ROUNDS] [SECONDS]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
rounds=${2:-5}
seconds=${3:-2}
server="$build/bin/attention-server"
client="$build/bin/attention-client"
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/scripts/loopback.sh"
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
port=$(free_port)
"$server" --host 127.0.0.1 --port "$port" --unix-socket "$tmp/attn.sock" >"$tmp/log" 2>&1 &
pid=$!
wait_serving "127.0.0.1:$port" "$pid"
grep -m1 "model name" /proc/cpuinfo
grep -m1 -o "engine tier [a-z0-9_]*" "$tmp/log"
run() {  # transport op -> p50 ms
  local target=127.0.0.1:$port
  [ "$1" = unix ] && target="unix:$tmp/attn.sock"
  if [ "$2" = health ]; then
    "$client" bench --target "$target" --op health --concurrency 1 --duration "${seconds}s" \
      --warmup 0.2s --no-progress --json "$tmp/b.json" >/dev/null
    /usr/bin/python3 -c "import json; print(json.load(open('$tmp/b.json'))['levels'][0]['latency_ms']['p50'])"
  else
    "$client" bench --target "$target" --op decode --sessions 1 --prefill 16 --num-heads 1 \
      --num-kv-heads 1 --dim 64 --cache-dtype float32 --concurrency 1 --duration "${seconds}s" \
      --warmup 0.2s --no-progress --json "$tmp/b.json" >/dev/null
    /usr/bin/python3 -c "import json; print(json.load(open('$tmp/b.json'))['step_p50_ms'])"
  fi
}
# The kernel's own round trip, without gRPC: the floor under the ratio.
if [ -x "$build/bin/socket-pingpong-bench" ]; then
  echo "the kernel's round trip, 64 bytes each way between two processes:"
  "$build/bin/socket-pingpong-bench" "$rounds" 20000
fi
declare -A all
for r in $(seq "$rounds"); do
  for op in health extend; do
    for t in tcp unix; do
      v=$(run "$t" "$op")
      all[$op.$t]+="$v "
      echo "round $r $op $t p50 ${v} ms"
    done
  done
done
/usr/bin/python3 - "${all[health.tcp]}" "${all[health.unix]}" "${all[extend.tcp]}" "${all[extend.unix]}" <<'PY'
import statistics
import sys
ht, hu, et, eu = ([float(x) for x in a.split()] for a in sys.argv[1:])
print("| call | TCP p50 ms (median) | Unix p50 ms (median) | Unix / TCP | target |")
print("|---|---:|---:|---:|---|")
for name, t, u in (("Health", ht, hu), ("1-token Extend", et, eu)):
    mt, mu = statistics.median(t), statistics.median(u)
    print(f"| {name} | {mt:.4f} | {mu:.4f} | {mu / mt:.2f} | <= 0.6: {'met' if mu / mt <= 0.6 else 'missed'} |")
PY
