# Sourced by the shell tests: start_server LOG [FLAGS...] starts
# attention-server ($server) on 127.0.0.1 with port 0 and waits (up to 10 s)
# until it logs SERVING. It sets $pid and $port, or fails the test.
start_server() {
  local log=$1
  shift
  "$server" --host 127.0.0.1 --port 0 "$@" >"$log" 2>&1 &
  pid=$!
  port=""
  for _ in $(seq 1 100); do
    port=$(grep -oE 'listening on [0-9.]+:[0-9]+' "$log" | grep -oE '[0-9]+$' || true)
    grep -q SERVING "$log" && [ -n "$port" ] && return 0
    sleep 0.1
  done
  cat "$log"
  echo "FAIL: server did not start"
  exit 1
}
