#!/usr/bin/env python3
"""ONNX Runtime 1.30 as a peer column: each row's ONNX graphs, built here
with Debian's python3-onnx, run by ORT's CPU provider in-process (the npm
package onnxruntime-node@1.30.0, installed with --ignore-scripts into a
cache folder: the binary ships inside it), its fastest operator per row
against ours, in interleaved rounds, beside the in-run references (the
1024^3 f32 matmul and the memory-read probe of attention-core-bench).

Rows (float32; the shapes of docs/performance.md):
  sdpa        L2048 H8 D64
  sdpa_causal the same, causal
  mha         B1 L2048 E512 H8 with projections
  decode      1 session x 32k tokens, Hq32/Hkv8/D128, float32 cache

Operators tried per row: com.microsoft.MultiHeadAttention,
com.microsoft.GroupQueryAttention (causal and decode), ONNX Attention
(opset 23), a MatMul-Softmax-MatMul graph, and for mha com.microsoft.Attention
(packed projections). Every graph is first checked against float64 at a
small size; a graph ORT refuses or answers wrongly is reported, not timed.

    tests/bench/ort_peer.py BUILD_DIR [--rounds 3] [--seconds 3] [--threads 2]
        [--small] [--json FILE] [--ort-dir DIR]

--small runs only the float64 checks, nothing timed (the
test). Ours: attention-core-bench (sdpa, mha, matmul, read probe) and the
server over loopback for decode (attention-client bench --op decode, float32
cache), the way the issue measured it. Run with /usr/bin/python3."""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ORT_VERSION = "1.30.0"


def ensure_ort(folder):
    """The npm package in `folder` (installed once, scripts off)."""
    pkg = os.path.join(folder, "node_modules", "onnxruntime-node", "package.json")
    if os.path.exists(pkg) and json.load(open(pkg))["version"] == ORT_VERSION:
        return folder
    os.makedirs(folder, exist_ok=True)
    subprocess.run(["npm", "i", "-E", "--ignore-scripts", "--no-audit", "--no-fund",
                    f"onnxruntime-node@{ORT_VERSION}"], cwd=folder, check=True,
                   stdout=subprocess.DEVNULL)
    return folder


# ---- graphs ---------------------------------------------------------------------


def _model(nodes, inputs, outputs, inits=()):
    from onnx import helper
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23),
                                            helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    return m


def _vi(name, dims, t=None):
    from onnx import TensorProto, helper
    return helper.make_tensor_value_info(name, t or TensorProto.FLOAT, dims)


def _const(name, arr):
    from onnx import numpy_helper
    return numpy_helper.from_array(np.asarray(arr), name)


def sdpa_graphs(L, H, D, causal):
    """(op name, model, inputs) for SDPA on [1, H, L, D] q, k, v."""
    from onnx import TensorProto, helper
    out = []
    # Contrib MHA on [B, L, H*D].
    out.append(("com.microsoft.MultiHeadAttention", _model(
        [helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["o"], domain="com.microsoft",
                          num_heads=H, unidirectional=int(causal))],
        [_vi(n, [1, L, H * D]) for n in "qkv"], [_vi("o", [1, L, H * D])]), "bshd"))
    if causal:  # GQA: causal by construction, a prompt with no past
        out.append(("com.microsoft.GroupQueryAttention", _model(
            [helper.make_node("GroupQueryAttention",
                              ["q", "k", "v", "", "", "seqlens_k", "total_len"],
                              ["o", "pk", "pv"], domain="com.microsoft", num_heads=H,
                              kv_num_heads=H)],
            [_vi(n, [1, L, H * D]) for n in "qkv"] +
            [_vi("seqlens_k", [1], TensorProto.INT32), _vi("total_len", [], TensorProto.INT32)],
            [_vi("o", [1, L, H * D])]), "gqa"))
    out.append(("ONNX Attention (opset 23)", _model(
        [helper.make_node("Attention", ["q", "k", "v"], ["o"], is_causal=int(causal))],
        [_vi(n, [1, H, L, D]) for n in "qkv"], [_vi("o", [1, H, L, D])]), "bhsd"))
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s0"]),
             helper.make_node("Mul", ["s0", "scale"], ["s1"])]
    inits = [_const("scale", np.float32(1 / np.sqrt(D)))]
    last = "s1"
    if causal:
        mask = np.triu(np.full((L, L), -np.inf, np.float32), 1)
        inits.append(_const("mask", mask))
        nodes.append(helper.make_node("Add", ["s1", "mask"], ["s2"]))
        last = "s2"
    nodes += [helper.make_node("Softmax", [last], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["o"])]
    out.append(("MatMul-Softmax-MatMul", _model(
        nodes, [_vi(n, [1, H, L, D]) for n in "qkv"], [_vi("o", [1, H, L, D])], inits), "bhsd"))
    return out


