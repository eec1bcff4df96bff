"""The asyncio client: AttentionClient's methods as coroutines, on grpc.aio."""
from typing import Any, Dict, List, Mapping, Optional, Tuple

import grpc

from . import _requests as rq
from ._arrays import DATA
from . import sessions as ss
from ._pb import (attention_pb2, attention_pb2_grpc, health_pb2, health_pb2_grpc, oip_pb2_grpc,
                  session_pb2, session_pb2_grpc)
from .client import Window
from .errors import AttentionError, from_rpc_error


class AsyncAttentionClient:
    """As AttentionClient (same arguments, methods and errors), each method a
    coroutine; an async context manager. Create it inside the event loop."""

    def __init__(self, target: str = "localhost:50051", *, timeout: float = 30.0,
                 tls: bool = False, tls_ca: Optional[str] = None, tls_cert: Optional[str] = None,
                 tls_key: Optional[str] = None, token: Optional[str] = None,
                 max_message_mb: int = 64, retry: bool = False):
        options = rq.channel_options(max_message_mb, retry)
        self._retry = retry
        creds = rq.credentials(tls, tls_ca, tls_cert, tls_key)
        self.channel = (grpc.aio.secure_channel(target, creds, options=options) if creds
                        else grpc.aio.insecure_channel(target, options=options))
        self.timeout = timeout
        self._metadata = rq.auth_metadata(token)
        self.stub = attention_pb2_grpc.AttentionServiceStub(self.channel)
        self._health = health_pb2_grpc.HealthStub(self.channel)
        self._oip = oip_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        self._sessions = session_pb2_grpc.SessionServiceStub(self.channel)
        self._extend = self.channel.unary_unary("/attention.v1.SessionService/Extend")
        self._closed = False

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self.channel.close()

    async def __aenter__(self) -> "AsyncAttentionClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _call(self, method: Any, request: Any, auth: bool = True,
                    session_id: Optional[str] = None) -> Any:
        if self._closed:
            raise AttentionError("the client is closed")
        metadata = ss._metadata(self._metadata if auth else None, session_id)
        try:
            return await method(request, timeout=self.timeout, metadata=metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    async def _compute(self, method: Any, request: Any, kind: Any, return_weights: bool,
                       return_lse: bool) -> rq.AttentionResult:
        """A compute call, its result saying the server's compute precision."""
        async def with_precision(req: Any, **kw: Any) -> Tuple[Any, Optional[str]]:
            call = method(req, **kw)
            return await call, rq.precision_of(await call.initial_metadata())

        resp, precision = await self._call(with_precision, request)
        return rq.result(resp, kind, return_weights, return_lse, precision)

    async def _session_call(self, name: str, request: Any, session_id: Optional[str]) -> Any:
        return await self._call(getattr(self._sessions, name), request, session_id=session_id)

    async def create_session(self, num_layers: int, num_kv_heads: int, head_dim: int, *,
                             value_dim: int = 0, cache_dtype: str = "float32",
                             max_tokens: int = 0,
                             session_id: Optional[str] = None,
                             key_format: Optional[str] = None,
                             value_format: Optional[str] = None) -> ss.AsyncSession:
        """As AttentionClient.create_session."""
        session_id = session_id or ss.new_session_id()  # the balancer hashes it
        req = ss.create_request(num_layers, num_kv_heads, head_dim, value_dim, cache_dtype,
                                max_tokens, session_id, key_format, value_format)
        info = await self._session_call("CreateSession", req, session_id)
        return ss.AsyncSession(self, info.session_id, info.layer_tokens)

    def session(self, session_id: str) -> ss.AsyncSession:
        return ss.AsyncSession(self, session_id)

    async def list_sessions(self) -> ss.SessionList:
        """The sessions (`.sessions`, SessionInfo by id) and the pool's bytes
        (`.cache_bytes_used`, `.cache_bytes_limit`)."""
        return ss.SessionList(await self._session_call("ListSessions",
                                                  session_pb2.ListSessionsRequest(), None))

    async def extend_many(self, layer: int, steps: Any, *, causal: bool = True,
                          window: Window = None, alibi_slopes: Any = None,
                          softcap: Optional[float] = None, sink_logits: Any = None,
                          scale: Optional[float] = None, return_lse: bool = False,
                          compute_precision: Optional[str] = None) -> List[rq.AttentionResult]:
        """As AttentionClient.extend_many."""
        layer = int(layer)
        expected = [await s[0]._expected(layer) if isinstance(s[0], ss.AsyncSession) else None
                    for s in steps]
        payload, kinds, sid = ss.extend_request(
            layer, steps, causal=causal, window=window, alibi_slopes=alibi_slopes,
            softcap=softcap, sink_logits=sink_logits, scale=scale, return_lse=return_lse,
            compute_precision=compute_precision, expected=expected)
        resp = await ss._with_retries_async(
            self, all(e is not None for e in expected),
            lambda: self._call(self._extend, payload, session_id=sid))
        for (s, _, k, _), e in zip(steps, expected):
            if isinstance(s, ss.AsyncSession):
                s._appended(layer, e, k)
        return ss.extend_results(resp, kinds, return_lse)

    async def attention(self, query: Any, key: Any = None, value: Any = None, *,
                        return_weights: bool = False, return_lse: bool = False,
                        model: Optional[str] = None, projections: Any = None,
                        causal: bool = False, causal_alignment: str = "top_left",
                        window: Window = None, alibi_slopes: Any = None,
                        softcap: Optional[float] = None, sink_logits: Any = None,
                        scale: Optional[float] = None, key_padding_mask: Any = None,
                        attn_bias: Any = None, compute_precision: Optional[str] = None,
                        cu_seqlens_q: Any = None, cu_seqlens_k: Any = None,
                        wire_dtype: Optional[str] = None, encoding: str = DATA,
                        dtype: Optional[str] = None) -> rq.AttentionResult:
        """As AttentionClient.attention."""
        req, kind = rq.attention_request(
            query, key, value, model=model, projections=projections, causal=causal,
            causal_alignment=causal_alignment, window=window, alibi_slopes=alibi_slopes,
            softcap=softcap, sink_logits=sink_logits, scale=scale,
            key_padding_mask=key_padding_mask, attn_bias=attn_bias,
            return_weights=return_weights, return_lse=return_lse,
            compute_precision=compute_precision, cu_seqlens_q=cu_seqlens_q,
            cu_seqlens_k=cu_seqlens_k, wire_dtype=wire_dtype, encoding=encoding, dtype=dtype)
        return await self._compute(self.stub.Attention, req, kind, return_weights, return_lse)

    async def cross_attention(self, decoder: Any, encoder: Any, *, return_weights: bool = False,
                              return_lse: bool = False, **kw: Any) -> rq.AttentionResult:
        """As AttentionClient.cross_attention."""
        req, kind = rq.cross_request(decoder, encoder, **_defaults(kw, return_weights, return_lse))
        return await self._compute(self.stub.CrossAttention, req, kind, return_weights, return_lse)

    async def multi_head_attention(self, query: Any, key: Any = None, value: Any = None, *,
                                   return_weights: bool = False, return_lse: bool = False,
                                   num_heads: int = 0, num_kv_heads: int = 0,
                                   per_head_weights: bool = False,
                                   **kw: Any) -> rq.AttentionResult:
        """As AttentionClient.multi_head_attention."""
        kw = _defaults(kw, return_weights, return_lse)
        kw.pop("scale", None)
        req, kind = rq.mha_request(query, key, value, num_heads=num_heads,
                                   num_kv_heads=num_kv_heads, per_head_weights=per_head_weights,
                                   **kw)
        return await self._compute(self.stub.MultiHeadAttention, req, kind, return_weights,
                                   return_lse)

    async def list_models(self) -> List[Dict[str, Any]]:
        return rq.models_of(await self._call(self.stub.ListModels,
                                             attention_pb2.ListModelsRequest()))

    async def health(self, service: str = "") -> str:
        resp = await self._call(self._health.Check,
                                health_pb2.HealthCheckRequest(service=service), auth=False)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)

    async def infer(self, model: str, inputs: Mapping[str, Any], *,
                    parameters: Optional[Mapping[str, Any]] = None,
                    wire_dtype: Optional[str] = None) -> Dict[str, Any]:
        req, like = rq.infer_request(model, inputs, parameters, wire_dtype)
        return rq.infer_outputs(await self._call(self._oip.ModelInfer, req), like)


_KEYWORDS = {"model": None, "projections": None, "causal": False, "causal_alignment": "top_left",
             "window": None, "alibi_slopes": None, "softcap": None, "sink_logits": None,
             "scale": None, "key_padding_mask": None, "attn_bias": None,
             "compute_precision": None, "wire_dtype": None, "encoding": DATA, "dtype": None}


def _defaults(kw: Dict[str, Any], return_weights: bool, return_lse: bool) -> Dict[str, Any]:
    unknown = set(kw) - set(_KEYWORDS)
    if unknown:
        raise TypeError(f"unexpected keyword arguments: {sorted(unknown)}")
    out = dict(_KEYWORDS, **kw)
    out["return_weights"], out["return_lse"] = return_weights, return_lse
    return out
