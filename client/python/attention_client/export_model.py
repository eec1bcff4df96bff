#!/usr/bin/python3
"""Export a PyTorch attention module as a model file for attention-server.

The file is .safetensors with the module's state_dict names, float32, and
__metadata__ {"kind": ..., "num_heads": ...}. Uses only torch, numpy and json
(Debian has no safetensors package).

Supported modules: nn.MultiheadAttention (batch_first semantics; no
add_bias_kv / add_zero_attn), and the seed modules SelfAttention
(kind attention), CrossAttention (cross_attention) and
MultiHeadSelfAttention (multi_head_attention).

As a library:
    from export_model import save_module
    save_module(my_mha, "models/encoder.safetensors")

From the command line, a freshly initialised module (for demos and tests):
    /usr/bin/python3 client/python/export_model.py --module mha \\
        --embed-dim 64 --num-heads 4 --seed 0 --out models/demo.safetensors
or a saved state_dict:
    /usr/bin/python3 client/python/export_model.py --module mha \\
        --embed-dim 512 --num-heads 8 --state-dict weights.pt --out models/enc.safetensors
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

try:
    from attention_client import seed_modules
except ImportError:  # run as a file from the source tree
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import seed_modules  # noqa: E402


def module_kind(module):
    """Returns (kind, num_heads) for a supported module."""
    if isinstance(module, torch.nn.MultiheadAttention):
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError("add_bias_kv and add_zero_attn are not supported")
        return "multi_head_attention", module.num_heads
    if isinstance(module, seed_modules.MultiHeadSelfAttention):
        return "multi_head_attention", module.num_heads
    if isinstance(module, seed_modules.CrossAttention):
        return "cross_attention", 1
    if isinstance(module, seed_modules.SelfAttention):
        return "attention", 1
    raise TypeError(f"unsupported module type {type(module).__name__}")


def write_safetensors(path, tensors, metadata):
    """Writes float32 arrays {name: np.ndarray} and string metadata."""
    header = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    blobs, offset = [], 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name], dtype="<f4")
        blob = arr.tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # keep the data 8-byte aligned
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


def save_module(module, path):
    """Writes `module`'s weights to `path` in the model repository format."""
    kind, heads = module_kind(module)
    tensors = {name: t.detach().cpu().float().numpy()
               for name, t in module.state_dict().items()}
    write_safetensors(path, tensors, {"kind": kind, "num_heads": heads,
                                      "source": type(module).__name__})
    return kind, heads


def build_module(args):
    if args.module == "mha":
        return torch.nn.MultiheadAttention(args.embed_dim, args.num_heads, bias=not args.no_bias,
                                           kdim=args.kdim, vdim=args.vdim, batch_first=True)
    if args.module == "self":
        return seed_modules.SelfAttention(args.embed_dim)
    if args.module == "cross":
        return seed_modules.CrossAttention(args.embed_dim)
    return seed_modules.MultiHeadSelfAttention(args.embed_dim, args.num_heads)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Export an attention module to .safetensors")
    ap.add_argument("--module", required=True, choices=["mha", "self", "cross", "mhsa"],
                    help="nn.MultiheadAttention, or the seed SelfAttention, CrossAttention, "
                         "MultiHeadSelfAttention")
    ap.add_argument("--embed-dim", type=int, required=True)
    ap.add_argument("--num-heads", type=int, default=1)
    ap.add_argument("--kdim", type=int)
    ap.add_argument("--vdim", type=int)
    ap.add_argument("--no-bias", action="store_true")
    ap.add_argument("--seed", type=int, default=0, help="initialisation seed")
    ap.add_argument("--state-dict", help="a torch.save()d state_dict to load")
    ap.add_argument("--out", required=True, help="output .safetensors path")
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)
    module = build_module(args)
    if args.state_dict:
        module.load_state_dict(torch.load(args.state_dict, map_location="cpu"))
    kind, heads = save_module(module, args.out)
    print(f"wrote {args.out}: kind={kind} num_heads={heads} "
          f"tensors={sorted(module.state_dict())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
