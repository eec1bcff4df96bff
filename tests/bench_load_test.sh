#!/usr/bin/env bash
# Concurrency 64 for a few seconds against the real server binary: no call
# fails, --verify finds no mismatch, and the server's RSS stays bounded.
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR}
seconds=${2:-4}
server="$build/bin/attention-server"
client="$build/bin/attention-client"
log=$(mktemp)
"$server" --host 127.0.0.1 --port 0 >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
port=""
for _ in $(seq 1 100); do
  port=$(grep -oE 'listening on [0-9.]+:[0-9]+' "$log" | grep -oE '[0-9]+$' || true)
  grep -q SERVING "$log" && [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { cat "$log"; echo "FAIL: server did not start"; exit 1; }
rss() { awk '/VmRSS/ {print $2}' /proc/$pid/status; }
# Sample RSS once the load has warmed up, and again at the end.
( sleep $(( seconds / 2 + 1 )); rss > "$log.mid" ) &
sampler=$!
"$client" bench --target "127.0.0.1:$port" --op mha --model demo-mha-small --seq-q 16 \
  --concurrency 64 --connections 4 --duration "${seconds}s" --warmup 1s --verify --no-progress
wait $sampler
mid=$(cat "$log.mid"); end=$(rss); rm -f "$log.mid"
echo "server RSS: ${mid} KiB mid-run, ${end} KiB at the end"
# Bounded: no growth beyond noise once warm, and well under a leak's size.
if [ "$end" -gt $(( mid + mid / 10 + 8192 )) ] || [ "$end" -gt 512000 ]; then
  echo "FAIL: server RSS grew from ${mid} to ${end} KiB"
  exit 1
fi
echo "PASS: no errors, no mismatches, RSS bounded"
