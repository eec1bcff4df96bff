"""Requests and results shared by the blocking and the asyncio clients."""
import json
import os
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence, Tuple

import grpc
import numpy as np

from ._arrays import DATA, Kind, _is_torch, bf16_to_float32, from_tensor, kind_of, to_tensor
from ._pb import attention_pb2, oip_pb2

_ALIGN = {"top_left": attention_pb2.CAUSAL_ALIGNMENT_TOP_LEFT,
          "bottom_right": attention_pb2.CAUSAL_ALIGNMENT_BOTTOM_RIGHT}
_PRECISION = {None: attention_pb2.PRECISION_UNSPECIFIED,
              "float32": attention_pb2.PRECISION_FLOAT32,
              "bfloat16": attention_pb2.PRECISION_BFLOAT16}


class AttentionResult:
    """What a call returns: `output`, `weights` and `lse` (None unless asked),
    each the query's kind and dtype (the lse: float32, or torch float32).
    Unpacks as `output, weights`, as the old client's tuples did.
    `compute_precision` is what the server computed in ("float32" or
    "bfloat16", its attn-compute-precision header), None where not known."""

    __slots__ = ("output", "weights", "lse", "compute_precision")

    def __init__(self, output: Any, weights: Any = None, lse: Any = None,
                 compute_precision: Optional[str] = None):
        self.output, self.weights, self.lse = output, weights, lse
        self.compute_precision = compute_precision

    def __iter__(self) -> Iterator[Any]:
        return iter((self.output, self.weights))

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> Any:
        return (self.output, self.weights)[i]

    def __repr__(self) -> str:
        shape = lambda x: None if x is None else tuple(x.shape)  # noqa: E731
        return (f"AttentionResult(output={shape(self.output)}, weights={shape(self.weights)}, "
                f"lse={shape(self.lse)}, compute_precision={self.compute_precision!r})")


