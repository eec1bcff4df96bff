"""The blocking client."""
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import grpc

from . import _requests as rq
from ._arrays import DATA
from . import sessions as ss
from ._pb import (attention_pb2, attention_pb2_grpc, health_pb2, health_pb2_grpc, oip_pb2_grpc,
                  session_pb2, session_pb2_grpc)
from .errors import AttentionError, from_rpc_error

Window = Optional[Tuple[Optional[int], Optional[int]]]


class AttentionClient:
    """A channel to one attention-server. Every call raises an AttentionError
    subclass by gRPC code (InvalidArgument, NotFound, ...) carrying the
    server's message; it is a context manager that closes the channel.

    `tls` (or any PEM path) turns on TLS: the server's certificate must chain
    to `tls_ca` (default: the system's roots); `tls_cert`/`tls_key` are a
    client certificate (mutual TLS). `token` (default: $ATTN_TOKEN) goes as
    `authorization: Bearer <token>`. `timeout` is each call's deadline in
    seconds; `retry` retries calls the server never took (UNAVAILABLE)."""

    def __init__(self, target: str = "localhost:50051", *, timeout: float = 30.0,
                 tls: bool = False, tls_ca: Optional[str] = None, tls_cert: Optional[str] = None,
                 tls_key: Optional[str] = None, token: Optional[str] = None,
                 max_message_mb: int = 64, retry: bool = False):
        options = rq.channel_options(max_message_mb, retry)
        self._retry = retry
        creds = rq.credentials(tls, tls_ca, tls_cert, tls_key)
        self.channel = (grpc.secure_channel(target, creds, options=options) if creds
                        else grpc.insecure_channel(target, options=options))
        self.timeout = timeout
        self._metadata = rq.auth_metadata(token)
        self.stub = attention_pb2_grpc.AttentionServiceStub(self.channel)
        self._health = health_pb2_grpc.HealthStub(self.channel)
        self._oip = oip_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        self._sessions = session_pb2_grpc.SessionServiceStub(self.channel)
        # Extend, made once per layer per token, takes and answers bytes:
        # sessions.extend_request writes them, no protobuf message between.
        self._extend = self.channel.unary_unary("/attention.v1.SessionService/Extend")
        self._closed = False

    def close(self) -> None:
        """Closes the channel; later calls raise AttentionError."""
        if not self._closed:
            self._closed = True
            self.channel.close()

    def __enter__(self) -> "AttentionClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, method: Callable, request: Any, auth: bool = True,
              session_id: Optional[str] = None) -> Any:
        if self._closed:
            raise AttentionError("the client is closed")
        metadata = ss._metadata(self._metadata if auth else None, session_id)
        try:
            return method(request, timeout=self.timeout, metadata=metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def _call_raw(self, method: Callable, request: bytes, metadata: Any) -> Any:
        """A call with its metadata made already (a session's)."""
        if self._closed:
            raise AttentionError("the client is closed")
        try:
            return method(request, timeout=self.timeout, metadata=metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def _compute(self, method: Callable, request: Any, kind: Any, return_weights: bool,
                 return_lse: bool) -> rq.AttentionResult:
        """A compute call, its result saying the server's compute precision."""
        resp, call = self._call(method.with_call, request)
        return rq.result(resp, kind, return_weights, return_lse,
                         rq.precision_of(call.initial_metadata()))

    def _session_call(self, name: str, request: Any, session_id: Optional[str]) -> Any:
        return self._call(getattr(self._sessions, name), request, session_id=session_id)

    def attention(self, query: Any, key: Any = None, value: Any = None, *,
                  model: Optional[str] = None, projections: Optional[Mapping[str, Any]] = None,
                  causal: bool = False, causal_alignment: str = "top_left", window: Window = None,
                  alibi_slopes: Any = None, softcap: Optional[float] = None,
                  sink_logits: Any = None, scale: Optional[float] = None,
                  key_padding_mask: Any = None, attn_bias: Any = None,
                  return_weights: bool = False, return_lse: bool = False,
                  compute_precision: Optional[str] = None, cu_seqlens_q: Any = None,
                  cu_seqlens_k: Any = None, wire_dtype: Optional[str] = None,
                  encoding: str = DATA, dtype: Optional[str] = None) -> rq.AttentionResult:
        """softmax(Q K^T * scale + mask) V; query alone is self-attention.
        Query [.., Lq, D], key/value [.., Lk, *] (GQA: [B, Hkv, Lk, *] with
        Hkv dividing the query's heads). `window` is (left, right), None for
        unbounded; `cu_seqlens_q/k` make a packed batch ([total, H, D]).
        `wire_dtype` ("float32", "float16", "bfloat16") is the type on the
        wire, by default the query's own; `dtype="bfloat16"` marks numpy
        uint16 arrays as bfloat16 bits."""
        req, kind = rq.attention_request(
            query, key, value, model=model, projections=projections, causal=causal,
            causal_alignment=causal_alignment, window=window, alibi_slopes=alibi_slopes,
            softcap=softcap, sink_logits=sink_logits, scale=scale,
            key_padding_mask=key_padding_mask, attn_bias=attn_bias,
            return_weights=return_weights, return_lse=return_lse,
            compute_precision=compute_precision, cu_seqlens_q=cu_seqlens_q,
            cu_seqlens_k=cu_seqlens_k, wire_dtype=wire_dtype, encoding=encoding, dtype=dtype)
        return self._compute(self.stub.Attention, req, kind, return_weights, return_lse)

    def cross_attention(self, decoder: Any, encoder: Any, *, model: Optional[str] = None,
                        projections: Optional[Mapping[str, Any]] = None, causal: bool = False,
                        causal_alignment: str = "top_left", window: Window = None,
                        alibi_slopes: Any = None, softcap: Optional[float] = None,
                        sink_logits: Any = None, scale: Optional[float] = None,
                        key_padding_mask: Any = None, attn_bias: Any = None,
                        return_weights: bool = False, return_lse: bool = False,
                        compute_precision: Optional[str] = None,
                        wire_dtype: Optional[str] = None, encoding: str = DATA,
                        dtype: Optional[str] = None) -> rq.AttentionResult:
        """Queries from `decoder`, keys and values from `encoder`, through a
        model's or inline projections."""
        req, kind = rq.cross_request(
            decoder, encoder, model=model, projections=projections, causal=causal,
            causal_alignment=causal_alignment, window=window, alibi_slopes=alibi_slopes,
            softcap=softcap, sink_logits=sink_logits, scale=scale,
            key_padding_mask=key_padding_mask, attn_bias=attn_bias,
            return_weights=return_weights, return_lse=return_lse,
            compute_precision=compute_precision, wire_dtype=wire_dtype, encoding=encoding,
            dtype=dtype)
        return self._compute(self.stub.CrossAttention, req, kind, return_weights, return_lse)

    def multi_head_attention(self, query: Any, key: Any = None, value: Any = None, *,
                             model: Optional[str] = None, num_heads: int = 0,
                             num_kv_heads: int = 0, per_head_weights: bool = False,
                             projections: Optional[Mapping[str, Any]] = None,
                             causal: bool = False, causal_alignment: str = "top_left",
                             window: Window = None, alibi_slopes: Any = None,
                             softcap: Optional[float] = None, sink_logits: Any = None,
                             key_padding_mask: Any = None, attn_bias: Any = None,
                             return_weights: bool = False, return_lse: bool = False,
                             compute_precision: Optional[str] = None,
                             wire_dtype: Optional[str] = None, encoding: str = DATA,
                             dtype: Optional[str] = None) -> rq.AttentionResult:
        """nn.MultiheadAttention(batch_first=True) semantics; `num_kv_heads`
        groups inline k/v projections (0: num_heads, or the model's)."""
        req, kind = rq.mha_request(
            query, key, value, model=model, num_heads=num_heads, num_kv_heads=num_kv_heads,
            per_head_weights=per_head_weights, projections=projections, causal=causal,
            causal_alignment=causal_alignment, window=window, alibi_slopes=alibi_slopes,
            softcap=softcap, sink_logits=sink_logits, key_padding_mask=key_padding_mask,
            attn_bias=attn_bias, return_weights=return_weights, return_lse=return_lse,
            compute_precision=compute_precision, wire_dtype=wire_dtype, encoding=encoding,
            dtype=dtype)
        return self._compute(self.stub.MultiHeadAttention, req, kind, return_weights, return_lse)

    def list_models(self) -> List[Dict[str, Any]]:
        """[{name, kind, embed_dim, num_heads, num_kv_heads, kdim, vdim}, ...]"""
        return rq.models_of(self._call(self.stub.ListModels, attention_pb2.ListModelsRequest()))

    def health(self, service: str = "") -> str:
        """"SERVING", "NOT_SERVING", ... (health needs no token)."""
        resp = self._call(self._health.Check, health_pb2.HealthCheckRequest(service=service),
                          auth=False)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)

    def infer(self, model: str, inputs: Mapping[str, Any], *,
              parameters: Optional[Mapping[str, Any]] = None,
              wire_dtype: Optional[str] = None) -> Dict[str, Any]:
        """One Open Inference Protocol ModelInfer over gRPC: `inputs` by name
        (query, key, value, masks, alibi_slopes, sink_logits; integer arrays
        such as cu_seqlens_q go as INT64), `parameters` (causal, scale,
        causal_alignment, ...). Returns the outputs by name, in the query's
        kind."""
        req, like = rq.infer_request(model, inputs, parameters, wire_dtype)
        return rq.infer_outputs(self._call(self._oip.ModelInfer, req), like)

    # ---- KV-cache sessions (attention.v1.SessionService) --------------------

    def create_session(self, num_layers: int, num_kv_heads: int, head_dim: int, *,
                       value_dim: int = 0, cache_dtype: str = "float32", max_tokens: int = 0,
                       session_id: Optional[str] = None, key_format: Optional[str] = None,
                       value_format: Optional[str] = None) -> ss.Session:
        """A session on the server: a cache per layer of `num_kv_heads` heads
        of `head_dim` (keys) and `value_dim` (values; 0: head_dim), stored as
        `cache_dtype` ("float32", "bfloat16" or "float16"), or quantized:
        `key_format` and `value_format` "int8" or "fp8_e4m3" (None: as
        cache_dtype); `max_tokens` per layer (0: the server's
        --max-session-tokens). Without `session_id` the client makes one
        ("s-" and 24 hex digits)."""
        session_id = session_id or ss.new_session_id()  # the balancer hashes it
        req = ss.create_request(num_layers, num_kv_heads, head_dim, value_dim, cache_dtype,
                                max_tokens, session_id, key_format, value_format)
        info = self._session_call("CreateSession", req, session_id)
        return ss.Session(self, info.session_id, info.layer_tokens)

    def session(self, session_id: str) -> ss.Session:
        """A handle on an existing session (nothing is sent)."""
        return ss.Session(self, session_id)

    def list_sessions(self) -> ss.SessionList:
        """The sessions (`.sessions`, SessionInfo by id) and the pool's bytes
        (`.cache_bytes_used`, `.cache_bytes_limit`)."""
        return ss.SessionList(self._session_call("ListSessions",
                                                  session_pb2.ListSessionsRequest(), None))

    def extend_many(self, layer: int, steps: Sequence[ss.Step], *, causal: bool = True,
                    window: Window = None, alibi_slopes: Any = None,
                    softcap: Optional[float] = None, sink_logits: Any = None,
                    scale: Optional[float] = None, return_lse: bool = False,
                    compute_precision: Optional[str] = None) -> List[rq.AttentionResult]:
        """One Extend of several sessions (of this server) as one batch:
        `steps` is [(session, query, key, value), ...] as Session.extend
        takes them. Returns an AttentionResult per step, in order. All or
        nothing: an error changes no session. Each Session's step carries its
        layer's token count (expected_tokens; a step naming a bare id does
        not), and a call whose steps all do is retried on UNAVAILABLE when
        the client was made with retry=True."""
        layer = int(layer)
        expected = [s[0]._expected(layer) if isinstance(s[0], ss.Session) else None
                    for s in steps]
        payload, kinds, sid = ss.extend_request(
            layer, steps, causal=causal, window=window, alibi_slopes=alibi_slopes,
            softcap=softcap, sink_logits=sink_logits, scale=scale, return_lse=return_lse,
            compute_precision=compute_precision, expected=expected)
        resp = ss._with_retries(self, all(e is not None for e in expected),
                                lambda: self._call(self._extend, payload, session_id=sid))
        for (s, _, k, _), e in zip(steps, expected):
            if isinstance(s, ss.Session):
                s._appended(layer, e, k)
        return ss.extend_results(resp, kinds, return_lse)
