#!/usr/bin/python3
"""Prints the server benchmark (run_server_bench.sh's JSON files) as a
Markdown table with the ratios the targets are stated in. Stdlib only.

Rows 1 and 2 ran in alternating rounds (health_N.json, small_N.json): each
row shows its median round, and every round's req/s is listed under the
table. Rows 3 and 4 (large) ran a concurrency sweep: the level with the most
GFLOP/s counts. The in-process reference is the faster of the glibc and the
tcmalloc runs of attention-core-bench."""
import glob
import json
import os
import re
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def rounds(out, name):
    """The reports of a row's rounds, in round order."""
    paths = glob.glob(os.path.join(out, name + "_*.json"))
    paths.sort(key=lambda p: int(re.search(r"_(\d+)\.json$", p).group(1)))
    return [load(p) for p in paths]


def median_level(reports):
    levels = sorted((r["levels"][0] for r in reports), key=lambda l: l["rps"])
    return levels[(len(levels) - 1) // 2] if levels else None


def best_level(report):
    return max(report["levels"], key=lambda l: l["gflops"]) if report else None


def inprocess_gflops(out):
    best = None
    for name, label in (("inprocess", "glibc malloc"), ("inprocess_tcmalloc", "tcmalloc")):
        path = os.path.join(out, name + ".json")
        if not os.path.exists(path):
            continue
        g = [b for b in load(path)["benchmarks"] if "GFLOPS" in b][0]["GFLOPS"]
        g = g / 1e9 if g > 1e6 else g
        if best is None or g > best[0]:
            best = (g, label)
    return best


def main():
    out = sys.argv[1]
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    tier = "unknown tier"
    log = os.path.join(out, "server.log")
    if os.path.exists(log):
        with open(log) as f:
            m = re.search(r"oneDNN ISA (\S+); core kernels (\w+)", f.read())
        if m:
            tier = f"ISA tier {m.group(2)} (oneDNN {m.group(1)})"
    health, small = rounds(out, "health"), rounds(out, "small")
    reports = {"health": health[0] if health else None, "small": small[0] if small else None}
    lvl = {"health": median_level(health), "small": median_level(small)}
    for name in ("large", "torch_small", "torch_large"):
        path = os.path.join(out, name + ".json")
        reports[name] = load(path) if os.path.exists(path) else None
        lvl[name] = best_level(reports[name])
    print(f"CPU: {cpu}, {os.cpu_count()} CPUs, shared by the client and the server; {tier}; "
          f"attention-server --threads 2; PyTorch server: torch.set_num_threads(2), "
          f"2 gRPC workers\n")
    print("| row | workload | concurrency | req/s | GFLOP/s | p50 ms | p99 ms | errors | ratio | target |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")

    def line(row, name, ratio="", target=""):
        l = lvl.get(name)
        if not l:
            return
        errors = sum(l["errors"].values())
        wl = reports[name]["workload"]
        print(f"| {row} | {wl} | {l['concurrency']} | {l['rps']:.1f} | {l['gflops']:.1f} | "
              f"{l['latency_ms']['p50']:.3f} | {l['latency_ms']['p99']:.3f} | {errors} | {ratio} | {target} |")

    line("1 gRPC ceiling", "health")
    if lvl["small"] and lvl["health"]:
        s, h = lvl["small"], lvl["health"]
        line("2 small", "small",
             f"{s['rps'] / h['rps']:.2f} of ceiling; p99/p50 {s['latency_ms']['p99'] / s['latency_ms']['p50']:.1f}",
             ">= 0.60; <= 3.0")
    ref = inprocess_gflops(out)
    if lvl["large"] and ref:
        line("3 large", "large",
             f"{lvl['large']['gflops'] / ref[0]:.2f} of in-process ({ref[0]:.0f} GFLOP/s, {ref[1]})",
             ">= 0.90")
    for mine, theirs, row in (("small", "torch_small", "4 vs PyTorch (small)"),
                              ("large", "torch_large", "4 vs PyTorch (large)")):
        if lvl[mine] and lvl[theirs]:
            line(row, theirs, f"ours {lvl[mine]['rps'] / max(lvl[theirs]['rps'], 1e-9):.1f}x", ">= 5x")
    if len(health) > 1:
        per_round = [f"{h['levels'][0]['rps']:.0f} / {s['levels'][0]['rps']:.0f}"
                     for h, s in zip(health, small)]
        print(f"\nRows 1 / 2 by round (req/s), the median shown above: {'; '.join(per_round)}.")
    for name in ("large", "torch_large"):
        if reports[name] and len(reports[name]["levels"]) > 1:
            levels = ", ".join(f"c={l['concurrency']}: {l['gflops']:.1f} GFLOP/s"
                               for l in reports[name]["levels"])
            print(f"{name} sweep: {levels}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
