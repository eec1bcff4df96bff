#!/usr/bin/python3
"""Writes the PyTorch 1.13 golden files that core_golden_test compares with.

Run by hand when a case changes (needs python3-torch; CI only reads the files):
    /usr/bin/python3 tests/golden/make_goldens.py

For each case it writes
  models/<case>.safetensors  the module's weights, through export_model.py
  cases/<case>.safetensors   inputs, PyTorch's outputs, and the options in
                             __metadata__ (op, model, causal, need_weights,
                             average_weights)
Masks are stored as float32: key_padding_mask as 0/1 (1 = ignore), attn_bias
additive in [Lq, Lk] or [B, H, Lq, Lk] (PyTorch's [B*H, Lq, Lk] reshaped).
No row is fully masked: PyTorch gives NaN there, the service gives zeros.
"""
import os
import sys
import zlib

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))
from export_model import save_module, write_safetensors  # noqa: E402
import seed_modules  # noqa: E402


def np32(t):
    return t.detach().float().contiguous().numpy()


def write_case(name, op, tensors, model=None, causal=False, need_weights=False, average=True):
    meta = {"op": op, "model": (model + ".safetensors") if model else "",
            "causal": int(causal), "need_weights": int(need_weights),
            "average_weights": int(average)}
    write_safetensors(os.path.join(HERE, "cases", name + ".safetensors"),
                      {k: np32(v) for k, v in tensors.items()}, meta)
    print("wrote", name)


def mha_case(name, embed, heads, batch, lq, lk=None, kdim=None, vdim=None, bias=True,
             self_attn=True, kpm=False, mask=None, causal=False, need_weights=True,
             average=True, unbatched=False):
    torch.manual_seed(zlib.crc32(name.encode()) % 1000)  # stable across runs
    mha = torch.nn.MultiheadAttention(embed, heads, bias=bias, kdim=kdim, vdim=vdim,
                                      batch_first=True).eval()
    if bias:  # PyTorch initialises biases to zero; make them matter
        with torch.no_grad():
            for n, p in mha.named_parameters():
                if "bias" in n:
                    p.uniform_(-0.5, 0.5)
    save_module(mha, os.path.join(HERE, "models", name + ".safetensors"))
    lk = lk or lq
    qshape = (lq, embed) if unbatched else (batch, lq, embed)
    query = torch.randn(*qshape)
    if self_attn:
        key = value = query
    else:
        lead = () if unbatched else (batch,)
        key = torch.randn(*lead, lk, kdim or embed)
        value = torch.randn(*lead, lk, vdim or embed)
    tensors = {"query": query}
    if not self_attn:
        tensors.update(key=key, value=value)
    args = {}
    if kpm:
        pad = torch.zeros(batch, lk, dtype=torch.bool)
        pad[:, -2:] = True
        pad[0, 1] = True
        args["key_padding_mask"] = pad[0] if unbatched else pad
        tensors["key_padding_mask"] = pad.float()
    attn_mask = None
    if mask == "2d":
        attn_mask = torch.randn(lq, lk)
        tensors["attn_bias"] = attn_mask
    elif mask == "3d":
        attn_mask = torch.randn(batch * heads, lq, lk)
        tensors["attn_bias"] = attn_mask.view(batch, heads, lq, lk)
    if causal:
        attn_mask = torch.ones(lq, lk, dtype=torch.bool).triu(1)
    with torch.inference_mode():
        out, weights = mha(query, key, value, attn_mask=attn_mask, need_weights=need_weights,
                           average_attn_weights=average, **args)
    tensors["expected_output"] = out
    if need_weights:
        tensors["expected_weights"] = weights
    write_case(name, "mha", tensors, model=name, causal=causal, need_weights=need_weights,
               average=average)


def seed_case(name, module, inputs):
    torch.manual_seed(1)
    with torch.no_grad():
        for p in module.parameters():
            p.uniform_(-0.6, 0.6)
    save_module(module, os.path.join(HERE, "models", name + ".safetensors"))
    with torch.inference_mode():
        out = module(*inputs)
    tensors = {"query": inputs[0], "expected_output": out}
    if len(inputs) == 2:  # CrossAttention(x_dec, x_enc)
        tensors.update(key=inputs[1], value=inputs[1])
    write_case(name, "mha", tensors, model=name)


def main():
    os.makedirs(os.path.join(HERE, "models"), exist_ok=True)
    os.makedirs(os.path.join(HERE, "cases"), exist_ok=True)
    torch.manual_seed(0)
    mha_case("mha_self_avg_weights", embed=16, heads=4, batch=2, lq=5)
    mha_case("mha_self_per_head_kpm_bias2d", embed=16, heads=4, batch=2, lq=6, kpm=True,
             mask="2d", average=False)
    mha_case("mha_cross_kdim_vdim_bias4d", embed=16, heads=2, batch=2, lq=4, lk=7, kdim=12,
             vdim=20, self_attn=False, mask="3d")
    mha_case("mha_no_bias_causal", embed=8, heads=2, batch=1, lq=9, bias=False, causal=True)
    mha_case("mha_unbatched_cross_kpm", embed=8, heads=2, batch=1, lq=5, lk=7,
             self_attn=False, kpm=True, unbatched=True)
    mha_case("mha_long_blocks_kpm", embed=32, heads=4, batch=1, lq=300, kpm=True,
             need_weights=False)

    seed_case("seed_self_attention", seed_modules.SelfAttention(6), [torch.randn(2, 5, 6)])
    seed_case("seed_cross_attention", seed_modules.CrossAttention(6),
              [torch.randn(2, 4, 6), torch.randn(2, 7, 6)])
    seed_case("seed_multi_head_self_attention", seed_modules.MultiHeadSelfAttention(16, 4),
              [torch.randn(2, 5, 16)])

    # The seed's SDPA function: the worked example, then a random [B, H, L, D] case.
    x = torch.tensor([[1, 0], [0, 1], [1, 1], [1, 1], [0.5, 1]], dtype=torch.float32)
    out, w = seed_modules.scaled_dot_product_attention(x, x, x)
    write_case("sdpa_seed_worked_example", "sdpa",
               {"query": x, "expected_output": out, "expected_weights": w}, need_weights=True)
    q, k, v = torch.randn(2, 3, 6, 8), torch.randn(2, 3, 9, 8), torch.randn(2, 3, 9, 5)
    out, w = seed_modules.scaled_dot_product_attention(q, k, v)
    write_case("sdpa_4d", "sdpa", {"query": q, "key": k, "value": v, "expected_output": out,
                                   "expected_weights": w}, need_weights=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
