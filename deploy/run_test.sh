#!/usr/bin/env bash
# deploy/run.sh starts a SERVING server in the foreground with the demo
# models, answers the seed's example through attention-client, serves OIP's
# HTTP/JSON by default (ATTN_HTTP_PORT, here a free port instead of 8000, so
# that parallel tests do not collide; a flag still wins over it), and exits 0
# on SIGTERM. Reuses the test build (BUILD_DIR) so nothing is rebuilt.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: $0 BUILD_DIR}
client="$build/bin/attention-client"
. "$root/tests/scripts/loopback.sh"
port=$(free_port)
http_port=$(free_port)
log=$(mktemp)
# The default itself: run.sh exports ATTN_HTTP_PORT=8000 when it is unset.
grep -q 'ATTN_HTTP_PORT=${ATTN_HTTP_PORT:-8000}' "$root/deploy/run.sh" ||
  { echo "FAIL: deploy/run.sh does not default HTTP to 8000"; exit 1; }
ATTN_HTTP_PORT=$http_port BUILD_DIR=$build "$root/deploy/run.sh" --host 127.0.0.1 --port "$port" >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
wait_serving "127.0.0.1:$port" $pid
models=$("$client" models --target "127.0.0.1:$port")
grep -q demo-mha <<<"$models" || { echo "FAIL: no demo models"; exit 1; }
out=$("$client" attention --target "127.0.0.1:$port" --query '[[1,0],[0,1],[1,1],[1,1],[0.5,1]]')
echo "$out"
grep -q '^\[\[0.7988, 0.7616\],' <<<"$out" || { echo "FAIL: seed example"; exit 1; }
# The Quickstart's curl: OIP HTTP/JSON is up without any flag.
ready=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$http_port/v2/health/ready")
[ "$ready" = 200 ] || { cat "$log"; echo "FAIL: /v2/health/ready on the HTTP port answered '$ready'"; exit 1; }
kill -TERM $pid
rc=0
wait $pid || rc=$?
grep -q "demo-mha" "$log" || { cat "$log"; echo "FAIL: startup log lacks the models"; exit 1; }
[ $rc -eq 0 ] || { echo "FAIL: exit code $rc after SIGTERM"; exit 1; }
echo "PASS: deploy/run.sh served the demo models and stopped cleanly"
