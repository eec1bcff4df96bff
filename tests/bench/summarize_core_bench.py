#!/usr/bin/python3
"""Prints the core benchmark as a Markdown table (stdlib only).

usage: summarize_core_bench.py core_bench.json [torch_reference.json]

The PyTorch column is printed only when torch_reference.json records that
torch ran OpenBLAS (torch_blas.py); the header names that BLAS.
"""
import json
import sys

from torch_blas import describe, is_openblas


def load_core(path):
    with open(path) as f:
        doc = json.load(f)
    rows, conversions = {}, {}
    to_ms = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    for b in doc["benchmarks"]:
        if b.get("aggregate_name", "median") != "median":
            continue
        name = b.get("run_name", b["name"]).replace("/real_time", "")
        ms = b["real_time"] * to_ms[b.get("time_unit", "ms")]
        if "f32_GBps" in b:
            gbps = b["f32_GBps"] / 1e9 if b["f32_GBps"] > 1e6 else b["f32_GBps"]
            conversions[name] = {"ms": ms, "gbps": gbps, "label": b.get("label", "")}
            continue
        rows[name] = {"ms": ms, "gflops": b["GFLOPS"] / 1e9
                      if b["GFLOPS"] > 1e6 else b["GFLOPS"]}
    return doc["context"], rows, conversions


def main():
    context, core, conversions = load_core(sys.argv[1])
    torch, torch_note = {}, ""
    if len(sys.argv) > 2:
        with open(sys.argv[2]) as f:
            ref = json.load(f)
        if is_openblas(ref.get("blas")):
            torch = {b["name"]: b for b in ref["benchmarks"]}
            torch_note = f"PyTorch {ref.get('torch_version', '?')}: {describe(ref['blas'])}"
        else:
            torch_note = (f"PyTorch column omitted: torch ran {describe(ref.get('blas'))}, "
                          "not OpenBLAS (install libopenblas0-pthread)")
    peak = core.pop("BM_OneDnnMatmul1024")["gflops"]
    print(f"CPU: {context.get('cpu_model', '?')}, {context.get('num_cpus')} CPUs @ "
          f"{context.get('mhz_per_cpu')} MHz; compute threads {context.get('compute_threads')}; "
          f"oneDNN ISA {context.get('onednn_isa')}; core kernel tier {context.get('kernel_tier')}")
    if torch_note:
        print(torch_note)
    print(f"\noneDNN 1024^3 fp32 matmul: **{peak:.0f} GFLOP/s** (the practical peak)\n")
    head = "| benchmark | ms | GFLOP/s | / matmul |"
    rule = "|---|---:|---:|---:|"
    if torch:
        head += " PyTorch 1.13 ms | speed-up |"
        rule += "---:|---:|"
    print(head)
    print(rule)
    for name, r in core.items():
        line = f"| {name} | {r['ms']:.3f} | {r['gflops']:.0f} | {r['gflops'] / peak:.2f} |"
        if torch:
            t = torch.get(name)
            line += f" {t['ms']:.2f} | {t['ms'] / r['ms']:.1f}x |" if t else " | |"
        print(line)
    if conversions:
        print("\nHalf-precision conversions, one thread, 1M elements (float32 bytes per second):\n")
        print("| benchmark | type | ms | GB/s |")
        print("|---|---|---:|---:|")
        for name, r in conversions.items():
            print(f"| {name} | {r['label']} | {r['ms']:.3f} | {r['gbps']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
