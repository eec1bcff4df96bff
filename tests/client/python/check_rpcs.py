#!/usr/bin/python3
"""Calls every RPC of a running server with the Python client and checks the
results: the seed's worked example (float64 recomputation), cross-attention
and multi-head attention on the demo models (shapes, finite values),
ListModels and health. Used by deploy/container_test.sh.

    PYTHONPATH=STUBS:client/python /usr/bin/python3 tests/client/python/check_rpcs.py HOST:PORT
"""
import sys

import numpy as np

from attention_client import AttentionClient


def main():
    target = sys.argv[1]
    with AttentionClient(target) as c:
        assert c.health() == "SERVING"
        x = np.array([[1, 0], [0, 1], [1, 1], [1, 1], [0.5, 1]], np.float32)
        out, w = c.attention(x, return_weights=True)
        xd = x.astype(np.float64)
        s = xd @ xd.T / np.sqrt(2)
        p = np.exp(s - s.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        assert np.allclose(out, p @ xd, rtol=1e-5, atol=1e-6), out
        assert np.allclose(w, p, rtol=1e-5, atol=1e-7)
        print("Attention: seed example", out[0])
        rng = np.random.default_rng(0)
        dec = rng.standard_normal((2, 4, 64), dtype=np.float32)
        enc = rng.standard_normal((2, 7, 64), dtype=np.float32)
        out, w = c.cross_attention(dec, enc, model="demo-cross-attention", return_weights=True)
        assert out.shape == (2, 4, 64) and w.shape == (2, 4, 7) and np.isfinite(out).all()
        assert np.allclose(w.sum(-1), 1, atol=1e-5)
        print("CrossAttention:", out.shape)
        q = rng.standard_normal((2, 16, 512), dtype=np.float32)
        out, _ = c.multi_head_attention(q, model="demo-mha", causal=True)
        assert out.shape == (2, 16, 512) and np.isfinite(out).all()
        print("MultiHeadAttention:", out.shape)
        names = {m["name"] for m in c.list_models()}
        assert {"demo-attention", "demo-cross-attention", "demo-mha", "demo-mha-small"} <= names
        print("ListModels:", sorted(names))
    print("PASS: every RPC answered correctly")
    return 0


if __name__ == "__main__":
    sys.exit(main())
