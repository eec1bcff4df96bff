"""Arrays to and from attention.v1 Tensors: numpy (float32, float16, bool,
and bfloat16 as a uint16 view with dtype="bfloat16"), and PyTorch tensors
(float32, float16, bfloat16, bool) when torch is importable. torch is never
imported unless a torch tensor is passed."""
from typing import Any, Optional, Tuple

import numpy as np

from ._pb import attention_pb2

DATA, VALUES = "data", "values"
WIRE_DTYPES = ("float32", "float16", "bfloat16")
_DT = attention_pb2


def _is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), rounded to nearest even; NaN stays NaN."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(a)
    if nan.any():
        rounded = np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded)
    return rounded


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) -> float32, exactly."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


class Kind:
    """What an input was, so that the answer comes back alike: the library
    (numpy or torch), its dtype name, and the wire dtype used."""

    def __init__(self, lib: str, dtype: str, wire: str):
        self.lib, self.dtype, self.wire = lib, dtype, wire


def kind_of(x: Any, dtype: Optional[str] = None, wire_dtype: Optional[str] = None) -> Kind:
    """The kind of a query. `dtype="bfloat16"` marks a numpy uint16 array as
    bfloat16 bits; `wire_dtype` overrides the wire type (default: its own)."""
    if wire_dtype is not None and wire_dtype not in WIRE_DTYPES:
        raise ValueError(f"wire_dtype: expected one of {WIRE_DTYPES}, got {wire_dtype!r}")
    if _is_torch(x):
        import torch

        names = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
                 torch.bool: "bool"}
        if x.dtype not in names:
            raise TypeError(f"torch dtype {x.dtype} is not served: float32, float16, bfloat16 "
                            "or bool")
        own = names[x.dtype]
        return Kind("torch", own, wire_dtype or (own if own != "bool" else "float32"))
    a = np.asarray(x)
    if dtype == "bfloat16":
        if a.dtype != np.uint16:
            raise TypeError(f'dtype="bfloat16" needs a uint16 view of the bits, got {a.dtype}')
        return Kind("numpy", "bfloat16", wire_dtype or "bfloat16")
    if a.dtype == np.float16:
        return Kind("numpy", "float16", wire_dtype or "float16")
    if a.dtype == np.bool_:
        return Kind("numpy", "bool", "float32")
    if a.dtype.kind not in "fiu":
        raise TypeError(f"arrays must be float32, float16, bool or (with dtype='bfloat16') "
                        f"uint16, got {a.dtype}")
    return Kind("numpy", "float32", wire_dtype or "float32")


def _float32_of(x: Any, kind: Kind) -> np.ndarray:
    """The values of x as a float32 numpy array (for narrowing)."""
    if _is_torch(x):
        return x.detach().to("cpu").float().numpy()
    a = np.asarray(x)
    return bf16_to_float32(a) if kind.dtype == "bfloat16" else np.asarray(a, np.float32)


def _wire_bytes(x: Any, kind: Kind, wire: str) -> bytes:
    """The little-endian bytes of x as `wire`, with at most one copy where the
    source already has that type and layout."""
    if _is_torch(x):
        import torch

        t = x.detach().to("cpu").contiguous()
        if t.dtype == torch.bfloat16 and wire == "bfloat16":
            return t.view(torch.int16).numpy().tobytes()
        if t.dtype == torch.float16 and wire == "float16":
            return t.numpy().tobytes()
        if t.dtype == torch.float32 and wire == "float32":
            return t.numpy().tobytes()
    else:
        a = np.asarray(x)
        if kind.dtype == "bfloat16" and wire == "bfloat16":
            return np.ascontiguousarray(a, "<u2").tobytes()
        if wire == "float16" and a.dtype == np.float16:
            return np.ascontiguousarray(a, "<f2").tobytes()
        if wire == "float32" and kind.dtype == "float32":
            return np.ascontiguousarray(a, "<f4").tobytes()
    f = _float32_of(x, kind)
    if wire == "float32":
        return np.ascontiguousarray(f, "<f4").tobytes()
    if wire == "float16":
        return np.ascontiguousarray(f.astype("<f2")).tobytes()
    return bf16_bits(f).astype("<u2").tobytes()


