#!/usr/bin/env bash
# Every attention-client command against the real server, with the common
# flags (--target, --timeout, --max-message-mb) before the command and again
# after it: both succeed. The spellings the old parsers had are refused with
# a hint.
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR}
. "$(dirname "$0")/../../scripts/loopback.sh"
binary_test "$build"
start_server "$log"
common=(--target "127.0.0.1:$port" --timeout 20s --max-message-mb 16)
declare -A own=(
  [health]=""
  [models]=""
  [attention]="--query [[1,0],[0,1],[1,1]] --encoding values"
  [cross]="--model demo-cross-attention --random 1,4"
  [mha]="--model demo-mha-small --random 1,4 --num-heads 4"
  [bench]="--op mha --model demo-mha-small --seq-q 8 --requests 20 --warmup 0s --no-progress --verify"
)
for cmd in health models attention cross mha bench; do
  # shellcheck disable=SC2086  # the own flags split on spaces
  "$client" "${common[@]}" "$cmd" ${own[$cmd]} >/dev/null || { echo "FAIL: flags before '$cmd'"; exit 1; }
  # shellcheck disable=SC2086
  "$client" "$cmd" ${own[$cmd]} "${common[@]}" >/dev/null || { echo "FAIL: flags after '$cmd'"; exit 1; }
  echo "ok: $cmd, common flags before and after"
done
# The timeout reaches the call: 1 ms cannot fit a 4096-token MHA call.
if "$client" mha --target "127.0.0.1:$port" --timeout 1ms --model demo-mha --random 1,4096 \
  >/dev/null 2>"$log.err"; then
  echo "FAIL: a 1 ms deadline did not expire"; exit 1
fi
grep -q DEADLINE_EXCEEDED "$log.err" || { cat "$log.err"; echo "FAIL: no DEADLINE_EXCEEDED"; exit 1; }
rm -f "$log.err"
for old in "--timeout-ms 200" "--heads 2"; do
  # shellcheck disable=SC2086
  if "$client" health --target "127.0.0.1:$port" $old 2>"$log.err"; then
    echo "FAIL: '$old' was accepted"; exit 1
  fi
  grep -q "now --" "$log.err" || { cat "$log.err"; echo "FAIL: no hint for '$old'"; exit 1; }
done
rm -f "$log.err"
echo "PASS: every command takes the common flags before or after it"
