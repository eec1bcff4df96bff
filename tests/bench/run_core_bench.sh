#!/usr/bin/env bash
# Runs attention-core-bench and, when python3-torch is installed, the PyTorch
# reference on the same shapes, once per ISA tier this machine can run:
# AVX-512 and forced AVX2 on an AVX-512 machine, AVX2 alone on an AVX2 one.
# Prints a Markdown table per tier with the ratios (SDPA/MHA GFLOP/s over the
# 1024^3 matmul's, and speed-up over PyTorch).
#
#   tests/bench/run_core_bench.sh [BUILD_DIR] [OUT_DIR] [TIER...]
#
# TIER is avx512, avx2 or portable (default: every tier the CPU has, from
# avx2 up). Writes OUT_DIR/core_bench_TIER.json, torch_reference_TIER.json
# and core_bench_TIER.md. Run by hand on an idle machine; not part of CI.
#
# The repetitions (REPS, default 3) run in random interleaved order, so the
# 1024^3 matmul reference is sampled across the whole run rather than once at
# its start: on a shared VM whose speed drifts, a ratio then compares rows
# measured under the same conditions. The table takes each row's median.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
out=${2:-$build/bench}
shift $(($# < 2 ? $# : 2))
mkdir -p "$out"

. "$here/tiers.sh"
. "$here/../../deploy/packages.sh"
tiers=("$@")
# torch on Debian runs whatever libblas.so.3 points at: OpenBLAS, not the
# reference BLAS (torch_blas.py).
if /usr/bin/python3 -c "import torch" 2>/dev/null; then ensure_packages "${TORCH_BENCH_PACKAGES[@]}"; fi
[ ${#tiers[@]} -eq 0 ] && mapfile -t tiers < <(cpu_tiers)

for tier in "${tiers[@]}"; do
  # PyTorch gets the same tier (tiers.sh).
  torch_env=$(torch_tier_env "$tier") || { echo "tier '$tier': not on this CPU (or unknown)" >&2; exit 2; }
  echo "== tier $tier"
  ATTN_MAX_ISA=$tier "$build/bin/attention-core-bench" --benchmark_min_time=1 \
    --benchmark_repetitions="${REPS:-3}" --benchmark_enable_random_interleaving=true \
    --benchmark_report_aggregates_only=true \
    --benchmark_out="$out/core_bench_$tier.json" --benchmark_out_format=json
  torch_json=""
  if /usr/bin/python3 -c "import torch" 2>/dev/null; then
    if env -u OPENBLAS_L2_SIZE $torch_env $(torch_malloc_env) /usr/bin/python3 "$here/torch_reference.py" \
      --threads 2 --json "$out/torch_reference_$tier.json"; then
      torch_json="$out/torch_reference_$tier.json"
    else
      echo "PyTorch reference refused or failed: no PyTorch column" >&2
    fi
  else
    echo "python3-torch not installed: skipping the PyTorch column" >&2
  fi
  /usr/bin/python3 "$here/summarize_core_bench.py" "$out/core_bench_$tier.json" $torch_json \
    | tee "$out/core_bench_$tier.md"
done
