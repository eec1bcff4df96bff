"""The committed PyTorch goldens (tests/golden/make_goldens.py): reading
their .safetensors files, and making each case's call with the Python client.
Shared by test_python_client.py and check_goldens.py."""
import json
import struct

import numpy as np


def read_safetensors(path):
    """(metadata, {name: float32 array}) from a .safetensors file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    arrays = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        arrays[name] = np.frombuffer(data[begin:end], "<f4").reshape(e["shape"])
    return meta, arrays


def call_case(client, name, meta, t):
    """(output, weights) of golden case `name` through `client`; the model
    cases use the model of the same name (tests/golden/models)."""
    want_w = meta["need_weights"] == "1"
    kpm = t["key_padding_mask"] != 0 if "key_padding_mask" in t else None
    common = dict(causal=meta["causal"] == "1", key_padding_mask=kpm,
                  attn_bias=t.get("attn_bias"), return_weights=want_w)
    if meta["op"] == "sdpa":
        return client.attention(t["query"], t.get("key"), t.get("value"), **common)
    if name == "seed_self_attention":
        return client.attention(t["query"], model=name, **common)
    if name == "seed_cross_attention":
        return client.cross_attention(t["query"], t["key"], model=name, **common)
    return client.multi_head_attention(t["query"], t.get("key"), t.get("value"), model=name,
                                       per_head_weights=meta["average_weights"] == "0", **common)


def max_error(got, want, floor):
    """The largest |got - want| / max(|want|, floor), elementwise (1e-5 passes)."""
    if got.shape != want.shape:
        return float("inf")
    return float(np.max(np.abs(got - want) / np.maximum(np.abs(want), floor)))
