#!/usr/bin/env python3
"""A decode loop over a KV-cache session with PyTorch tensors (or numpy when
torch is not installed): a prefill, then one token a step, each step's output
checked against one-shot attention over every token so far, computed here in
float64. Prints the largest difference per step.

    python3 client/python/decode_loop.py [--target localhost:50051] [--steps 16]
                                          [--dtype bfloat16|float32]
"""
import argparse

import numpy as np

import attention_client as ac
from attention_client import AttentionClient

try:
    import torch
except ImportError:
    torch = None


def one_shot(q, k, v):
    """softmax(q k^T / sqrt(D)) v, bottom-right causal, GQA by repeating kv
    heads, in float64: q [Hq, n, D], k/v [Hkv, L, D]."""
    hq, n, d = q.shape
    k, v = (np.repeat(x, hq // x.shape[0], axis=0) for x in (k, v))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(d)
    L = k.shape[1]
    s = np.where(np.arange(L)[None, :] > np.arange(n)[:, None] + L - n, -np.inf, s)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="localhost:50051")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--prefill", type=int, default=64)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    a = ap.parse_args()
    hq, hkv, d = 32, 8, 128
    rng = np.random.default_rng(0)
    keys, values = np.zeros((hkv, 0, d)), np.zeros((hkv, 0, d))
    as_torch = torch is not None
    tdtype = (torch.bfloat16 if a.dtype == "bfloat16" else torch.float32) if as_torch else None

    def tensor(shape, cached=False):
        """The array to send, and the float64 values the server computes
        with: torch tensors are rounded to their dtype here; numpy float32
        keys and values are rounded by a bfloat16 cache on the server."""
        x = rng.standard_normal(shape).astype(np.float32)
        if as_torch:
            t = torch.from_numpy(x).to(tdtype)
            return t, t.float().numpy().astype(np.float64)
        if cached and a.dtype == "bfloat16":
            return x, ac.bf16_to_float32(ac.bf16_bits(x)).astype(np.float64)
        return x, x.astype(np.float64)

    with AttentionClient(a.target) as c:
        with c.create_session(1, hkv, d, cache_dtype=a.dtype) as s:
            print(f"session {s.id}: Hq {hq}, Hkv {hkv}, D {d}, {a.dtype} cache, "
                  f"{'torch ' + str(tdtype) if as_torch else 'numpy float32'} tensors")
            for step in range(a.steps + 1):
                n = a.prefill if step == 0 else 1
                (q, q64), (k, k64), (v, v64) = (tensor((hq, n, d)), tensor((hkv, n, d), True),
                                                tensor((hkv, n, d), True))
                out = s.extend(0, q, k, v).output
                keys, values = np.concatenate([keys, k64], 1), np.concatenate([values, v64], 1)
                got = out.float().numpy() if as_torch else out
                diff = np.abs(got - one_shot(q64, keys, values)).max()
                print(f"{'prefill' if step == 0 else 'step'} {step:3d}: {n:3d} token(s), "
                      f"L = {keys.shape[1]:4d}, output {tuple(out.shape)} {out.dtype}, "
                      f"max |server - one-shot float64| = {diff:.2e}")


if __name__ == "__main__":
    main()
