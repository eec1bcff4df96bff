#!/usr/bin/env python3
"""The bf16 error table of docs/precision.md (issue 24): on the same inputs
(N(0, 1) Q, K and V, float32 on the wire), the error against float64 of

  - our server with PRECISION_BFLOAT16 (attention.v1 Attention), and
  - PyTorch 1.13's bf16 path: bf16 tensors through q @ k^T * scale, masked
    softmax and @ v (torch rounds every intermediate to bf16);

max and p99 absolute error per shape, L = 64 ... 8192, D = 64 and 128, with
and without a causal mask. Needs Debian's python3-torch (not in CI); on a CPU
without a bf16 matrix tier, the server computes float32 unless started with
ATTN_BF16_EMULATION=1, which this script sets (the table then shows the bf16
kernel's arithmetic, emulated; the header line says which).

    /usr/bin/python3 tests/scripts/bf16_error_table.py build/bin/attention-server
    (PYTHONPATH: build/tests/client/python-stubs and client/python)
"""
import os
import re
import subprocess
import sys
import threading

import numpy as np
import torch

from attention_client import AttentionClient

HEADS = 2


def reference(q, k, v, causal):
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    if causal:
        n = s.shape[-1]
        s = np.where(np.triu(np.ones((n, n), bool), 1), -np.inf, s)
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(-1, keepdims=True)) @ v


def torch_bf16(q, k, v, causal):
    q, k, v = (torch.from_numpy(x).to(torch.bfloat16) for x in (q, k, v))
    s = (q @ k.transpose(-2, -1)) * (1.0 / q.shape[-1] ** 0.5)
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return (torch.softmax(s, dim=-1) @ v).float().numpy()


def errors(got, want):
    e = np.abs(np.asarray(got, np.float64) - want).ravel()
    return e.max(), np.percentile(e, 99)


def main():
    server = sys.argv[1]
    env = dict(os.environ, ATTN_BF16_EMULATION="1")
    proc = subprocess.Popen([server, "--host", "127.0.0.1", "--port", "0", "--log-level", "info",
                             "--max-message-mb", "512"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    port, tier = None, "?"
    for _ in range(200):
        line = proc.stdout.readline()
        m = re.search(r"listening on [\d.]+:(\d+)", line)
        if m:
            port = int(m.group(1))
            tier = re.search(r"engine tier (\S+) .*bf16 compute: ([^;)]+)", line).group(0)
        if "SERVING" in line or not line:
            break
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    try:
        assert port, "attention-server did not start"
        client = AttentionClient(f"127.0.0.1:{port}")
        torch.set_num_threads(os.cpu_count() or 1)
        print(f"# {tier}; torch {torch.__version__}")
        print(f"{'L':>5} {'D':>4} {'mask':>6} | {'ours max':>9} {'ours p99':>9} | "
              f"{'torch max':>9} {'torch p99':>9} | precision")
        rng = np.random.default_rng(24)
        worse = 0
        for length in (64, 256, 1024, 2048, 8192):
            for d in (64, 128):
                for causal in (False, True):
                    heads = 1 if length >= 8192 else HEADS
                    q, k, v = (rng.standard_normal((1, heads, length, d)).astype(np.float32)
                               for _ in range(3))
                    want = reference(q, k, v, causal)
                    res = client.attention(q, k, v, causal=causal, compute_precision="bfloat16")
                    ours = errors(res.output, want)
                    theirs = errors(torch_bf16(q, k, v, causal), want)
                    worse += ours[0] > theirs[0]
                    print(f"{length:>5} {d:>4} {'causal' if causal else 'none':>6} | "
                          f"{ours[0]:9.2e} {ours[1]:9.2e} | {theirs[0]:9.2e} {theirs[1]:9.2e} | "
                          f"{res.compute_precision or '?'}")
        print(f"# rows where our max error exceeds PyTorch's: {worse}")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