def to_tensor(x: Any, encoding: str = DATA, wire_dtype: Optional[str] = None,
              dtype: Optional[str] = None) -> "attention_pb2.Tensor":
    """An array (numpy or torch) as an attention.v1 Tensor. Bool arrays go as
    BOOL; floats as their own type unless `wire_dtype` says otherwise.
    `encoding="values"` (float32 and bool only) sends repeated floats."""
    if x is None:
        raise TypeError("expected an array, got None")
    if _is_torch(x):
        shape = list(x.shape)
    else:
        shape = list(np.shape(x))
    kind = kind_of(x, dtype, wire_dtype)
    t = attention_pb2.Tensor(shape=shape)
    if kind.dtype == "bool":
        a = x.detach().to("cpu").numpy() if _is_torch(x) else np.asarray(x)
        t.dtype = _DT.DATA_TYPE_BOOL
        if encoding == VALUES:
            t.values.extend(a.astype(np.float32).ravel().tolist())
        else:
            t.data = np.ascontiguousarray(a, np.uint8).tobytes()
        return t
    wire = kind.wire
    t.dtype = {"float32": _DT.DATA_TYPE_FLOAT32, "float16": _DT.DATA_TYPE_FLOAT16,
               "bfloat16": _DT.DATA_TYPE_BFLOAT16}[wire]
    if encoding == VALUES:
        if wire != "float32":
            raise ValueError(f"encoding='values' carries float32 only; {wire} travels as data")
        t.values.extend(_float32_of(x, kind).ravel().tolist())
    else:
        t.data = _wire_bytes(x, kind, wire)
    return t


def from_tensor(tensor: "attention_pb2.Tensor", like: Optional[Kind] = None) -> Any:
    """A Tensor as an array of the kind `like` (default numpy float32): torch
    for torch, the query's dtype (a bfloat16 answer to a float32 numpy query
    sent as bfloat16 is widened back to float32)."""
    shape: Tuple[int, ...] = tuple(tensor.shape)
    if tensor.dtype == _DT.DATA_TYPE_BOOL:
        raw = (np.array(tensor.values, np.float32) != 0) if tensor.values else (
            np.frombuffer(tensor.data, np.uint8) != 0)
        return raw.reshape(shape)
    if tensor.values:
        f32 = np.array(tensor.values, np.float32).reshape(shape)
        half = None
    elif tensor.dtype == _DT.DATA_TYPE_FLOAT16:
        half, f32 = np.frombuffer(tensor.data, "<f2").reshape(shape), None
    elif tensor.dtype == _DT.DATA_TYPE_BFLOAT16:
        half, f32 = np.frombuffer(tensor.data, "<u2").reshape(shape), None
    else:
        f32, half = np.frombuffer(tensor.data, "<f4").reshape(shape), None
    want = like.dtype if like is not None else "float32"
    lib = like.lib if like is not None else "numpy"
    if lib == "torch":
        import torch

        if half is not None and tensor.dtype == _DT.DATA_TYPE_BFLOAT16 and want == "bfloat16":
            return torch.from_numpy(half.astype(np.int16)).view(torch.bfloat16)
        values = f32 if f32 is not None else (
            bf16_to_float32(half) if tensor.dtype == _DT.DATA_TYPE_BFLOAT16 else half)
        out = torch.from_numpy(np.array(values))
        return out.to({"float32": torch.float32, "float16": torch.float16,
                       "bfloat16": torch.bfloat16, "bool": torch.float32}[want])
    if half is not None and tensor.dtype == _DT.DATA_TYPE_FLOAT16 and want == "float16":
        return half.copy()
    if half is not None and tensor.dtype == _DT.DATA_TYPE_BFLOAT16 and want == "bfloat16":
        return half.copy()
    values = f32 if f32 is not None else (
        bf16_to_float32(half) if tensor.dtype == _DT.DATA_TYPE_BFLOAT16 else half)
    if want == "float16":
        return np.asarray(values, np.float16)
    if want == "bfloat16":
        return bf16_bits(np.asarray(values, np.float32))
    return np.array(values, np.float32)
