#!/usr/bin/python3
"""PyTorch 1.13 side of the core benchmark, run by hand (not in CI).

Times nn.MultiheadAttention(batch_first=True) and
F.scaled_dot_product_attention-equivalent math on the shapes of
attention-core-bench, giving PyTorch its best setup:

    ATEN_CPU_CAPABILITY=avx2 OPENBLAS_CORETYPE=Haswell /usr/bin/python3 \
        tests/bench/torch_reference.py --json out.json

(tests/bench/run_core_bench.sh picks both per ISA tier: the core type must be
one the CPU can run; SkylakeX needs AVX-512.)

Needs python3-torch and libopenblas0-pthread (Debian; run_core_bench.sh
installs it). The BLAS that torch loaded, read from /proc/self/maps, goes into
the JSON ("blas"); with any other BLAS than OpenBLAS this script times nothing
and exits 3 (--allow-any-blas times anyway, for a look, and the summary still
refuses the column). Prints one line per shape: milliseconds per call (median
of the timed repeats).
"""
import argparse
import json
import os
import re
import statistics
import sys
import time

import torch

from torch_blas import describe, is_openblas, loaded_blas


def time_call(fn, min_seconds=1.0, min_repeats=3):
    fn()  # warm-up
    times = []
    start = time.perf_counter()
    while len(times) < min_repeats or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if len(times) >= 1000:
            break
    return statistics.median(times) * 1e3


def mha_case(batch, length, embed=512, heads=8, need_weights=False, dtype=torch.float32):
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(embed, heads, batch_first=True).eval().to(dtype)
    x = torch.randn(batch, length, embed).to(dtype)

    def run():
        with torch.inference_mode():
            mha(x, x, x, need_weights=need_weights)

    flops = 4 * 2.0 * batch * length * embed * embed + 4.0 * batch * length * length * embed
    return run, flops


def sdpa_case(length, causal, batch=1, heads=8, dim=64):
    torch.manual_seed(0)
    q, k, v = (torch.randn(batch, heads, length, dim) for _ in range(3))
    mask = None
    if causal:
        mask = torch.full((length, length), float("-inf")).triu(1)

    def run():
        with torch.inference_mode():
            s = torch.matmul(q, k.transpose(-2, -1)) / dim ** 0.5
            if mask is not None:
                s = s + mask
            torch.matmul(torch.softmax(s, dim=-1), v)

    pairs = length * (length + 1) / 2 if causal else length * length
    return run, 4.0 * batch * heads * dim * pairs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--quick", action="store_true", help="only MHA B=1 L=2048")
    ap.add_argument("--allow-any-blas", action="store_true",
                    help="time even when torch's BLAS is not OpenBLAS")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    blas = loaded_blas()
    print(f"PyTorch {torch.__version__}, {describe(blas)}", flush=True)
    if not is_openblas(blas) and not args.allow_any_blas:
        print("torch_reference.py: torch is not running OpenBLAS; its times would be "
              "meaningless (install libopenblas0-pthread)", file=sys.stderr)
        return 3

    cases = []
    # bf16 (the row attention-core-bench calls BM_MhaPrecision .../bf16:1)
    # only where the CPU has a bf16 unit: elsewhere ATen emulates it, slowly.
    bf16_unit = re.search(r"\b(avx512_bf16|amx_bf16)\b", open("/proc/cpuinfo").read())
    if bf16_unit:
        cases.append(("BM_MhaPrecision/B:1/L:2048/bf16:1",
                      *mha_case(1, 2048, dtype=torch.bfloat16)))
    if args.quick:
        cases.append(("BM_Mha/B:1/L:2048", *mha_case(1, 2048)))
    else:
        for length in (128, 512, 2048, 8192):
            for causal in (0, 1):
                cases.append((f"BM_Sdpa/L:{length}/causal:{causal}", *sdpa_case(length, causal)))
        for batch in (1, 8):
            for length in (128, 512, 2048):
                cases.append((f"BM_Mha/B:{batch}/L:{length}", *mha_case(batch, length)))
        for length in (128, 512, 2048):
            cases.append((f"BM_MhaWeights/B:1/L:{length}",
                          *mha_case(1, length, need_weights=True)))

    results = {
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""),
        "blas": blas,
        "aten_cpu_capability": torch.backends.cpu.get_cpu_capability()
        if hasattr(torch.backends, "cpu") else os.environ.get("ATEN_CPU_CAPABILITY", ""),
        "config": torch.__config__.show().splitlines()[:3],
        "benchmarks": [],
    }
    for name, fn, flops in cases:
        ms = time_call(fn)
        gflops = flops / (ms * 1e-3) / 1e9
        results["benchmarks"].append({"name": name, "ms": ms, "gflops": gflops})
        print(f"{name:28s} {ms:10.3f} ms {gflops:9.1f} GFLOP/s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
