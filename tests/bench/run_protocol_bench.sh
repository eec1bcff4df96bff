#!/usr/bin/env bash
# Issue 13's server benchmark: the Open Inference Protocol against
# attention.v1, and FP16/BF16 against FP32 on the wire.
#   small: MHA B=1, L=16, E=64, H=4 at concurrency 32 (native, OIP)
#   large: MHA B=8, L=512, E=512, H=8 at concurrency 1 (native and OIP in
#          FP32; native in FP16 and BF16)
# Configurations alternate for ROUNDS rounds (default 3) and the medians
# count (a 2-CPU VM where the client shares the CPUs varies run to run).
# Writes OUT_DIR/*.json and OUT_DIR/protocol_bench.md (bytes per call each
# way, req/s, ratios).
#   tests/bench/run_protocol_bench.sh [BUILD_DIR] [OUT_DIR] [SECONDS]
# Run by hand on an idle machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
out=${2:-$build/protocol-bench}
secs=${3:-8}
mkdir -p "$out"
client="$build/bin/attention-client"
. "$here/../scripts/loopback.sh"
port=$(free_port)
"$build/bin/attention-server" --host 127.0.0.1 --port "$port" --threads 2 >"$out/server.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null || true' EXIT
wait_serving "127.0.0.1:$port" "$spid"
bench() {  # name args...
  local name=$1
  shift
  echo "== $name" >&2
  "$client" bench --target "127.0.0.1:$port" --no-progress --warmup 2s --duration "${secs}s" \
    --json "$out/$name.json" "$@" >/dev/null
}
rm -f "$out"/*.json
small=(--op mha --model demo-mha-small --seq-q 16 --concurrency 32)
large=(--op mha --model demo-mha --batch 8 --seq-q 512 --concurrency 1)
for round in $(seq 1 "${ROUNDS:-3}"); do
  bench "small_native_$round" "${small[@]}"
  bench "small_oip_$round" "${small[@]}" --protocol oip
  bench "large_native_fp32_$round" "${large[@]}"
  bench "large_oip_fp32_$round" "${large[@]}" --protocol oip
  bench "large_native_fp16_$round" "${large[@]}" --dtype float16
  bench "large_native_bf16_$round" "${large[@]}" --dtype bfloat16
  bench "large_oip_fp16_$round" "${large[@]}" --protocol oip --dtype float16
done
/usr/bin/python3 - "$out" <<'PY' | tee "$out/protocol_bench.md"
import glob, json, os, statistics, sys
out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(os.path.join(out, "*_[0-9]*.json"))):
    name = os.path.basename(path).rsplit("_", 1)[0]
    r = json.load(open(path))
    lvl = r["levels"][0]
    rows.setdefault(name, []).append((lvl["rps"], r["request_bytes"], lvl["response_bytes"],
                                      lvl["latency_ms"]["p50"], sum(lvl["errors"].values())))
med = {k: statistics.median(x[0] for x in v) for k, v in rows.items()}
print("| config | req/s (median) | per round | request bytes | response bytes | p50 ms | errors | ratio |")
print("|---|---:|---|---:|---:|---:|---:|---|")
ref = {"small_oip": "small_native", "large_oip_fp32": "large_native_fp32",
       "large_native_fp16": "large_native_fp32", "large_native_bf16": "large_native_fp32",
       "large_oip_fp16": "large_oip_fp32"}
for k, v in rows.items():
    ratio = f"{med[k] / med[ref[k]]:.3f} of {ref[k]}" if k in ref else ""
    print(f"| {k} | {med[k]:.1f} | {', '.join(f'{x[0]:.1f}' for x in v)} | {v[0][1]} | {v[0][2]} | "
          f"{statistics.median(x[3] for x in v):.3f} | {sum(x[4] for x in v)} | {ratio} |")
PY
