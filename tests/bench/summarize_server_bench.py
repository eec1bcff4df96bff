#!/usr/bin/python3
"""Prints the server benchmark (run_server_bench.sh's JSON files) as a
Markdown table with the ratios the targets are stated in. Stdlib only.

Rows 1 and 2 ran in alternating rounds (health_N.json, small_N.json): each
row shows its median round, and every round's req/s is listed under the
table. Rows 3 and 4 (large) ran a concurrency sweep: the level with the most
GFLOP/s counts. Row 3 ran in rounds (large_N.json), each sweep between two
in-process runs (inprocess_N.json, inprocess_tcmalloc_N.json; the faster of
the glibc and the tcmalloc runs counts): a round's reference is the mean of
the in-process runs before and after it, and the median round is shown.
An older single run (large.json, inprocess.json) still reads.

Row 4 (PyTorch) is shown only when torch_server.log records that torch ran
OpenBLAS (torch_blas.py); the header names that BLAS."""
import glob
import json
import os
import re
import sys

from torch_blas import describe, is_openblas


def torch_blas(out):
    """The BLAS record torch_server.py logged, or None."""
    log = os.path.join(out, "torch_server.log")
    if not os.path.exists(log):
        return None
    with open(log) as f:
        m = re.search(r"^torch BLAS: (.*)$", f.read(), re.M)
    return json.loads(m.group(1)) if m else None


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


def inprocess_gflops(out, suffix=""):
    """(GFLOP/s, allocator) of the faster in-process run, or None."""
    best = None
    for name, label in (("inprocess", "glibc malloc"), ("inprocess_tcmalloc", "tcmalloc")):
        path = os.path.join(out, name + suffix + ".json")
        if not os.path.exists(path):
            continue
        g = [b for b in load(path)["benchmarks"] if "GFLOPS" in b][0]["GFLOPS"]
        g = g / 1e9 if g > 1e6 else g
        if best is None or g > best[0]:
            best = (g, label)
    return best


def large_rounds(out):
    """Row 3's rounds as (round, report, best level, reference GFLOP/s,
    allocator, ratio), sorted by ratio."""
    reports = rounds(out, "large")
    suffixes = [f"_{i + 1}" for i in range(len(reports))]
    if not reports and os.path.exists(os.path.join(out, "large.json")):
        reports, suffixes = [load(os.path.join(out, "large.json"))], [""]
    result = []
    for i, report in enumerate(reports):
        refs = [inprocess_gflops(out, suffixes[i])]
        if suffixes[i]:
            refs.append(inprocess_gflops(out, f"_{i + 2}"))
        refs = [r for r in refs if r]
        if not refs:
            continue
        ref = sum(r[0] for r in refs) / len(refs)
        level = best_level(report)
        result.append((i + 1, report, level, ref, refs[0][1], level["gflops"] / ref))
    return sorted(result, key=lambda r: r[5])


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
    blas = torch_blas(out)
    torch_ok = is_openblas(blas)
    for name in ("torch_small", "torch_large"):
        path = os.path.join(out, name + ".json")
        reports[name] = load(path) if os.path.exists(path) and torch_ok else None
        lvl[name] = best_level(reports[name])
    large = large_rounds(out)
    median_large = large[(len(large) - 1) // 2] if large else None
    reports["large"], lvl["large"] = median_large[1:3] if median_large else (None, None)
    print(f"CPU: {cpu}, {os.cpu_count()} CPUs, shared by the client and the server; {tier}; "
          f"attention-server --threads 2; PyTorch server: torch.set_num_threads(2), "
          f"2 gRPC workers")
    if os.path.exists(os.path.join(out, "torch_large.json")):
        print(f"PyTorch: {describe(blas)}" if torch_ok else
              f"Row 4 omitted: torch ran {describe(blas)}, not OpenBLAS "
              "(install libopenblas0-pthread)")
    print()
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
    if median_large:
        _, _, _, ref, allocator, ratio = median_large
        line("3 large", "large", f"{ratio:.2f} of in-process ({ref:.0f} GFLOP/s, {allocator})",
             ">= 0.90")
    for mine, theirs, row in (("small", "torch_small", "4 vs PyTorch (small)"),
                              ("large", "torch_large", "4 vs PyTorch (large)")):
        if lvl[mine] and lvl[theirs]:
            line(row, theirs, f"ours {lvl[mine]['rps'] / max(lvl[theirs]['rps'], 1e-9):.1f}x", ">= 5x")
    if len(health) > 1:
        per_round = [f"{h['levels'][0]['rps']:.0f} / {s['levels'][0]['rps']:.0f}"
                     for h, s in zip(health, small)]
        print(f"\nRows 1 / 2 by round (req/s), the median shown above: {'; '.join(per_round)}.")
    sweeps = [(f"large (round {r[0]})" if len(large) > 1 else "large", r[1]) for r in sorted(large)]
    for name, report in sweeps + [("torch_large", reports["torch_large"])]:
        if report and len(report["levels"]) > 1:
            levels = ", ".join(f"c={l['concurrency']}: {l['gflops']:.1f} GFLOP/s"
                               for l in report["levels"])
            print(f"{name} sweep: {levels}.")
    if len(large) > 1:
        per_round = []
        for round_no, _, level, ref, _, ratio in large:
            c = level.get("client") or {}
            share = c.get("cpus_used", 0) / max(c.get("cpus_available", 1), 1)
            per_round.append(f"round {round_no}: {ratio:.3f} (c={level['concurrency']}, "
                             f"in-process {ref:.0f} GFLOP/s, "
                             f"client {100 * share:.1f}% of the CPUs, idle "
                             f"{100 * c.get('machine_idle', 0):.1f}%)")
        print(f"\nRow 3 by round, lowest first, the median shown above: {'; '.join(per_round)}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
