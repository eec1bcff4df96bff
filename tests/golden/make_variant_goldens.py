#!/usr/bin/python3
"""Writes the PyTorch 1.13 golden files of the attention variants (issue 23)
that core_variant_goldens_test compares with. PyTorch 1.13 has no GQA,
windows, softcap, ALiBi or sinks in its attention, so each case is written
the way PyTorch users express it: K and V repeated with repeat_interleave,
an explicit boolean mask, softcap and ALiBi as tensor ops on the scores, the
sink as an extra score column dropped after the softmax; in float64 from the
float32 inputs. Run by hand (needs python3-torch; CI only reads the files):
    /usr/bin/python3 tests/golden/make_variant_goldens.py
"""
import os
import sys
import zlib

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))
from export_model import write_safetensors  # noqa: E402


def case(name, b, hq, hkv, lq, lk, d, causal=False, bottom_right=False, window=(None, None),
         softcap=None, alibi=False, sinks=False):
    torch.manual_seed(zlib.crc32(name.encode()) % 1000)
    q, k, v = torch.randn(b, hq, lq, d), torch.randn(b, hkv, lk, d), torch.randn(b, hkv, lk, d)
    t = {"query": q, "key": k, "value": v}
    kk = k.double().repeat_interleave(hq // hkv, dim=1)
    vv = v.double().repeat_interleave(hq // hkv, dim=1)
    s = q.double() @ kk.transpose(-1, -2) / d ** 0.5
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    pos = torch.arange(lq)[:, None] + (lk - lq if bottom_right else 0)
    j = torch.arange(lk)[None, :]
    if alibi:
        slopes = 2.0 ** (-8.0 * torch.arange(1, hq + 1) / hq)
        t["alibi_slopes"] = slopes.float()
        s = s - slopes.double()[:, None, None] * (pos - j).abs().double()
    masked = torch.zeros(lq, lk, dtype=torch.bool)
    if causal:
        masked |= j > pos
    if window[0] is not None:
        masked |= j < pos - window[0]
    if window[1] is not None:
        masked |= j > pos + window[1]
    s = s.masked_fill(masked, float("-inf"))
    if sinks:
        sink = torch.randn(hq)
        t["sink_logits"] = sink
        s = torch.cat([s, sink.double()[None, :, None, None].expand(b, hq, lq, 1)], dim=-1)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1)
    if sinks:
        p = p[..., :-1]
    t["expected_output"] = torch.nan_to_num(p) @ vv
    t["expected_lse"] = lse
    meta = {"causal": int(causal), "bottom_right": int(bottom_right),
            "window_left": -1 if window[0] is None else window[0],
            "window_right": -1 if window[1] is None else window[1],
            "softcap": softcap or 0}
    write_safetensors(os.path.join(HERE, "variants", name + ".safetensors"),
                      {n: x.detach().float().contiguous().numpy() for n, x in t.items()}, meta)
    print("wrote", name)


if __name__ == "__main__":
    case("gqa_bottom_right_window", 2, 8, 2, 37, 300, 32, causal=True, bottom_right=True,
         window=(40, None))
    case("mqa_softcap_alibi_sinks", 1, 4, 1, 260, 520, 16, causal=True, softcap=30.0,
         alibi=True, sinks=True)
    case("gqa_decode_row", 1, 32, 8, 1, 300, 32, causal=True, bottom_right=True)
    case("window_both_sides_no_causal", 1, 2, 2, 70, 90, 8, window=(5, 3))
