"""The PyTorch columns refuse a reference BLAS: torch_blas reads the BLAS out
of a memory map, and both summaries drop the PyTorch column (row 4) unless
that BLAS is OpenBLAS, naming it in the header when it is. The core summary
also reads an interleaved run with memory-bound rows."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_blas  # noqa: E402

OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"
REFERENCE = "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3"


def maps_line(path, perms="r-xp"):
    return f"7f0000000000-7f0000100000 {perms} 00000000 fe:01 123 {path}\n"


class BlasOfMaps(unittest.TestCase):
    def test_kinds(self):
        torch_line = maps_line("/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13")
        self.assertEqual(torch_blas.blas_of_maps([torch_line, maps_line(OPENBLAS)]),
                         {"kind": "openblas", "paths": [OPENBLAS]})
        self.assertEqual(torch_blas.blas_of_maps([maps_line(REFERENCE), maps_line(REFERENCE)]),
                         {"kind": "reference", "paths": [REFERENCE]})
        self.assertEqual(torch_blas.blas_of_maps([torch_line, "7f00-7f01 rw-p 0 00:00 0\n"]),
                         {"kind": "none", "paths": []})
        self.assertTrue(torch_blas.is_openblas({"kind": "openblas", "paths": [OPENBLAS]}))
        self.assertFalse(torch_blas.is_openblas({"kind": "reference", "paths": [REFERENCE]}))
        self.assertFalse(torch_blas.is_openblas(None))


def core_bench_json():
    def row(name, ms, gflops):
        return {"name": name + "_median", "run_name": name, "aggregate_name": "median",
                "real_time": ms, "time_unit": "ms", "GFLOPS": gflops * 1e9}
    return {"context": {"cpu_model": "test CPU", "num_cpus": 2},
            "benchmarks": [row("BM_OneDnnMatmul1024", 10.0, 100.0),
                           row("BM_Mha/B:1/L:2048", 40.0, 80.0)]}


def torch_json(blas):
    return {"torch_version": "1.13.0", "blas": blas,
            "benchmarks": [{"name": "BM_Mha/B:1/L:2048", "ms": 131.0, "gflops": 25.0}]}


def interleaved_core_bench_json():
    """An interleaved run's medians, written in the order the rows ran, with
    the memory-bound rows (GBps) and a conversion row (f32_GBps)."""
    def row(name, family, ms, **counters):
        return dict({"name": name + "_median", "run_name": name, "aggregate_name": "median",
                     "family_index": family, "per_family_instance_index": 0,
                     "real_time": ms, "time_unit": "ms"}, **counters)
    return {"context": {"cpu_model": "test CPU", "num_cpus": 2},
            "benchmarks": [row("BM_KvDecode/sessions:1/L:4096", 5, 2.0, GBps=20.0,
                               steps_per_s=500.0, probe_GBps=16.0),
                           row("BM_Sdpa/L:2048/causal:0", 1, 30.0, GFLOPS=90.0),
                           row("BM_FloatToHalf/bf16:1", 3, 0.1, f32_GBps=30.0, label="bfloat16"),
                           row("BM_MemoryRead", 4, 40.0, GBps=25.0, label="2 threads"),
                           row("BM_OneDnnMatmul1024", 0, 10.0, GFLOPS=100.0),
                           dict(row("BM_PageLoops/format:1/pv:0", 6, 0.0008,
                                    items_per_second=1.6e8, label="bfloat16 qk"),
                                time_unit="ms"),
                           dict(row("BM_PageLoopRows/format:4/pv:0/rows:7", 7, 0.0029,
                                    items_per_second=4e7, label="fp8_e4m3 qk"),
                                time_unit="ms")]}


class Summaries(unittest.TestCase):
    def summarize_core(self, core_doc, torch_doc=None):
        """summarize_core_bench.py's output for these documents."""
        with tempfile.TemporaryDirectory() as d:
            args = [sys.executable, os.path.join(HERE, "summarize_core_bench.py")]
            for name, doc in (("core.json", core_doc), ("torch.json", torch_doc)):
                if doc is not None:
                    args.append(os.path.join(d, name))
                    with open(args[-1], "w") as f:
                        json.dump(doc, f)
            return subprocess.run(args, check=True, capture_output=True, text=True).stdout

    def run_core(self, blas):
        return self.summarize_core(core_bench_json(), torch_json(blas))

    def test_interleaved_run_with_memory_rows(self):
        out = self.summarize_core(interleaved_core_bench_json())
        self.assertIn("**100 GFLOP/s**", out)
        self.assertIn("| BM_Sdpa/L:2048/causal:0 | 30.000 | 90 | 0.90 |", out)
        # The decode row against the read probe, 20 / 25, and against its
        # adjacent probe, 20 / 16.
        self.assertIn("| BM_KvDecode/sessions:1/L:4096 | 2.000 | 20.0 | 0.80 | 16.0 | 1.25 | 500 |",
                      out)
        self.assertIn("| BM_MemoryRead | 40.000 | 25.0 |  |  |  |  |", out)
        self.assertIn("| BM_FloatToHalf/bf16:1 | bfloat16 | 0.100 | 30.0 |", out)
        # A page-loop row in ns a token: 1e9 / 1.6e8 tokens a second.
        self.assertIn("| BM_PageLoops/format:1/pv:0 | bfloat16 qk | 6.25 |", out)
        self.assertIn("| BM_PageLoopRows/format:4/pv:0/rows:7 | fp8_e4m3 qk | 25.00 |", out)
        # Registration order, not the order the interleaved rows ran in.
        self.assertLess(out.index("BM_MemoryRead"), out.index("BM_KvDecode"))

    def test_bf16_rows_against_the_bf16_matmul(self):
        doc = interleaved_core_bench_json()
        doc["benchmarks"] += [
            dict(doc["benchmarks"][-1], run_name="BM_OneDnnMatmul1024Bf16", family_index=0,
                 per_family_instance_index=1, GFLOPS=200.0),
            dict(doc["benchmarks"][1], run_name="BM_SdpaPrecision/L:2048/bf16:1", family_index=2,
                 real_time=20.0, GFLOPS=150.0)]
        out = self.summarize_core(doc)
        self.assertIn("oneDNN 1024^3 bf16 matmul: **200 GFLOP/s**", out)
        # 150 / 100 against the fp32 matmul, 150 / 200 against the bf16 one.
        self.assertIn("| BM_SdpaPrecision/L:2048/bf16:1 | 20.000 | 150 | 1.50 | 0.75 |", out)
        self.assertIn("| BM_Sdpa/L:2048/causal:0 | 30.000 | 90 | 0.90 | |", out)
        self.assertNotIn("| BM_OneDnnMatmul1024Bf16 |", out)
        # Without that row (no bf16 matrix tier), no such column.
        self.assertNotIn("bf16 matmul", self.summarize_core(interleaved_core_bench_json()))

    def test_core_column_only_with_openblas(self):
        good = self.run_core({"kind": "openblas", "paths": [OPENBLAS]})
        self.assertIn("PyTorch 1.13 ms", good)
        self.assertIn(OPENBLAS, good)
        self.assertIn("| 131.00 | 3.3x |", good)
        for blas in ({"kind": "reference", "paths": [REFERENCE]}, None):
            bad = self.run_core(blas)
            self.assertNotIn("PyTorch 1.13 ms", bad)
            self.assertNotIn("131.00", bad)
            self.assertIn("PyTorch column omitted", bad)

    def run_server(self, log):
        level = {"concurrency": 1, "rps": 10.0, "gflops": 5.0, "errors": {},
                 "latency_ms": {"p50": 1.0, "p99": 2.0}}
        report = {"workload": "mha", "levels": [level]}
        with tempfile.TemporaryDirectory() as d:
            for name in ("large", "torch_large", "torch_small", "small_1", "health_1"):
                with open(os.path.join(d, name + ".json"), "w") as f:
                    json.dump(report, f)
            with open(os.path.join(d, "torch_server.log"), "w") as f:
                f.write(log)
            return subprocess.run([sys.executable,
                                   os.path.join(HERE, "summarize_server_bench.py"), d],
                                  check=True, capture_output=True, text=True).stdout

    def test_server_row_4_only_with_openblas(self):
        good = self.run_server("torch BLAS: " + json.dumps({"kind": "openblas",
                                                            "paths": [OPENBLAS]}) + "\n")
        self.assertIn("4 vs PyTorch", good)
        self.assertIn(OPENBLAS, good)
        for log in ("torch BLAS: " + json.dumps({"kind": "reference", "paths": [REFERENCE]}),
                    "torch server listening\n"):
            bad = self.run_server(log)
            self.assertNotIn("4 vs PyTorch", bad)
            self.assertIn("Row 4 omitted", bad)


if __name__ == "__main__":
    unittest.main()
