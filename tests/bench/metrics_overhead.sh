#!/usr/bin/env bash
# The cost of metrics on small requests, measured with the bundled bench:
# MHA B=1 L=16 E=64 H=4 at concurrency 32, against a server with
# --metrics-port (every call recorded, and /metrics scraped every second
# as Prometheus would) and one without (nothing recorded). ROUNDS
# interleaved pairs; prints each pair and the ratio of the medians.
#
#   tests/bench/metrics_overhead.sh [BUILD_DIR] [ROUNDS] [SECONDS]
set -euo pipefail
build=${1:-build}
rounds=${2:-5}
seconds=${3:-5}
server="$build/bin/attention-server"
client="$build/bin/attention-client"
work=$(mktemp -d)
. "$(dirname "$0")/../scripts/loopback.sh"
trap 'kill ${pid:-} ${scraper:-} 2>/dev/null || true; rm -rf "$work"' EXIT

run() {  # on|off -> req/s
  local mode=$1 flags=() scraper_pid=""
  [ "$mode" = on ] && flags=(--metrics-port 0)
  start_server "$work/server.log" "${flags[@]}"
  if [ "$mode" = on ]; then
    local mport
    mport=$(grep -oE 'metrics http://[0-9.]+:[0-9]+/metrics' "$work/server.log" | grep -oE ':[0-9]+/' | tr -d ':/')
    # One long-lived scraper process, so the cost measured is the server's
    # (recording, rendering), not a Python start-up per scrape.
    /usr/bin/python3 -c "
import time, urllib.request
for _ in range($((seconds + 5))):
    try: urllib.request.urlopen('http://127.0.0.1:$mport/metrics', timeout=2).read()
    except Exception: pass
    time.sleep(1)" >/dev/null 2>&1 &
    scraper=$!
  fi
  "$client" bench --target "127.0.0.1:$port" --op mha --model demo-mha-small --seq-q 16 \
    --concurrency 32 --duration "${seconds}s" --warmup 1s --no-progress --json "$work/r.json" >/dev/null
  [ -n "${scraper:-}" ] && { kill "$scraper" 2>/dev/null || true; wait "$scraper" 2>/dev/null || true; scraper=""; }
  kill "$pid"; wait "$pid" || true; pid=""
  /usr/bin/python3 -c "import json; print(round(json.load(open('$work/r.json'))['levels'][0]['rps']))"
}

on=() off=()
for i in $(seq 1 "$rounds"); do
  a=$(run off); b=$(run on)
  off+=("$a"); on+=("$b")
  echo "round $i: metrics off $a req/s, on $b req/s"
done
/usr/bin/python3 - "${off[*]}" "${on[*]}" <<'PY'
import statistics, sys
off = [float(x) for x in sys.argv[1].split()]
on = [float(x) for x in sys.argv[2].split()]
m_off, m_on = statistics.median(off), statistics.median(on)
print(f"median: off {m_off:.0f} req/s, on {m_on:.0f} req/s; on/off = {m_on / m_off:.3f} "
      f"(overhead {100 * (1 - m_on / m_off):+.1f}%)")
PY
