#!/usr/bin/env bash
# Runs attention-core-bench and, when python3-torch is installed, the PyTorch
# reference on the same shapes, then prints a Markdown table with the ratios
# (SDPA/MHA GFLOP/s over the 1024^3 matmul's, and speed-up over PyTorch).
#
#   tests/bench/run_core_bench.sh [BUILD_DIR] [OUT_DIR]
#
# Writes OUT_DIR/core_bench.json, OUT_DIR/torch_reference.json and
# OUT_DIR/core_bench.md. Run by hand on an idle machine; not part of CI.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
out=${2:-$build/bench}
mkdir -p "$out"
"$build/bin/attention-core-bench" --benchmark_min_time=1 --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true --benchmark_out="$out/core_bench.json" \
  --benchmark_out_format=json
torch_json=""
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  # PyTorch's best setup on this machine: 2 threads, pthread OpenBLAS, SkylakeX kernels.
  OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 "$here/torch_reference.py" --threads 2 \
    --json "$out/torch_reference.json"
  torch_json="$out/torch_reference.json"
else
  echo "python3-torch not installed: skipping the PyTorch column" >&2
fi
/usr/bin/python3 "$here/summarize_core_bench.py" "$out/core_bench.json" $torch_json | tee "$out/core_bench.md"