def mha_graphs(L, E, H):
    """(op name, model, layout) for MHA with projections on x [1, L, E]
    (weights as initializers: w_in [E, 3E] (q|k|v), b_in, w_out [E, E], b_out)."""
    from onnx import helper
    rng = np.random.default_rng(3)
    w_in = (rng.standard_normal((E, 3 * E)) / np.sqrt(E)).astype(np.float32)
    b_in = (rng.standard_normal(3 * E) * 0.1).astype(np.float32)
    w_out = (rng.standard_normal((E, E)) / np.sqrt(E)).astype(np.float32)
    b_out = (rng.standard_normal(E) * 0.1).astype(np.float32)
    weights = dict(w_in=w_in, b_in=b_in, w_out=w_out, b_out=b_out)
    D = E // H
    inits = [_const(k, v) for k, v in weights.items()]
    outp = [helper.make_node("MatMul", ["a", "w_out"], ["ao"]),
            helper.make_node("Add", ["ao", "b_out"], ["o"])]
    out = [("com.microsoft.Attention (packed projections)", _model(
        [helper.make_node("Attention", ["x", "w_in", "b_in"], ["a"], domain="com.microsoft",
                          num_heads=H)] + outp,
        [_vi("x", [1, L, E])], [_vi("o", [1, L, E])], inits))]
    proj = [helper.make_node("MatMul", ["x", "w_in"], ["p0"]),
            helper.make_node("Add", ["p0", "b_in"], ["p1"]),
            helper.make_node("Split", ["p1", "splits"], ["q", "k", "v"], axis=-1)]
    split = _const("splits", np.array([E, E, E], np.int64))
    out.append(("com.microsoft.MultiHeadAttention", _model(
        proj + [helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["a"],
                                 domain="com.microsoft", num_heads=H)] + outp,
        [_vi("x", [1, L, E])], [_vi("o", [1, L, E])], inits + [split])))
    heads = _const("heads", np.array([1, L, H, D], np.int64))
    back = _const("back", np.array([1, L, E], np.int64))
    nodes = list(proj)
    for n in "qkv":
        nodes += [helper.make_node("Reshape", [n, "heads"], [n + "r"]),
                  helper.make_node("Transpose", [n + "r"], [n + "t"], perm=[0, 2, 1, 3])]
    nodes += [helper.make_node("Attention", ["qt", "kt", "vt"], ["at"]),
              helper.make_node("Transpose", ["at"], ["ar"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ar", "back"], ["a"])] + outp
    out.append(("ONNX Attention (opset 23)", _model(
        nodes, [_vi("x", [1, L, E])], [_vi("o", [1, L, E])], inits + [split, heads, back])))
    return out, weights


def decode_graphs(T, HQ, HKV, D):
    """(op name, model, layout) for one decode step: q [HQ, 1, D] over a
    cache k, v [HKV, T, D]; each group's query heads folded into rows."""
    from onnx import TensorProto, helper
    G = HQ // HKV
    out = [("com.microsoft.MultiHeadAttention (groups folded into rows)", _model(
        [helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["o"], domain="com.microsoft",
                          num_heads=HKV)],
        [_vi("q", [1, G, HKV * D]), _vi("k", [1, T, HKV * D]), _vi("v", [1, T, HKV * D])],
        [_vi("o", [1, G, HKV * D])]), "fold")]
    out.append(("ONNX Attention (opset 23, groups folded into rows)", _model(
        [helper.make_node("Attention", ["q", "k", "v"], ["o"])],
        [_vi("q", [1, HKV, G, D]), _vi("k", [1, HKV, T, D]), _vi("v", [1, HKV, T, D])],
        [_vi("o", [1, HKV, G, D])]), "fold4"))
    out.append(("com.microsoft.GroupQueryAttention (past + 1)", _model(
        [helper.make_node("GroupQueryAttention",
                          ["q", "k1", "v1", "pk", "pv", "seqlens_k", "total_len"],
                          ["o", "ok", "ov"], domain="com.microsoft", num_heads=HQ,
                          kv_num_heads=HKV)],
        [_vi("q", [1, 1, HQ * D]), _vi("k1", [1, 1, HKV * D]), _vi("v1", [1, 1, HKV * D]),
         _vi("pk", [1, HKV, T - 1, D]), _vi("pv", [1, HKV, T - 1, D]),
         _vi("seqlens_k", [1], TensorProto.INT32), _vi("total_len", [], TensorProto.INT32)],
        [_vi("o", [1, 1, HQ * D])]), "gqa"))
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s0"]),
             helper.make_node("Mul", ["s0", "scale"], ["s1"]),
             helper.make_node("Softmax", ["s1"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["o"])]
    out.append(("MatMul-Softmax-MatMul (groups folded into rows)", _model(
        nodes, [_vi("q", [1, HKV, G, D]), _vi("k", [1, HKV, T, D]), _vi("v", [1, HKV, T, D])],
        [_vi("o", [1, HKV, G, D])], [_const("scale", np.float32(1 / np.sqrt(D)))]), "fold4"))
    return out


# ---- references and feeds ---------------------------------------------------------


def attention64(q, k, v, causal):
    """float64 attention: q [H, S, D], k/v [H, L, D] (bottom-right causal)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    if causal:
        S, L = q.shape[1], k.shape[1]
        s = np.where(np.arange(L)[None, :] > np.arange(S)[:, None] + L - S, -np.inf, s)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


def sdpa_feeds(layout, q, k, v):
    """q, k, v [H, L, D] as the graph's inputs; and how to read its output."""
    H, L, D = q.shape
    if layout in ("bshd", "gqa"):
        f = {n: x.transpose(1, 0, 2).reshape(1, L, H * D) for n, x in zip("qkv", (q, k, v))}
        if layout == "gqa":
            f["seqlens_k"] = np.array([L - 1], np.int32)
            f["total_len"] = np.array(L, np.int32)
        return f, lambda o: o.reshape(L, H, D).transpose(1, 0, 2)
    return {n: x[None] for n, x in zip("qkv", (q, k, v))}, lambda o: o[0]


def decode_feeds(layout, q, k, v):
    """q [HQ, 1, D], k/v [HKV, T, D] as the graph's inputs."""
    HQ, _, D = q.shape
    HKV, T, _ = k.shape
    G = HQ // HKV
    if layout == "fold":
        f = {"q": q.reshape(HKV, G, D).transpose(1, 0, 2).reshape(1, G, HKV * D),
             "k": k.transpose(1, 0, 2).reshape(1, T, HKV * D),
             "v": v.transpose(1, 0, 2).reshape(1, T, HKV * D)}
        return f, lambda o: o.reshape(G, HKV, D).transpose(1, 0, 2).reshape(HQ, 1, D)
    if layout == "fold4":
        return ({"q": q.reshape(1, HKV, G, D), "k": k[None], "v": v[None]},
                lambda o: o.reshape(HQ, 1, D))
    f = {"q": q.reshape(1, 1, HQ * D), "k1": k[:, -1:].transpose(1, 0, 2).reshape(1, 1, HKV * D),
         "v1": v[:, -1:].transpose(1, 0, 2).reshape(1, 1, HKV * D),
         "pk": k[None, :, :-1], "pv": v[None, :, :-1],
         "seqlens_k": np.array([T - 1], np.int32), "total_len": np.array(T, np.int32)}
    return f, lambda o: o.reshape(HQ, 1, D)


class Ort:
    def __init__(self, folder, threads, work):
        self.folder, self.threads, self.work = folder, threads, work
        self.n = 0

    def run(self, model, feeds, warmup, runs, seconds, keep_outputs=False):
        """(median ms, {output name: array}) or raises RuntimeError with ORT's words."""
        self.n += 1
        d = os.path.join(self.work, f"run{self.n}")
        os.makedirs(d)
        path = os.path.join(d, "model.onnx")
        open(path, "wb").write(model.SerializeToString())
        inputs = []
        for name, arr in feeds.items():
            arr = np.ascontiguousarray(arr)
            if arr.dtype == np.int32:
                inputs.append(dict(name=name, dims=list(arr.shape), type="int32",
                                   values=arr.ravel().tolist()))
            else:
                f = os.path.join(d, name + ".in")
                arr.astype(np.float32).tofile(f)
                inputs.append(dict(name=name, dims=list(arr.shape), type="float32", file=f))
        spec = dict(ort=self.folder, model=path, threads=self.threads, warmup=warmup, runs=runs,
                    seconds=seconds, inputs=inputs, outputs_dir=d if keep_outputs else None)
        open(os.path.join(d, "spec.json"), "w").write(json.dumps(spec))
        p = subprocess.run(["node", os.path.join(HERE, "ort_run.js"), os.path.join(d, "spec.json")],
                           capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            raise RuntimeError((p.stderr.strip().splitlines() or ["?"])[-1][:300])
        r = json.loads(p.stdout.strip().splitlines()[-1])
        outs = {}
        if keep_outputs:
            for name, dims in r["outputs"].items():
                outs[name] = np.fromfile(os.path.join(d, name + ".bin"), np.float32).reshape(dims)
        for f in os.listdir(d):
            if f.endswith(".in"):
                os.remove(os.path.join(d, f))
        return r["median_ms"], outs


def check_all(ort):
    """Each graph against float64 at a small size: {row: {op: None | why}}."""
    rng = np.random.default_rng(0)
    verdict = {}
    for row, causal in (("sdpa", False), ("sdpa_causal", True)):
        H, L, D = 2, 48, 16
        q, k, v = (rng.standard_normal((H, L, D)).astype(np.float32) for _ in range(3))
        want = attention64(q, k, v, causal)
        verdict[row] = {}
        for op, model, layout in sdpa_graphs(L, H, D, causal):
            verdict[row][op] = _check(ort, model, *sdpa_feeds(layout, q, k, v), want)
    E, H, L = 32, 4, 24
    graphs, w = mha_graphs(L, E, H)
    x = rng.standard_normal((1, L, E)).astype(np.float32)
    p = x[0].astype(np.float64) @ w["w_in"] + w["b_in"]
    D = E // H
    qh, kh, vh = (p[:, i * E:(i + 1) * E].reshape(L, H, D).transpose(1, 0, 2) for i in range(3))
    a = attention64(qh, kh, vh, False).transpose(1, 0, 2).reshape(L, E)
    want = a @ w["w_out"] + w["b_out"]
    verdict["mha"] = {op: _check(ort, m, {"x": x}, lambda o: o[0], want) for op, m in graphs}
    HQ, HKV, D, T = 8, 2, 16, 40
    q = rng.standard_normal((HQ, 1, D)).astype(np.float32)
    k, v = (rng.standard_normal((HKV, T, D)).astype(np.float32) for _ in range(2))
    want = attention64(q, np.repeat(k, HQ // HKV, 0), np.repeat(v, HQ // HKV, 0), False)
    verdict["decode"] = {op: _check(ort, m, *decode_feeds(layout, q, k, v), want)
                         for op, m, layout in decode_graphs(T, HQ, HKV, D)}
    return verdict


def _check(ort, model, feeds, read, want):
    try:
        _, outs = ort.run(model, feeds, 0, 1, 10, keep_outputs=True)
    except RuntimeError as e:
        return f"ORT refused it: {e}"
    got = read(outs["o"])
    err = float(np.max(np.abs(got - want)))
    return None if err <= 1e-4 else f"wrong answer: max |error| {err:.2e} against float64"


# ---- ours ------------------------------------------------------------------------------


def ours_core(build, threads, seconds):
    """attention-core-bench's rows: ms of sdpa, sdpa_causal, mha, and the
    references (matmul GFLOP/s, read GB/s)."""
    filt = ("BM_OneDnnMatmul1024|BM_MemoryRead|BM_Sdpa/L:2048/causal|BM_Mha/B:1/L:2048"
            "|BM_SdpaPrecision/L:2048/bf16:1|BM_MhaPrecision/B:1/L:2048/bf16:1")
    p = subprocess.run([os.path.join(build, "bin", "attention-core-bench"),
                        f"--benchmark_filter={filt}", "--benchmark_format=json",
                        f"--benchmark_min_time={seconds / 4}"],
                       capture_output=True, text=True, check=True,
                       env=dict(os.environ, ATTN_THREADS=str(threads), OMP_NUM_THREADS=str(threads)))
    res = {}
    for b in json.loads(p.stdout)["benchmarks"]:
        name = b["name"].replace("/real_time", "")
        ms = b["real_time"] * {"ms": 1, "us": 1e-3, "ns": 1e-6, "s": 1e3}[b["time_unit"]]
        res[name] = dict(ms=ms, gflops=b.get("GFLOPS"), gbps=b.get("GBps"), label=b.get("label"))
    return res


def ours_decode(build, threads, seconds, T):
    """The server over loopback: a decode step of 1 session, T tokens, f32 cache."""
    with tempfile.TemporaryDirectory() as d:
        srv = subprocess.Popen([os.path.join(build, "bin", "attention-server"), "--host",
                                "127.0.0.1", "--port", "0", "--threads", str(threads),
                                "--kv-cache-mb", "1024"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        try:
            port = None
            for _ in range(200):
                line = srv.stdout.readline()
                m = re.search(r"listening on [\d.]+:(\d+)", line)
                port = int(m.group(1)) if m else port
                if "SERVING" in line:
                    break
            out = os.path.join(d, "decode.json")
            subprocess.run([os.path.join(build, "bin", "attention-client"), "bench", "--target",
                            f"127.0.0.1:{port}", "--op", "decode", "--sessions", "1", "--prefill",
                            str(T), "--num-heads", "32", "--num-kv-heads", "8", "--dim", "128",
                            "--cache-dtype", "float32", "--hold-length", "--concurrency", "1",
                            "--duration", f"{seconds}s", "--warmup", "0.5s", "--no-progress",
                            "--json", out], check=True, stdout=subprocess.DEVNULL)
            return json.load(open(out))["step_p50_ms"]
        finally:
            srv.kill()
            srv.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--ort-dir", default=os.environ.get(
        "ATTN_ORT_DIR", os.path.expanduser("~/.cache/attn-ort")))
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    folder = ensure_ort(a.ort_dir)
    with tempfile.TemporaryDirectory() as work:
        ort = Ort(folder, a.threads, work)
        verdict = check_all(ort)
        for row, ops in verdict.items():
            for op, why in ops.items():
                print(f"check {row:12s} {op}: {'right (float64, 1e-4)' if why is None else why}")
        if a.small:
            ok = all(w is None for ops in verdict.values() for w in ops.values()
                     if not w or not w.startswith("ORT refused"))
            print(json.dumps({"verdict": verdict}))
            sys.exit(0 if ok else 1)
        rng = np.random.default_rng(1)
        L, H, D, E, T = 2048, 8, 64, 512, 32768
        q, k, v = (rng.standard_normal((H, L, D)).astype(np.float32) for _ in range(3))
        x = rng.standard_normal((1, L, E)).astype(np.float32)
        dq = rng.standard_normal((32, 1, 128)).astype(np.float32)
        dk, dv = (rng.standard_normal((8, T, 128)).astype(np.float32) for _ in range(2))
        plans = {"sdpa": [(op, m, sdpa_feeds(lay, q, k, v)[0]) for op, m, lay in
                          sdpa_graphs(L, H, D, False)],
                 "sdpa_causal": [(op, m, sdpa_feeds(lay, q, k, v)[0]) for op, m, lay in
                                 sdpa_graphs(L, H, D, True)],
                 "mha": [(op, m, {"x": x}) for op, m in mha_graphs(L, E, H)[0]],
                 "decode": [(op, m, decode_feeds(lay, dq, dk, dv)[0]) for op, m, lay in
                            decode_graphs(T, 32, 8, 128)]}
        times = {row: {op: [] for op, _, _ in ops} for row, ops in plans.items()}
        ours = {"sdpa": [], "sdpa_causal": [], "mha": [], "decode": [], "sdpa_bf16": [],
                "mha_bf16": [], "matmul_gflops": [], "read_gbps": [], "matmul_bf16_gflops": [],
                "sdpa_bf16_gflops": []}
        for r in range(a.rounds):
            for row, ops in plans.items():
                for op, model, feeds in ops:
                    if verdict[row][op] is not None:
                        continue
                    ms, _ = ort.run(model, feeds, 2, 50, a.seconds)
                    times[row][op].append(ms)
                    print(f"round {r + 1} ORT {row:12s} {ms:9.3f} ms  {op}", flush=True)
            core = ours_core(build, a.threads, a.seconds)
            ours["sdpa"].append(core["BM_Sdpa/L:2048/causal:0"]["ms"])
            ours["sdpa_causal"].append(core["BM_Sdpa/L:2048/causal:1"]["ms"])
            ours["mha"].append(core["BM_Mha/B:1/L:2048"]["ms"])
            ours["sdpa_bf16"].append(core["BM_SdpaPrecision/L:2048/bf16:1"]["ms"])
            ours["mha_bf16"].append(core["BM_MhaPrecision/B:1/L:2048/bf16:1"]["ms"])
            ours["matmul_gflops"].append(core["BM_OneDnnMatmul1024"]["gflops"])
            ours["read_gbps"].append(core["BM_MemoryRead"]["gbps"])
            if core.get("BM_OneDnnMatmul1024Bf16", {}).get("gflops"):  # a bf16 matrix tier
                ours["matmul_bf16_gflops"].append(core["BM_OneDnnMatmul1024Bf16"]["gflops"])
                ours["sdpa_bf16_gflops"].append(core["BM_SdpaPrecision/L:2048/bf16:1"]["gflops"])
            ours["decode"].append(ours_decode(build, a.threads, a.seconds, T))
            print(f"round {r + 1} ours " + ", ".join(
                f"{k} {v[-1]:.3f}" for k, v in ours.items()), flush=True)
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    flags = sorted(set(re.findall(r"\b(avx512[a-z_0-9]*|amx[a-z_0-9]*|avx2)\b",
                                  open("/proc/cpuinfo").read())))
    print(f"\nCPU {cpu}; {a.threads} threads; {', '.join(flags)}; medians of {a.rounds} rounds")
    print(f"in-run references: 1024^3 f32 matmul {med(ours['matmul_gflops']):.0f} GFLOP/s, "
          f"memory read {med(ours['read_gbps']):.1f} GB/s")
    if ours["matmul_bf16_gflops"]:
        bf16_ratios = [s / m for s, m in zip(ours["sdpa_bf16_gflops"], ours["matmul_bf16_gflops"])]
        print(f"1024^3 bf16 matmul {med(ours['matmul_bf16_gflops']):.0f} GFLOP/s; SDPA L2048 "
              f"bf16 {med(ours['sdpa_bf16_gflops']):.0f} GFLOP/s, {med(bf16_ratios):.2f} of it")
    print("| row | ORT 1.30 best (its op) | ours | ORT / ours | bf16 (auto) ours | ORT f32 / ours bf16 |")
    print("|---|---:|---:|---:|---:|---:|")
    table = {}
    for row in plans:
        best = min(((med(t), op) for op, t in times[row].items() if t), default=(None, None))
        o = med(ours[row])
        bf = med(ours.get(row + "_bf16", []))
        table[row] = dict(ort_ms=best[0], ort_op=best[1], ours_ms=o, ours_bf16_ms=bf,
                          ort_all={op: med(t) for op, t in times[row].items()})
        ratio = f"{best[0] / o:.2f}x" if best[0] and o else "-"
        bfr = f"{best[0] / bf:.2f}x" if best[0] and bf else "-"
        print(f"| {row} | {best[0]:.2f} ms ({best[1]}) | {o:.2f} ms | {ratio} | "
              f"{'-' if bf is None else f'{bf:.2f} ms'} | {bfr} |")
    if a.json:
        json.dump(dict(cpu=cpu, flags=flags, threads=a.threads, rounds=a.rounds, table=table,
                       ours=ours, ort=times, verdict=verdict), open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
