#!/usr/bin/python3
"""Prints the server benchmark (run_server_bench.sh's JSON files) as a
Markdown table with the ratios the targets are stated in. Stdlib only."""
import json
import os
import sys


def load(out, name):
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def main():
    out = sys.argv[1]
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    rows = {n: load(out, n) for n in ("health", "small", "large", "torch_small", "torch_large")}
    inproc = load(out, "inprocess")
    lvl = {n: r["levels"][0] for n, r in rows.items() if r}
    print(f"CPU: {cpu}, {os.cpu_count()} CPUs; attention-server --threads 2; "
          f"PyTorch server: torch.set_num_threads(2), 2 gRPC workers\n")
    print("| row | workload | concurrency | req/s | GFLOP/s | p50 ms | p99 ms | errors | ratio | target |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")

    def line(row, name, ratio="", target=""):
        l = lvl.get(name)
        if not l:
            return
        errors = sum(l["errors"].values())
        wl = rows[name]["workload"]
        print(f"| {row} | {wl} | {l['concurrency']} | {l['rps']:.1f} | {l['gflops']:.1f} | "
              f"{l['latency_ms']['p50']:.3f} | {l['latency_ms']['p99']:.3f} | {errors} | {ratio} | {target} |")

    line("1 gRPC ceiling", "health")
    if "small" in lvl and "health" in lvl:
        s, h = lvl["small"], lvl["health"]
        line("2 small", "small",
             f"{s['rps'] / h['rps']:.2f} of ceiling; p99/p50 {s['latency_ms']['p99'] / s['latency_ms']['p50']:.1f}",
             ">= 0.60; <= 3.0")
    if "large" in lvl and inproc:
        g = [b for b in inproc["benchmarks"] if "GFLOPS" in b][0]["GFLOPS"]
        g = g / 1e9 if g > 1e6 else g
        line("3 large", "large", f"{lvl['large']['gflops'] / g:.2f} of in-process ({g:.0f} GFLOP/s)",
             ">= 0.90")
    for mine, theirs, row in (("small", "torch_small", "4 vs PyTorch (small)"),
                              ("large", "torch_large", "4 vs PyTorch (large)")):
        if mine in lvl and theirs in lvl:
            line(row, theirs, f"ours {lvl[mine]['rps'] / max(lvl[theirs]['rps'], 1e-9):.1f}x", ">= 5x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
