#!/usr/bin/env bash
# Soak: mixed RPCs at concurrency 64 for SECONDS against the real server,
# with --verify on: one bench with a --workload of three weighted entries
# (tests/scripts/soak_workload.yaml), a row each in its report:
#   MultiHeadAttention (demo-mha-small, [1, 16, 64])   weight 50
#   CrossAttention (demo-cross-attention, [1, 16, 64])  weight 25
#   Attention (inline, [4, 32, 32], causal)             weight 25
# Passes when no call failed, no response mismatched the local core
# computation, /metrics counts only OK calls, and the server's RSS after
# warm-up grew by at most 10%: the RSS at the end (the median of the last
# tenth of the samples, so that one sample taken mid-burst does not decide)
# against the first sample after warm-up. The peak is printed too.
#
#   tests/scripts/soak.sh BUILD_DIR [SECONDS]      (CI: 60; docs/testing.md's record: 600)
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR [SECONDS]}
seconds=${2:-60}
server="$build/bin/attention-server"
client="$build/bin/attention-client"
work=$(mktemp -d)
. "$(dirname "$0")/loopback.sh"
trap 'kill ${pid:-} ${benches:-} 2>/dev/null || true; rm -rf "$work"' EXIT
start_server "$work/server.log" --metrics-port 0
metrics_port=$(grep -oE 'metrics http://[0-9.]+:[0-9]+/metrics' "$work/server.log" | grep -oE ':[0-9]+/' | tr -d ':/')
target=127.0.0.1:$port
rss() { awk '/VmRSS/ {print $2}' "/proc/$pid/status"; }

"$client" bench --target "$target" --duration "${seconds}s" --warmup 5s --verify --no-progress \
  --timeout 30s --workload "$(dirname "$0")/soak_workload.yaml" --concurrency 64 --connections 2 \
  --json "$work/soak.json" >"$work/soak.txt" 2>&1 &
benches=$!

# RSS: the first sample once warm (5 s of warm-up plus 5 s, or a quarter of
# the run if longer), then every 2 s until the clients finish.
warm_at=$(( seconds / 4 > 10 ? seconds / 4 : 10 ))
start=$(date +%s)
warm="" max=0 samples=0 trace="" tail_samples=""
while kill -0 $benches 2>/dev/null; do
  sleep 2
  now=$(( $(date +%s) - start ))
  r=$(rss)
  if [ -z "$warm" ] && [ $now -ge $warm_at ]; then warm=$r; fi
  if [ -n "$warm" ]; then
    [ "$r" -gt "$max" ] && max=$r
    samples=$((samples + 1))
  fi
  [ $now -ge $(( seconds * 9 / 10 )) ] && tail_samples="$tail_samples $r"
  trace="$trace ${now}s:$((r / 1024))M"
  [ $now -le $(( seconds + 60 )) ] || { echo "FAIL: the clients ran past ${seconds}s + 60s"; exit 1; }
done
end=$(rss)
rc=0
for b in $benches; do wait "$b" || rc=1; done
benches=""

# One line per entry, and the total.
if [ -s "$work/soak.json" ]; then
  /usr/bin/python3 - "$work/soak.json" <<'PY'
import json, sys
lvl = json.load(open(sys.argv[1]))["levels"][0]
for e in lvl["entries"]:
    s = e["stats"]
    print(f"{e['name']:10s} ok {s['ok']:>8d}  errors {sum(s['errors'].values()):d}"
          f"  {s['rps']:8.0f} req/s  p50 {s['p50_ms']:.2f} ms  p99 {s['p99_ms']:.2f} ms")
print(f"{'total':10s} ok {lvl['ok']:>8d}  errors {sum(lvl['errors'].values()):d}"
      f"  verified {lvl['verify']['checked']:>6d}  mismatches {lvl['verify']['mismatches']:d}"
      f"  {lvl['rps']:8.0f} req/s  p50 {lvl['latency_ms']['p50']:.2f} ms  p99 {lvl['latency_ms']['p99']:.2f} ms")
assert len(lvl["entries"]) == 3 and all(e["stats"]["ok"] > 0 for e in lvl["entries"]), "an entry made no calls"
PY
else
  cat "$work/soak.txt"
fi
[ $rc -eq 0 ] || { tail -30 "$work/soak.txt"; echo "FAIL: calls failed or mismatched"; exit 1; }

metrics=$(/usr/bin/python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$metrics_port/metrics', timeout=5).read().decode())")
not_ok=$(echo "$metrics" | grep '^attn_requests_total' | grep -v 'code="OK"' || true)
[ -z "$not_ok" ] || { echo "$not_ok"; echo "FAIL: /metrics counts failed calls"; exit 1; }
total=$(echo "$metrics" | awk '/^attn_requests_total/ {s += $2} END {print s}')

[ -n "$warm" ] || { echo "FAIL: the run ended before warm-up (${seconds}s)"; exit 1; }
[ -n "$tail_samples" ] || tail_samples=$end
final=$(echo $tail_samples | tr ' ' '\n' | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
growth=$(( (final - warm) * 1000 / warm ))
peak=$(( (max - warm) * 1000 / warm ))
echo "server RSS: ${warm} KiB after warm-up (at ${warm_at}s), ${final} KiB at the end (median of the last tenth): growth $((growth / 10)).$((growth % 10))%; peak ${max} KiB (+$((peak / 10)).$((peak % 10))%) over ${samples} samples"
echo "server counted ${total} calls, all OK"
echo "RSS over time:$trace"
[ "$final" -le $(( warm + warm / 10 )) ] || { echo "FAIL: RSS grew more than 10% after warm-up"; exit 1; }
echo "PASS: soak ${seconds}s, mixed RPCs at concurrency 64, no errors, no mismatches, RSS within 10%"
