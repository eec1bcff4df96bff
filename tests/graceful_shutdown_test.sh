#!/usr/bin/env bash
# The signal path of a graceful stop: SIGTERM to a serving attention-server
# makes it stop accepting calls and exit 0 within --shutdown-grace. (That
# calls in flight finish is ServerShutdown.* in server_test, which drives the
# same AttentionServer::Shutdown deterministically.)
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR}
server="$build/bin/attention-server"
client="$build/bin/attention-client"
log=$(mktemp)
"$server" --host 127.0.0.1 --port 0 --shutdown-grace 5 >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
port=""
for _ in $(seq 1 100); do
  port=$(grep -oE 'listening on [0-9.]+:[0-9]+' "$log" | grep -oE '[0-9]+$' || true)
  grep -q SERVING "$log" && [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { cat "$log"; echo "FAIL: server did not start"; exit 1; }
[ "$("$client" health --target "127.0.0.1:$port")" = SERVING ]
start=$(date +%s)
kill -TERM $pid
rc=0
wait $pid || rc=$?
took=$(( $(date +%s) - start ))
cat "$log" | tail -3
[ $rc -eq 0 ] || { echo "FAIL: exit code $rc after SIGTERM"; exit 1; }
[ $took -le 6 ] || { echo "FAIL: took ${took}s, over the 5 s grace"; exit 1; }
grep -q "NOT_SERVING; finishing calls in flight (grace 5 s)" "$log" || { echo "FAIL: no drain log"; exit 1; }
if "$client" health --target "127.0.0.1:$port" --timeout-ms 500 >/dev/null 2>&1; then
  echo "FAIL: still answering after exit"; exit 1
fi
echo "PASS: SIGTERM -> NOT_SERVING, drained, exit 0 in ${took}s"
