#!/usr/bin/env bash
# Concurrency 64 for a few seconds against the real server binary: no call
# fails, --verify finds no mismatch, and the server's RSS stays bounded.
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR}
seconds=${2:-4}
. "$(dirname "$0")/../../scripts/loopback.sh"
binary_test "$build"
# Under AddressSanitizer freed memory sits in a quarantine (256 MB by default)
# that fills during the run and reads as growth; keep it small so RSS measures
# what the server holds. Other builds ignore the variable.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=16"
start_server "$log"
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
