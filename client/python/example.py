#!/usr/bin/python3
"""The seed's worked example, then the demo multi-head model, from Python.

    client/python/generate_stubs.sh
    /usr/bin/python3 client/python/example.py --target localhost:50051
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attention_client import AttentionClient  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="localhost:50051")
    args = ap.parse_args()
    with AttentionClient(args.target) as client:
        print("health:", client.health())
        # "karina is to the store", 2-d embeddings; W^Q = W^K = W^V = I.
        x = np.array([[1, 0], [0, 1], [1, 1], [1, 1], [0.5, 1]], np.float32)
        out, weights = client.attention(x, return_weights=True)
        np.set_printoptions(precision=4, suppress=True)
        print("self-attention output:\n", out)
        print("weights:\n", weights)
        for m in client.list_models():
            print("model:", m)
        q = np.random.default_rng(0).standard_normal((2, 16, 512), dtype=np.float32)
        out, _ = client.multi_head_attention(q, model="demo-mha", causal=True)
        print("demo-mha output", out.shape)
    return 0


if __name__ == "__main__":
    sys.exit(main())
