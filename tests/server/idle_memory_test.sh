#!/usr/bin/env bash
# The server returns free memory to the system once it has been idle for a
# second (tcmalloc keeps freed spans while calls keep coming, see main.cc).
# Twelve large MHA calls (B=8, L=512, 8 MiB in and out each) raise RSS by
# ~100 MiB; within 4 s of idleness RSS must be back within a third of that.
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR}
. "$(dirname "$0")/../scripts/loopback.sh"
binary_test "$build"
start_server "$log" --threads 2
rss() { awk '/VmRSS/ {print $2}' /proc/$pid/status; }
base=$(rss)
"$client" bench --target "127.0.0.1:$port" --op mha --model demo-mha --batch 8 --seq-q 512 \
  --concurrency 2 --requests 12 --warmup 0s --no-progress >/dev/null
peak=$(rss)
echo "server RSS: ${base} KiB before, ${peak} KiB after 12 large calls"
if [ $(( peak - base )) -lt 51200 ]; then
  echo "FAIL: the large calls raised RSS by under 50 MiB; the test measures nothing"
  exit 1
fi
for _ in $(seq 1 40); do
  now=$(rss)
  if [ "$now" -le $(( base + (peak - base) / 3 )) ]; then
    echo "PASS: RSS back to ${now} KiB after idling"
    exit 0
  fi
  sleep 0.1
done
echo "FAIL: RSS still ${now} KiB after 4 s idle (before ${base}, peak ${peak})"
exit 1