def channel_options(max_message_mb: int, retry: bool) -> list:
    size = int(max_message_mb) << 20
    options = [("grpc.max_send_message_length", size), ("grpc.max_receive_message_length", size)]
    if retry:  # UNAVAILABLE only: the server did not take the call
        # Every method but SessionService.Extend, whose steps the session
        # handles retry themselves, and only when they carry expected_tokens.
        names = [{"service": s} for s in ("attention.v1.AttentionService",
                                          "inference.GRPCInferenceService",
                                          "grpc.health.v1.Health")]
        names += [{"service": "attention.v1.SessionService", "method": m}
                  for m in ("CreateSession", "GetSession", "ForkSession", "TruncateSession",
                            "DeleteSession", "ListSessions")]
        config = {"methodConfig": [{"name": names, "retryPolicy": {
            "maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "2s",
            "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}
        options += [("grpc.enable_retries", 1), ("grpc.service_config", json.dumps(config))]
    return options


def credentials(tls: bool, tls_ca: Optional[str], tls_cert: Optional[str],
                tls_key: Optional[str]) -> Optional[grpc.ChannelCredentials]:
    """TLS credentials when `tls` or any PEM path is given, else None."""
    if not (tls or tls_ca or tls_cert or tls_key):
        return None

    def read(path: Optional[str]) -> Optional[bytes]:
        if path is None:
            return None
        with open(path, "rb") as f:
            return f.read()

    return grpc.ssl_channel_credentials(root_certificates=read(tls_ca), private_key=read(tls_key),
                                        certificate_chain=read(tls_cert))


def auth_metadata(token: Optional[str]) -> Optional[Tuple[Tuple[str, str], ...]]:
    token = token if token is not None else os.environ.get("ATTN_TOKEN")
    return (("authorization", f"Bearer {token}"),) if token else None


def _set(req: Any, field: str, x: Any, encoding: str, wire: Optional[str] = None,
         dtype: Optional[str] = None) -> None:
    """`dtype`: the query's dtype="bfloat16" marking, for the arrays that share its type."""
    if x is not None:
        getattr(req, field).CopyFrom(to_tensor(x, encoding, wire, dtype))


def _options(req: Any, encoding: str, causal_alignment: str, window: Optional[Sequence],
             alibi_slopes: Any, softcap: Optional[float], sink_logits: Any, return_lse: bool,
             compute_precision: Optional[str]) -> None:
    if causal_alignment not in _ALIGN:
        raise ValueError(f"causal_alignment: expected 'top_left' or 'bottom_right', got "
                         f"{causal_alignment!r}")
    if compute_precision not in _PRECISION:
        raise ValueError(f"compute_precision: expected 'float32' or 'bfloat16', got "
                         f"{compute_precision!r}")
    o = req.options
    o.causal_alignment = _ALIGN[causal_alignment]
    if window is not None:
        if len(window) != 2:
            raise ValueError(f"window: expected (left, right), got {window!r}")
        if window[0] is not None:
            o.window_left = int(window[0])
        if window[1] is not None:
            o.window_right = int(window[1])
    if softcap is not None:
        o.softcap = float(softcap)
    # Slopes and sinks are FLOAT32 whatever the query's type.
    _set(o, "alibi_slopes", None if alibi_slopes is None else _as_f32(alibi_slopes), encoding)
    _set(o, "sink_logits", None if sink_logits is None else _as_f32(sink_logits), encoding)
    o.return_lse = bool(return_lse)
    o.compute_precision = _PRECISION[compute_precision]


def _as_f32(x: Any) -> np.ndarray:
    if _is_torch(x):
        return x.detach().to("cpu").float().numpy()
    return np.asarray(x, np.float32)


def _shared(req: Any, encoding: str, wire: str, model: Optional[str], projections: Any,
            causal: bool, key_padding_mask: Any, attn_bias: Any, return_weights: bool,
            dtype: Optional[str]) -> None:
    if model:
        req.model = model
    for name, w in (projections or {}).items():
        _set(req.projections, name, w, encoding, wire, dtype)
    req.causal = bool(causal)
    if key_padding_mask is not None:
        m = key_padding_mask
        _set(req, "key_padding_mask", m if _is_torch(m) else np.asarray(m, bool), encoding)
    _set(req, "attn_bias", None if attn_bias is None else _as_f32(attn_bias), encoding)
    req.return_weights = bool(return_weights)


def attention_request(query: Any, key: Any, value: Any, *, model, projections, causal,
                      causal_alignment, window, alibi_slopes, softcap, sink_logits, scale,
                      key_padding_mask, attn_bias, return_weights, return_lse, compute_precision,
                      cu_seqlens_q, cu_seqlens_k, wire_dtype, encoding=DATA, dtype=None):
    kind = kind_of(query, dtype, wire_dtype)
    req = attention_pb2.AttentionRequest()
    req.query.CopyFrom(to_tensor(query, encoding, kind.wire, dtype))
    _set(req, "key", key, encoding, kind.wire, dtype)
    _set(req, "value", value, encoding, kind.wire, dtype)
    if scale is not None:
        req.scale = float(scale)
    _shared(req, encoding, kind.wire, model, projections, causal, key_padding_mask, attn_bias,
            return_weights, dtype)
    _options(req, encoding, causal_alignment, window, alibi_slopes, softcap, sink_logits,
             return_lse, compute_precision)
    for field, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if cu is not None:
            getattr(req, field).extend(int(x) for x in np.asarray(cu).ravel())
    return req, kind


def cross_request(decoder: Any, encoder: Any, *, model, projections, causal, causal_alignment,
                  window, alibi_slopes, softcap, sink_logits, scale, key_padding_mask, attn_bias,
                  return_weights, return_lse, compute_precision, wire_dtype, encoding=DATA,
                  dtype=None):
    kind = kind_of(decoder, dtype, wire_dtype)
    req = attention_pb2.CrossAttentionRequest()
    req.decoder.CopyFrom(to_tensor(decoder, encoding, kind.wire, dtype))
    _set(req, "encoder", encoder, encoding, kind.wire, dtype)
    if scale is not None:
        req.scale = float(scale)
    _shared(req, encoding, kind.wire, model, projections, causal, key_padding_mask, attn_bias,
            return_weights, dtype)
    _options(req, encoding, causal_alignment, window, alibi_slopes, softcap, sink_logits,
             return_lse, compute_precision)
    return req, kind


def mha_request(query: Any, key: Any, value: Any, *, model, num_heads, num_kv_heads,
                per_head_weights, projections, causal, causal_alignment, window, alibi_slopes,
                softcap, sink_logits, key_padding_mask, attn_bias, return_weights, return_lse,
                compute_precision, wire_dtype, encoding=DATA, dtype=None):
    kind = kind_of(query, dtype, wire_dtype)
    req = attention_pb2.MultiHeadAttentionRequest()
    req.query.CopyFrom(to_tensor(query, encoding, kind.wire, dtype))
    _set(req, "key", key, encoding, kind.wire, dtype)
    _set(req, "value", value, encoding, kind.wire, dtype)
    req.num_heads = int(num_heads)
    req.num_kv_heads = int(num_kv_heads)
    req.per_head_weights = bool(per_head_weights)
    _shared(req, encoding, kind.wire, model, projections, causal, key_padding_mask, attn_bias,
            return_weights, dtype)
    _options(req, encoding, causal_alignment, window, alibi_slopes, softcap, sink_logits,
             return_lse, compute_precision)
    return req, kind


PRECISION_HEADER = "attn-compute-precision"


def precision_of(initial_metadata: Any) -> Optional[str]:
    """The attn-compute-precision header's value, or None."""
    for key, value in initial_metadata or ():
        if key == PRECISION_HEADER:
            return value
    return None


def result(resp: Any, kind: Kind, return_weights: bool, return_lse: bool,
           compute_precision: Optional[str] = None) -> AttentionResult:
    lse = None
    if return_lse:
        lse = from_tensor(resp.lse, Kind(kind.lib, "float32", "float32"))
    weights = from_tensor(resp.weights, kind) if return_weights else None
    return AttentionResult(from_tensor(resp.output, kind), weights, lse, compute_precision)


def models_of(resp: Any) -> list:
    return [{"name": m.name, "kind": m.kind, "embed_dim": m.embed_dim, "num_heads": m.num_heads,
             "num_kv_heads": m.num_kv_heads, "kdim": m.kdim, "vdim": m.vdim} for m in resp.models]


# ---- OIP ---------------------------------------------------------------------

_OIP_TYPES = {"float32": "FP32", "float16": "FP16", "bfloat16": "BF16"}


def infer_request(model: str, inputs: Mapping[str, Any], parameters: Optional[Mapping[str, Any]],
                  wire_dtype: Optional[str]) -> Tuple[Any, Optional[Kind]]:
    """A ModelInferRequest with raw inputs: float arrays as FP32/FP16/BF16,
    bool as BOOL, integer arrays (cu_seqlens_q/k) as INT64."""
    req = oip_pb2.ModelInferRequest(model_name=model)
    like = None
    for name, x in inputs.items():
        t = req.inputs.add(name=name, shape=list(x.shape if _is_torch(x) else np.shape(x)))
        a = None if _is_torch(x) else np.asarray(x)
        if a is not None and a.dtype.kind in "iu" and a.dtype != np.uint16:
            t.datatype = "INT64"
            req.raw_input_contents.append(np.ascontiguousarray(a, "<i8").tobytes())
            continue
        kind = kind_of(x, None, wire_dtype)
        if name == "query":
            like = kind
        wire = to_tensor(x, DATA, None if kind.dtype == "bool" else kind.wire)
        t.datatype = "BOOL" if kind.dtype == "bool" else _OIP_TYPES[kind.wire]
        req.raw_input_contents.append(wire.data)
    for name, v in (parameters or {}).items():
        p = req.parameters[name]
        if isinstance(v, bool):
            p.bool_param = v
        elif isinstance(v, int):
            p.int64_param = v
        elif isinstance(v, float):
            p.double_param = v
        else:
            p.string_param = str(v)
    return req, like


def infer_outputs(resp: Any, like: Optional[Kind]) -> Dict[str, Any]:
    """The response's outputs by name, as the query's kind (numpy float32 by default)."""
    out = {}
    for i, o in enumerate(resp.outputs):
        raw = resp.raw_output_contents[i] if resp.raw_output_contents else None
        t = attention_pb2.Tensor(shape=list(o.shape))
        if raw is None:
            t.dtype = attention_pb2.DATA_TYPE_FLOAT32
            t.values.extend(o.contents.fp32_contents)
        else:
            t.dtype = {"FP32": attention_pb2.DATA_TYPE_FLOAT32,
                       "FP16": attention_pb2.DATA_TYPE_FLOAT16,
                       "BF16": attention_pb2.DATA_TYPE_BFLOAT16}.get(
                           o.datatype, attention_pb2.DATA_TYPE_FLOAT32)
            t.data = raw
        k = like if o.name != "lse" or like is None else Kind(like.lib, "float32", "float32")
        out[o.name] = from_tensor(t, k)
    return out


__all__ = ["AttentionResult", "bf16_to_float32"]
