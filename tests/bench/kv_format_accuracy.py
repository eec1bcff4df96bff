#!/usr/bin/env python3
"""The accuracy of each KV-cache format, measured through a running server:
a session of each format is filled with L tokens, then a decode step (one
query row per head, GQA 32/8, D 128) is answered by the server and compared
with float64 attention over the unquantized keys and values. Prints the
relative RMS error of the outputs and the largest |lse| error, per format
(and int4 keys quantized per token instead of per channel, simulated in
float64, to show what the per-channel blocks buy),
for N(0,1) keys and values and for keys with outlier channels (4 of 128
channels 10-20x larger, with an offset, as real keys have).

  /usr/bin/python3 tests/bench/kv_format_accuracy.py build [--lengths 2048 32768]
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HQ, HKV, D = 32, 8, 128
FORMATS = [("bfloat16", None), ("int8", "int8"), ("fp8_e4m3", "fp8_e4m3"), ("int4", "int4")]


def int4_per_token(x, group=64):
    """int4 keys quantized per token in groups of channels (the granularity
    this server does not use for keys), simulated in float64 with the same
    asymmetric arithmetic: what per-channel blocks are compared against."""
    x = np.asarray(x, np.float64)
    out = np.empty_like(x)
    for g0 in range(0, x.shape[-1], group):
        part = x[..., g0:g0 + group]
        lo = part.min(axis=-1, keepdims=True)
        scale = (part.max(axis=-1, keepdims=True) - lo) / 15.0
        code = np.clip(np.rint(np.divide(part - lo, scale, out=np.zeros_like(part),
                                         where=scale > 0)), 0, 15)
        out[..., g0:g0 + group] = lo + code * scale
    return out


def attention64(q, k, v):
    """q [HQ, D], k/v [HKV, L, D] -> out [HQ, D], lse [HQ] in float64."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    g = HQ // HKV
    kk, vv = np.repeat(k, g, axis=0), np.repeat(v, g, axis=0)
    s = np.einsum("hd,hld->hl", q, kk) / np.sqrt(D)
    m = s.max(axis=1, keepdims=True)
    e = np.exp(s - m)
    out = np.einsum("hl,hld->hd", e, vv) / e.sum(axis=1, keepdims=True)
    return out, (m[:, 0] + np.log(e.sum(axis=1)))


def keys_of(kind, L, rng):
    k = rng.standard_normal((HKV, L, D)).astype(np.float32)
    if kind == "outliers":
        ch = rng.choice(D, 4, replace=False)
        k[:, :, ch] = k[:, :, ch] * rng.uniform(10, 20, 4).astype(np.float32) + 5.0
    return k


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--lengths", type=int, nargs="+", default=[2048, 32768])
    a = ap.parse_args()
    # The client from client/python, the stubs the build made.
    sys.path[:0] = [os.path.join(a.build, "tests", "client", "python-stubs"),
                    os.path.join(ROOT, "client", "python")]
    import attention_client as ac
    server = subprocess.Popen([os.path.join(a.build, "bin", "attention-server"), "--host",
                               "127.0.0.1", "--port", "0", "--kv-cache-mb", "2048",
                               "--max-session-tokens", str(max(a.lengths) + 1)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        port = None
        deadline = time.time() + 30
        while port is None and time.time() < deadline:
            line = server.stdout.readline()
            if "listening" in line and "127.0.0.1:" in line:
                port = int(line.split("127.0.0.1:")[1].split(";")[0])
        client = ac.AttentionClient(f"127.0.0.1:{port}")
        print("| keys | L | format | relative RMS of outputs | max abs lse error |")
        print("|---|---:|---|---:|---:|")
        rng = np.random.default_rng(0)
        for kind in ("N(0,1)", "outliers"):
            for L in a.lengths:
                k = keys_of(kind, L, rng)
                v = rng.standard_normal((HKV, L, D)).astype(np.float32)
                q = rng.standard_normal((HQ, 1, D)).astype(np.float32)
                want, lse = attention64(q[:, 0], k, v)
                for name, fmt in FORMATS:
                    with client.create_session(1, HKV, D, cache_dtype="bfloat16", key_format=fmt,
                                               value_format=fmt) as s:
                        for at in range(0, L - 1, 2048):
                            n = min(2048, L - 1 - at)
                            s.extend(0, None, k[:, at:at + n], v[:, at:at + n])
                        r = s.extend(0, q, k[:, L - 1:], v[:, L - 1:], return_lse=True)
                    out = r.output[:, 0].astype(np.float64)
                    rel = np.sqrt(np.mean((out - want) ** 2) / np.mean(want ** 2))
                    lerr = np.max(np.abs(r.lse[:, 0] - lse))
                    print(f"| {kind} | {L} | {name} | {rel:.2e} | {lerr:.2e} |", flush=True)
                # int4 keys per token (simulated), values as the int4 session keeps them
                sim, slse = attention64(q[:, 0], int4_per_token(k), int4_per_token(v))
                rel = np.sqrt(np.mean((sim - want) ** 2) / np.mean(want ** 2))
                print(f"| {kind} | {L} | int4, keys per token (simulated) | {rel:.2e} | "
                      f"{np.max(np.abs(slse - lse)):.2e} |", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
