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
    """The medians of core_bench.json: compute rows (GFLOPS), memory-bound rows
    (GBps: the read probe and the KV decode rows) and the half-precision
    conversions (f32_GBps), each in benchmark registration order (an
    interleaved run writes its rows in the order they ran)."""
    with open(path) as f:
        doc = json.load(f)
    rows, memory, conversions, loops = {}, {}, {}, {}
    to_ms = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}

    def rate(value):  # older Google Benchmark versions report raw per-second counts
        return value / 1e9 if value > 1e6 else value

    medians = [b for b in doc["benchmarks"] if b.get("aggregate_name", "median") == "median"]
    medians.sort(key=lambda b: (b.get("family_index", 0), b.get("per_family_instance_index", 0)))
    for b in medians:
        name = b.get("run_name", b["name"]).replace("/real_time", "")
        ms = b["real_time"] * to_ms[b.get("time_unit", "ms")]
        if "f32_GBps" in b:
            conversions[name] = {"ms": ms, "gbps": rate(b["f32_GBps"]), "label": b.get("label", "")}
        elif "GBps" in b:
            memory[name] = {"ms": ms, "gbps": rate(b["GBps"]), "steps": b.get("steps_per_s"),
                            "probe": b.get("probe_GBps")}
        elif "GFLOPS" in b:
            rows[name] = {"ms": ms, "gflops": rate(b["GFLOPS"])}
        elif name.startswith(("BM_PageLoops", "BM_PageLoopRows")) and b.get("items_per_second"):
            loops[name] = {"ns": 1e9 / b["items_per_second"], "label": b.get("label", "")}
    return doc["context"], rows, memory, conversions, loops


def main():
    context, core, memory, conversions, loops = load_core(sys.argv[1])
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
    bf16_peak = core.pop("BM_OneDnnMatmul1024Bf16", {}).get("gflops")
    print(f"CPU: {context.get('cpu_model', '?')}, {context.get('num_cpus')} CPUs @ "
          f"{context.get('mhz_per_cpu')} MHz; compute threads {context.get('compute_threads')}; "
          f"oneDNN ISA {context.get('onednn_isa')}; core kernel tier {context.get('kernel_tier')}")
    if torch_note:
        print(torch_note)
    print(f"\noneDNN 1024^3 fp32 matmul: **{peak:.0f} GFLOP/s** (the practical peak)")
    if bf16_peak:
        print(f"oneDNN 1024^3 bf16 matmul: **{bf16_peak:.0f} GFLOP/s** (the bf16 rows' peak: "
              f"bf16:1 rows against it in the last column)")
    print()
    head = "| benchmark | ms | GFLOP/s | / matmul |"
    rule = "|---|---:|---:|---:|"
    if bf16_peak:
        head += " / bf16 matmul |"
        rule += "---:|"
    if torch:
        head += " PyTorch 1.13 ms | speed-up |"
        rule += "---:|---:|"
    print(head)
    print(rule)
    for name, r in core.items():
        line = f"| {name} | {r['ms']:.3f} | {r['gflops']:.0f} | {r['gflops'] / peak:.2f} |"
        if bf16_peak:
            line += f" {r['gflops'] / bf16_peak:.2f} |" if "bf16:1" in name else " |"
        if torch:
            t = torch.get(name)
            line += f" {t['ms']:.2f} | {t['ms'] / r['ms']:.1f}x |" if t else " | |"
        print(line)
    if memory:
        probe = memory.get("BM_MemoryRead")
        print("\nMemory-bound rows (bytes read per second; a KV decode row against the in-run "
              "plain read, BM_MemoryRead, and against the same read of its own seconds, "
              "its adjacent probe):\n")
        print("| benchmark | ms | GB/s | / read | adjacent probe GB/s | / adjacent probe "
              "| steps/s |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name, r in memory.items():
            ratio = f"{r['gbps'] / probe['gbps']:.2f}" if probe and name != "BM_MemoryRead" else ""
            near = f"{r['probe']:.1f} | {r['gbps'] / r['probe']:.2f}" if r["probe"] else " | "
            steps = f"{r['steps']:.0f}" if r["steps"] is not None else ""
            print(f"| {name} | {r['ms']:.3f} | {r['gbps']:.1f} | {ratio} | {near} | {steps} |")
    if conversions:
        print("\nHalf-precision conversions, one thread, 1M elements (float32 bytes per second):\n")
        print("| benchmark | type | ms | GB/s |")
        print("|---|---|---:|---:|")
        for name, r in conversions.items():
            print(f"| {name} | {r['label']} | {r['ms']:.3f} | {r['gbps']:.1f} |")
    if loops:
        print("\nThe decode kernel's page loops, one thread, the page in L1 (4 query rows, "
              "D 128):\n")
        print("| benchmark | codes, loop | ns a token and kv head |")
        print("|---|---|---:|")
        for name, r in loops.items():
            print(f"| {name} | {r['label']} | {r['ns']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
