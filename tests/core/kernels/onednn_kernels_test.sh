#!/usr/bin/env bash
# Runs every attention-core-bench shape once with ONEDNN_VERBOSE=1 and fails
# if oneDNN executed any reference ("ref") implementation, or anything that is
# not a brg/jit kernel, or if the matmul or softmax primitive never ran. Usage: onednn_kernels_test.sh path/to/attention-core-bench
set -euo pipefail
bench=${1:?usage: $0 path/to/attention-core-bench}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Shapes the bench covers; one iteration each is enough to see the kernels.
# BM_MhaWeights (weights requested) runs the softmax primitive; the variants
# run too (GQA at L=2048 only: its L=8192 row takes seconds and shows nothing new).
ONEDNN_VERBOSE=1 timeout 300 "$bench" --benchmark_min_time=0 \
  --benchmark_filter='BM_Sdpa/|BM_SdpaPrecision|BM_Mha|BM_SdpaVariant/kind:0/L:2048|BM_SdpaVariant/kind:[12]/' >"$log" 2>&1
impls=$(grep '^onednn_verbose,exec,' "$log" | cut -d, -f4,5 | sort | uniq -c)
echo "oneDNN implementations executed (count primitive,impl):"
echo "$impls"
if [ -z "$impls" ]; then
  echo "FAIL: no oneDNN primitive was executed (is ONEDNN_VERBOSE supported?)"
  exit 1
fi
for prim in matmul softmax; do
  # A here-string, not a pipe: grep -q exits at the first match, and under
  # pipefail the echo it cut off (SIGPIPE) would fail the check.
  if ! grep -Eq " ${prim}[^,]*," <<<"$impls"; then
    echo "FAIL: no $prim primitive was executed"
    exit 1
  fi
done
bad=$(echo "$impls" | awk '{split($2, a, ","); if (a[2] !~ /^(brg|jit|gemm:jit)/ || a[2] ~ /ref/) print}')
if [ -n "$bad" ]; then
  echo "FAIL: non-brg/jit implementations executed:"
  echo "$bad"
  exit 1
fi
# bf16 matmuls (a CPU with AMX or AVX512-BF16 runs them in the precision
# rows) must be brgemm: brg:avx512_core_amx (AMX) or brg:avx512_core_bf16,
# never gemm: or ref.
bf16=$(grep '^onednn_verbose,exec,cpu,matmul,' "$log" | grep 'src_bf16' | cut -d, -f5 | sort | uniq -c || true)
if [ -n "$bf16" ]; then
  echo "bf16 matmuls executed (count impl):"
  echo "$bf16"
  if awk '$2 !~ /^brg:avx512_core_(amx|bf16)/ {bad = 1} END {exit !bad}' <<<"$bf16"; then
    echo "FAIL: a bf16 matmul ran on something other than brgemm AMX/AVX512-BF16"
    exit 1
  fi
fi
echo "PASS: only brg/jit kernels"
