#!/usr/bin/python3
"""Prints the core benchmark as a Markdown table (stdlib only).

usage: summarize_core_bench.py core_bench.json [torch_reference.json]
"""
import json
import sys


def load_core(path):
    with open(path) as f:
        doc = json.load(f)
    rows = {}
    for b in doc["benchmarks"]:
        if b.get("aggregate_name", "median") != "median":
            continue
        name = b.get("run_name", b["name"]).replace("/real_time", "")
        rows[name] = {"ms": b["real_time"], "gflops": b["GFLOPS"] / 1e9
                      if b["GFLOPS"] > 1e6 else b["GFLOPS"]}
    return doc["context"], rows


def main():
    context, core = load_core(sys.argv[1])
    torch = {}
    if len(sys.argv) > 2:
        with open(sys.argv[2]) as f:
            torch = {b["name"]: b for b in json.load(f)["benchmarks"]}
    peak = core.pop("BM_OneDnnMatmul1024")["gflops"]
    print(f"CPU: {context.get('cpu_model', '?')}, {context.get('num_cpus')} CPUs @ "
          f"{context.get('mhz_per_cpu')} MHz; compute threads {context.get('compute_threads')}; "
          f"oneDNN ISA {context.get('onednn_isa')}; core kernel tier {context.get('kernel_tier')}")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
