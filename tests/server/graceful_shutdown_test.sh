#!/usr/bin/env bash
# The signal path of a graceful stop: SIGTERM to a serving attention-server
# makes it stop accepting calls and exit 0 within --shutdown-grace. (That
# calls in flight finish is ServerShutdown.* in server_test, which drives the
# same AttentionServer::Shutdown deterministically.)
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR}
. "$(dirname "$0")/../scripts/loopback.sh"
binary_test "$build"
start_server "$log" --shutdown-grace 5
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
if "$client" health --target "127.0.0.1:$port" --timeout 500ms >/dev/null 2>&1; then
  echo "FAIL: still answering after exit"; exit 1
fi
echo "PASS: SIGTERM -> NOT_SERVING, drained, exit 0 in ${took}s"
