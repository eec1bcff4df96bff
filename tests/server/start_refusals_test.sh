#!/usr/bin/env bash
# The server refuses to start, naming the cause, instead of serving broken:
#   1. a duration flag out of range (--session-idle-timeout 1e10 once
#      overflowed a duration cast, and every session expired within 10 ms);
#   2. a KV-cache pool whose address space cannot be reserved (ulimit -v
#      here; strict overcommit alike) once left it SERVING with a 0-byte
#      pool. It must exit non-zero giving the size and the errno, while the
#      same limit with a pool that fits starts.
#   start_refusals_test.sh SERVER_BIN
set -euo pipefail
server=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

for bad in 1e10 721h 2592001; do
  if timeout 20 "$server" --host 127.0.0.1 --port 0 --session-idle-timeout "$bad" >"$tmp/out" 2>&1; then
    fail "--session-idle-timeout $bad started"
  fi
  grep -q -- "--session-idle-timeout: expected a duration of at most 720h (2592000 s), got '$bad'" \
    "$tmp/out" || { cat "$tmp/out"; fail "no message naming the flag for $bad"; }
done
echo "PASS: out-of-range durations refuse to start, naming the flag"

# 3 GB of address space: enough for the server, not for an 8 GiB pool.
rc=0
(ulimit -v 3000000; exec timeout 20 "$server" --host 127.0.0.1 --port 0 --kv-cache-mb 8192) \
  >"$tmp/pool" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$tmp/pool"; fail "started (rc $rc) without its pool"; }
grep -q "could not reserve 8192 MiB (8589934592 bytes) of address space: .* (errno 12)" "$tmp/pool" \
  || { cat "$tmp/pool"; fail "no size and errno in the refusal"; }
! grep -q SERVING "$tmp/pool" || fail "it said SERVING"
# The same limit with a pool that fits: it serves (then timeout stops it).
rc=0
(ulimit -v 3000000; exec timeout 5 "$server" --host 127.0.0.1 --port 0 --kv-cache-mb 256) \
  >"$tmp/ok" 2>&1 || rc=$?
grep -q SERVING "$tmp/ok" || { cat "$tmp/ok"; fail "a 256 MiB pool under the same limit did not serve"; }
echo "PASS: a pool that cannot be reserved refuses to start with its size and errno"
