# Loopback helpers for the shell tests and scripts (sourced). They expect
# $client (attention-client) and, for start_server, $server.

# free_port: prints a free TCP port on 127.0.0.1.
free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_serving TARGET [PID]: waits up to 30 s until TARGET's health is
# SERVING; fails the test if it is not, or at once if process PID exits.
wait_serving() {
  local target=$1 watch=${2:-}
  for _ in $(seq 1 300); do
    [ "$("$client" health --target "$target" --timeout 200ms 2>/dev/null)" = SERVING ] && return 0
    if [ -n "$watch" ] && ! kill -0 "$watch" 2>/dev/null; then
      echo "FAIL: the process serving $target exited"
      exit 1
    fi
    sleep 0.1
  done
  echo "FAIL: $target is not SERVING"
  exit 1
}

# start_server LOG [FLAGS...]: starts $server on 127.0.0.1 with port 0 and
# waits (up to 10 s) until it logs SERVING. Sets $pid and $port, or fails.
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

# binary_test BUILD_DIR: the set-up of a test of the real binaries. Sets
# $server, $client and $log (a temporary file), and on exit kills the server
# start_server started and removes $log.
binary_test() {
  server="$1/bin/attention-server"
  client="$1/bin/attention-client"
  log=$(mktemp)
  trap 'kill ${pid:-} 2>/dev/null || true; rm -f "$log"' EXIT
}
