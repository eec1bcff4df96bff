#!/usr/bin/env bash
# The server benchmark of issue 4, all rows in one run on this machine:
#   1. gRPC's ceiling: --op health at concurrency 32
#   2. small requests: MHA B=1, L=16, E=64, H=4 at concurrency 32
#   3. large requests: MHA B=8, L=512, E=512, H=8 at concurrency 1 to 4 (the
#      best level counts: the server's throughput), against the same work in-process
#      (attention-core-bench, with glibc malloc and with tcmalloc: the faster)
#   4. rows 2 and 3 against a Python grpcio + PyTorch 1.13 server
# Rows 1 and 2 alternate for ROUNDS rounds (default 5) and the medians count:
# on a 2-CPU VM where the client shares the CPUs, one 10 s run varies by up
# to 35% with where the scheduler puts the threads. Row 3 runs LARGE_ROUNDS
# rounds (default 3), each sweep between two in-process runs, and its ratio is
# the median round's: the VM's speed drifts by 5-10% within minutes, so an
# in-process rate taken once, minutes away from the sweep, moved the ratio by
# as much. Both servers get 2 threads. Writes OUT_DIR/*.json and
# OUT_DIR/server_bench.md.
#   tests/bench/run_server_bench.sh [BUILD_DIR] [OUT_DIR] [SECONDS]
# ATTN_MAX_ISA=avx2 (or portable) runs the server and the in-process rows on
# that tier, and PyTorch on the same one (tiers.sh); default: the CPU's best.
# Run by hand on an idle machine (needs python3-torch for row 4).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-build}
out=${2:-$build/server-bench}
secs=${3:-10}
mkdir -p "$out"
client="$build/bin/attention-client"
. "$here/../scripts/loopback.sh"
. "$here/tiers.sh"
. "$root/deploy/packages.sh"
# torch on Debian runs whatever libblas.so.3 points at: OpenBLAS, not the
# reference BLAS (torch_blas.py).
if /usr/bin/python3 -c "import torch" 2>/dev/null; then ensure_packages "${TORCH_BENCH_PACKAGES[@]}"; fi
tier=${ATTN_MAX_ISA:-$(cpu_tiers | head -1)}
torch_env=$(torch_tier_env "$tier") || { echo "tier '$tier': not on this CPU (or unknown)" >&2; exit 2; }
echo "== ISA tier $tier" >&2
bench() {  # name port args...
  local name=$1 port=$2; shift 2
  echo "== $name" >&2
  "$client" bench --target "127.0.0.1:$port" --no-progress --warmup 2s --duration "${secs}s" \
    --json "$out/$name.json" "$@" >&2
}

port=$(free_port)
"$build/bin/attention-server" --host 127.0.0.1 --port "$port" --threads 2 >"$out/server.log" 2>&1 &
spid=$!
trap 'kill $spid ${tpid:-} 2>/dev/null || true' EXIT
wait_serving "127.0.0.1:$port" "$spid"
rm -f "$out"/health_*.json "$out"/small_*.json
for round in $(seq 1 "${ROUNDS:-5}"); do
  bench "health_$round" "$port" --op health --concurrency 32
  bench "small_$round" "$port" --op mha --model demo-mha-small --seq-q 16 --concurrency 32
done
# Row 3: in-process, sweep, in-process, sweep, ... in-process (the server
# idles while the in-process runs go).
tcmalloc=$(ldconfig -p | awk '/libtcmalloc_minimal.so.4 / {lib = $NF} END {print lib}')
inprocess() {  # round: inprocess_N.json (glibc malloc), inprocess_tcmalloc_N.json
  echo "== inprocess_$1" >&2
  "$build/bin/attention-core-bench" --benchmark_filter='BM_Mha/B:8/L:512/' --benchmark_min_time=2 \
    --benchmark_out="$out/inprocess_$1.json" --benchmark_out_format=json >/dev/null
  [ -z "$tcmalloc" ] || LD_PRELOAD=$tcmalloc "$build/bin/attention-core-bench" \
    --benchmark_filter='BM_Mha/B:8/L:512/' --benchmark_min_time=2 \
    --benchmark_out="$out/inprocess_tcmalloc_$1.json" --benchmark_out_format=json >/dev/null
}
rm -f "$out"/large*.json "$out"/inprocess*.json
large_rounds=${LARGE_ROUNDS:-3}
for round in $(seq 1 "$large_rounds"); do
  inprocess "$round"
  bench "large_$round" "$port" --op mha --model demo-mha --batch 8 --seq-q 512 --concurrency 1,2,3,4
done
inprocess $((large_rounds + 1))
kill $spid; wait $spid 2>/dev/null || true

if /usr/bin/python3 -c "import torch, grpc" 2>/dev/null; then
  stubs=$(mktemp -d)
  "$root/client/python/generate_stubs.sh" "$stubs" >/dev/null
  tport=$(free_port)
  env -u OPENBLAS_L2_SIZE PYTHONPATH="$stubs" $torch_env $(torch_malloc_env) /usr/bin/python3 "$here/torch_server.py" \
    --port "$tport" --threads 2 >"$out/torch_server.log" 2>&1 &
  tpid=$!
  wait_serving "127.0.0.1:$tport" "$tpid"
  bench torch_small "$tport" --op mha --model demo-mha-small --seq-q 16 --concurrency 32
  bench torch_large "$tport" --op mha --model demo-mha --batch 8 --seq-q 512 --concurrency 1,2
  kill $tpid
fi
/usr/bin/python3 "$here/summarize_server_bench.py" "$out" | tee "$out/server_bench.md"
