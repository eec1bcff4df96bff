"""KV-cache sessions: the server keeps each sequence's keys and values per
layer, and a decode step sends only its new tokens (attention.v1's
SessionService).

    with client.create_session(num_layers=32, num_kv_heads=8, head_dim=128,
                               cache_dtype="bfloat16") as s:
        out = s.extend(0, q, k, v).output          # q [Hq, n, D], k/v [Hkv, n, D]

Every call on one session sends the `x-attn-session` header, by which a load
balancer keeps a session on the replica that holds it: a session created
without an id gets one made here, and a fork child's id starts with its
family's ("parent:..."), so that the balancer's hash finds them all.
Sessions live in the server's memory: a restart or an idle timeout loses
them (NotFound).

A Session handle knows every layer's token count and sends it with each step
(`expected_tokens`): a step retried after its answer was lost is a replay on
the server (nothing appended twice), so the client retries it on UNAVAILABLE
when made with retry=True.
"""
import secrets
import time
import warnings
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from . import _requests as rq
from . import _wire
from ._arrays import Kind, _is_torch, _wire_bytes, from_tensor, kind_of
from ._pb import attention_pb2, session_pb2

_CACHE_DTYPES = {"float32": attention_pb2.DATA_TYPE_FLOAT32,
                 "bfloat16": attention_pb2.DATA_TYPE_BFLOAT16,
                 "float16": attention_pb2.DATA_TYPE_FLOAT16}
_CACHE_NAMES = {v: k for k, v in _CACHE_DTYPES.items()}
_CACHE_NAMES[attention_pb2.DATA_TYPE_UNSPECIFIED] = "float32"
# key_format / value_format: None keeps the side as cache_dtype says.
_CACHE_FORMATS = {"int8": session_pb2.CACHE_FORMAT_INT8,
                  "fp8_e4m3": session_pb2.CACHE_FORMAT_FP8_E4M3,
                  "int4": session_pb2.CACHE_FORMAT_INT4}
_FORMAT_NAMES = {v: k for k, v in _CACHE_FORMATS.items()}

Window = Optional[Tuple[Optional[int], Optional[int]]]
# (session, query, key, value): a Session (or its id), and arrays or None.
Step = Tuple[Any, Any, Any, Any]


class SessionInfo:
    """What the server says of a session: its shape, the tokens each layer
    holds (`layer_tokens`), the bytes its pages take (`cache_bytes`;
    pages shared with a fork count in both) and the principal that owns it
    (`owner`: a token's name, a certificate's subject; "" anonymous).
    `key_format` and `value_format`: "int8", "fp8_e4m3", or (unquantized)
    the cache_dtype."""

    __slots__ = ("session_id", "num_layers", "num_kv_heads", "head_dim", "value_dim",
                 "cache_dtype", "max_tokens", "layer_tokens", "cache_bytes", "owner",
                 "key_format", "value_format")

    def __init__(self, msg: Any):
        self.session_id: str = msg.session_id
        self.num_layers: int = msg.num_layers
        self.num_kv_heads: int = msg.num_kv_heads
        self.head_dim: int = msg.head_dim
        self.value_dim: int = msg.value_dim
        self.cache_dtype: str = _CACHE_NAMES.get(msg.cache_dtype, str(msg.cache_dtype))
        self.max_tokens: int = msg.max_tokens
        self.layer_tokens: List[int] = list(msg.layer_tokens)
        self.cache_bytes: int = msg.cache_bytes
        self.owner: str = msg.owner
        self.key_format: str = _FORMAT_NAMES.get(msg.key_format, self.cache_dtype)
        self.value_format: str = _FORMAT_NAMES.get(msg.value_format, self.cache_dtype)

    def __repr__(self) -> str:
        return (f"SessionInfo({self.session_id!r}, layers={self.num_layers}, "
                f"kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, "
                f"cache={self.cache_dtype}, keys={self.key_format}, "
                f"values={self.value_format}, layer_tokens={self.layer_tokens}, "
                f"cache_bytes={self.cache_bytes}, owner={self.owner!r})")


class SessionList:
    """What ListSessions answers: `sessions` (the caller's own, SessionInfo,
    by id), the caller's bytes, `owner_bytes_used` of `owner_bytes_limit`
    (its quota), and the pool's, `cache_bytes_used` of `cache_bytes_limit`.
    Indexing it as
    the dict older releases returned (`listed["sessions"]`) still works for
    one release, with a DeprecationWarning."""

    __slots__ = ("sessions", "cache_bytes_used", "cache_bytes_limit", "owner_bytes_used",
                 "owner_bytes_limit")
    _KEYS = ("sessions", "cache_bytes_used", "cache_bytes_limit")

    def __init__(self, msg: Any):
        self.sessions: List[SessionInfo] = [SessionInfo(m) for m in msg.sessions]
        self.cache_bytes_used: int = msg.cache_bytes_used
        self.cache_bytes_limit: int = msg.cache_bytes_limit
        self.owner_bytes_used: int = msg.owner_bytes_used
        self.owner_bytes_limit: int = msg.owner_bytes_limit

    def __getitem__(self, key: str) -> Any:
        if key not in self._KEYS:
            raise KeyError(key)
        warnings.warn(f"list_sessions()[{key!r}] is deprecated: use the attribute "
                      f".{key}", DeprecationWarning, stacklevel=2)
        return getattr(self, key)

    def __len__(self) -> int:
        return len(self.sessions)

    def __iter__(self):
        return iter(self.sessions)

    def __repr__(self) -> str:
        return (f"SessionList({len(self.sessions)} sessions, yours {self.owner_bytes_used} of "
                f"{self.owner_bytes_limit} bytes, pool {self.cache_bytes_used} of "
                f"{self.cache_bytes_limit} bytes)")


def new_session_id() -> str:
    """A fresh session id (a family of its own), made by the client so that
    the create call already carries the header a balancer hashes."""
    return "s-" + secrets.token_hex(12)


def child_id(parent: str, new_id: Optional[str]) -> str:
    """A fork child's id: `new_id`, or the parent's family and a fresh tail."""
    return new_id or parent.split(":", 1)[0] + ":" + secrets.token_hex(8)


def _format(name: Optional[str], field: str) -> int:
    if name is None:
        return session_pb2.CACHE_FORMAT_UNSPECIFIED
    if name not in _CACHE_FORMATS:
        raise ValueError(f"{field}: expected None or one of {sorted(_CACHE_FORMATS)}, got "
                         f"{name!r}")
    return _CACHE_FORMATS[name]


def create_request(num_layers: int, num_kv_heads: int, head_dim: int, value_dim: int,
                   cache_dtype: str, max_tokens: int, session_id: Optional[str],
                   key_format: Optional[str] = None, value_format: Optional[str] = None) -> Any:
    if cache_dtype not in _CACHE_DTYPES:
        raise ValueError(f"cache_dtype: expected one of {sorted(_CACHE_DTYPES)}, got "
                         f"{cache_dtype!r}")
    return session_pb2.CreateSessionRequest(
        session_id=session_id or "", num_layers=int(num_layers), num_kv_heads=int(num_kv_heads),
        head_dim=int(head_dim), value_dim=int(value_dim), cache_dtype=_CACHE_DTYPES[cache_dtype],
        max_tokens=int(max_tokens), key_format=_format(key_format, "key_format"),
        value_format=_format(value_format, "value_format"))


def _id_of(session: Any) -> str:
    return session.id if isinstance(session, (Session, AsyncSession)) else str(session)


_WIRE_TYPES = {"float32": attention_pb2.DATA_TYPE_FLOAT32,
               "float16": attention_pb2.DATA_TYPE_FLOAT16,
               "bfloat16": attention_pb2.DATA_TYPE_BFLOAT16}
_TAILS: dict = {}  # the serialized causal/scale/options of option-less calls, by their values


def _tail(causal: bool, scale: Optional[float], window: Window, alibi_slopes: Any,
          softcap: Optional[float], sink_logits: Any, return_lse: bool,
          compute_precision: Optional[str]) -> bytes:
    """ExtendRequest's fields 3-5 (causal, scale, options), serialized by
    protobuf; made once per combination for calls without array options."""
    simple = window is None and alibi_slopes is None and softcap is None and sink_logits is None
    key = (bool(causal), scale, bool(return_lse), compute_precision) if simple else None
    tail = _TAILS.get(key) if key is not None else None
    if tail is None:
        req = session_pb2.ExtendRequest(causal=bool(causal))
        if scale is not None:
            req.scale = float(scale)
        rq._options(req, rq.DATA, "bottom_right", window, alibi_slopes, softcap, sink_logits,
                    return_lse, compute_precision)
        tail = req.SerializeToString()
        if key is not None and len(_TAILS) < 256:
            _TAILS[key] = tail
    return tail


_F32 = np.dtype("<f4")
_F32_KIND = Kind("numpy", "float32", "float32")


def _kind(x: Any) -> Kind:
    """kind_of, without its checks for the usual float32 numpy array."""
    return _F32_KIND if type(x) is np.ndarray and x.dtype == _F32 else kind_of(x)


def _tensor(x: Any, wire: str) -> _wire.Parts:
    """An array as an encoded Tensor, in `wire`'s type; a float32 numpy array
    is viewed, not copied (its bytes are copied once, into the message)."""
    if wire == "float32" and type(x) is np.ndarray and x.dtype == _F32:
        data = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
        return _wire.tensor(x.shape, attention_pb2.DATA_TYPE_FLOAT32, data)
    kind = kind_of(x, None, wire)
    if kind.dtype == "bool":
        raise TypeError("extend: query, key and value are float arrays, got bool")
    shape = tuple(x.shape) if _is_torch(x) else np.shape(x)
    return _wire.tensor(shape, _WIRE_TYPES[kind.wire], _wire_bytes(x, kind, kind.wire))


_ONE_F32 = [_F32_KIND]
_HEADERS: dict = {}  # one step's message around its three arrays, by (id, layer, shapes, tail)


def _f32(x: Any) -> bool:
    """A non-empty C-contiguous float32 numpy array (the decode step's path)."""
    return type(x) is np.ndarray and x.dtype == _F32 and x.flags.c_contiguous and x.size > 0


# What a step with the defaults sends after its steps (causal, bottom-right).
_CAUSAL_TAIL = _tail(True, None, None, None, None, None, False, None)


def _one_step(layer: int, sid: str, q: Any, k: Any, v: Any, tail: bytes,
              expected: Optional[int] = None) -> bytes:
    """The common call's bytes, a decode step's: one step whose query, key
    and value are C-contiguous float32 numpy arrays. The message around the
    arrays depends only on the session, layer, shapes and options, so it is
    made once (by the general path) and each call joins it with the arrays:
    their bytes are copied once, and almost nothing else is done."""
    # expected_tokens (field 5) follows the value: its varint's length is in
    # the key (it sizes the step), its bytes are written each call.
    ex = b"" if expected is None else b"\x28" + _wire.varint(int(expected))
    key = (sid, layer, q.shape, k.shape, v.shape, tail, len(ex))
    headers = _HEADERS.get(key)
    if headers is None:
        parts = _wire.extend_parts(layer, [_wire.session_step(
            sid, _tensor(q, "float32"), _tensor(k, "float32"), _tensor(v, "float32"),
            expected)], tail)
        headers, run = [], []
        for p in parts.parts:  # the bytes between the arrays
            if not isinstance(p, bytes):
                headers.append(b"".join(run))
                run = []
            else:
                run.append(p)
        headers.append(b"".join(run)[len(ex):])  # after the value: field 5, then the tail
        if len(_HEADERS) >= 4096:
            _HEADERS.clear()
        headers = _HEADERS[key] = tuple(headers)
    h0, h1, h2, h3 = headers
    return b"".join((h0, q, h1, k, h2, v, ex, h3))


def extend_request(layer: int, steps: Sequence[Step], *, causal: bool, window: Window,
                   alibi_slopes: Any, softcap: Optional[float], sink_logits: Any,
                   scale: Optional[float], return_lse: bool,
                   compute_precision: Optional[str],
                   expected: Optional[List[Optional[int]]] = None) -> Tuple[bytes, list, Optional[str]]:
    """The ExtendRequest's bytes, each step's kind (its answer's, from the
    query or, for a step without queries, from its keys), and the session
    id the call's header names (a single step's). `expected`: each step's
    expected_tokens (None: unset)."""
    tail = _tail(causal, scale, window, alibi_slopes, softcap, sink_logits, return_lse,
                 compute_precision)
    if expected is None:
        expected = [None] * len(steps)
    if len(steps) == 1 and len(steps[0]) == 4:
        session, q, k, v = steps[0]
        if _f32(q) and _f32(k) and _f32(v):
            sid = _id_of(session)
            return _one_step(int(layer), sid, q, k, v, tail, expected[0]), [_F32_KIND], sid
    encoded, kinds = [], []
    for step, ex in zip(steps, expected):
        if len(step) != 4:
            raise ValueError("extend_many: each step is (session, query, key, value)")
        session, query, key, value = step
        if (key is None) != (value is None):
            raise ValueError("key and value come together (both or neither)")
        like = query if query is not None else key
        kind = _kind(like) if like is not None else _F32_KIND
        encoded.append(_wire.session_step(
            _id_of(session), None if query is None else _tensor(query, kind.wire),
            None if key is None else _tensor(key, kind.wire),
            None if value is None else _tensor(value, kind.wire), ex))
        kinds.append(kind)
    payload = _wire.extend_parts(int(layer), encoded, tail).join()
    sid = _id_of(steps[0][0]) if len(steps) == 1 else None
    return payload, kinds, sid


def extend_results(resp: bytes, kinds: list, return_lse: bool) -> List[rq.AttentionResult]:
    """The answers of an Extend from its response bytes, read in place (each
    array copied once, out of them)."""
    if len(kinds) == 1 and kinds[0] is _F32_KIND and not return_lse:
        found = _wire.single_float32_output(resp)  # a decode step's answer: read directly
        if found is not None:
            return [rq.AttentionResult(np.ndarray(found[0], _F32, resp, found[1]).copy())]
    answers, _ = _wire.extend_answers(resp)
    out = []
    for a, kind in zip(answers, kinds):
        lse = a.get("lse") if return_lse else None
        out.append(rq.AttentionResult(
            from_tensor(a["output"], kind), None,
            None if lse is None else from_tensor(lse, Kind(kind.lib, "float32", "float32"))))
    return out


# A session step is retried only when it carries expected_tokens (so that a
# step the server applied before the answer was lost is a replay).
RETRY_ATTEMPTS = 4


def _retryable(e: Exception) -> bool:
    from .errors import Unavailable
    return isinstance(e, Unavailable)


def _with_retries(client: Any, safe: bool, call: Any) -> Any:
    """call(), again on UNAVAILABLE (backing off 0.1 s, doubling) when the
    client retries and the steps are `safe` to repeat."""
    attempts = RETRY_ATTEMPTS if (safe and getattr(client, "_retry", False)) else 1
    for i in range(attempts):
        try:
            return call()
        except Exception as e:  # noqa: BLE001 - re-raised unless retryable
            if i + 1 == attempts or not _retryable(e):
                raise
            time.sleep(min(2.0, 0.1 * 2 ** i))
    raise AssertionError("unreachable")


async def _with_retries_async(client: Any, safe: bool, call: Any) -> Any:
    import asyncio
    attempts = RETRY_ATTEMPTS if (safe and getattr(client, "_retry", False)) else 1
    for i in range(attempts):
        try:
            return await call()
        except Exception as e:  # noqa: BLE001 - re-raised unless retryable
            if i + 1 == attempts or not _retryable(e):
                raise
            await asyncio.sleep(min(2.0, 0.1 * 2 ** i))
    raise AssertionError("unreachable")


def _metadata(base: Any, session_id: Optional[str]) -> Any:
    extra = (("x-attn-session", session_id),) if session_id else ()
    return tuple(base or ()) + extra or None


class Session:
    """One session on an AttentionClient. A context manager that deletes the
    session on exit (a session already gone is fine)."""

    def __init__(self, client: Any, session_id: str, layer_tokens: Optional[Sequence[int]] = None):
        self._client = client
        self.id: str = session_id
        # Every call on it sends these (the token, the balancer's header).
        self._metadata = _metadata(client._metadata, session_id)
        # Each layer's token count, sent with every step (expected_tokens);
        # None until known (a handle on an existing session asks once).
        self._tokens: Optional[List[int]] = None if layer_tokens is None else list(layer_tokens)

    def _expected(self, layer: int) -> Optional[int]:
        if self._tokens is None:
            self.info()
        return self._tokens[layer] if 0 <= layer < len(self._tokens) else None

    def extend(self, layer: int, query: Any, key: Any = None, value: Any = None, *,
               causal: bool = True, window: Window = None, alibi_slopes: Any = None,
               softcap: Optional[float] = None, sink_logits: Any = None,
               scale: Optional[float] = None, return_lse: bool = False,
               compute_precision: Optional[str] = None) -> rq.AttentionResult:
        """Appends key/value ([Hkv, n, D], [Hkv, n, Dv]; None: none) to
        `layer`, then attends `query` ([Hq, n_q, D]; None: none) over
        everything the layer holds, aligned bottom-right. The output is
        [Hq, n_q, Dv] in the query's kind and dtype (lse [Hq, n_q] with
        return_lse). All or nothing: an error changes nothing. The step
        carries the layer's token count (expected_tokens): one the server
        already applied is a replay, so a retry appends nothing twice."""
        layer = int(layer)
        expected = self._expected(layer)
        if (causal is True and window is None and alibi_slopes is None and softcap is None
                and sink_logits is None and scale is None and not return_lse
                and compute_precision is None and _f32(query) and _f32(key) and _f32(value)):
            # The decode step of a loop: straight to its bytes and back.
            payload = _one_step(layer, self.id, query, key, value, _CAUSAL_TAIL, expected)
            client = self._client
            if expected is None:
                resp = client._call_raw(client._extend, payload, self._metadata)
            else:
                resp = (_with_retries(client, True, lambda: client._call_raw(
                    client._extend, payload, self._metadata)) if client._retry
                    else client._call_raw(client._extend, payload, self._metadata))
                self._tokens[layer] = expected + key.shape[1]
            return extend_results(resp, _ONE_F32, False)[0]
        return self._client.extend_many(
            layer, [(self, query, key, value)], causal=causal, window=window,
            alibi_slopes=alibi_slopes, softcap=softcap, sink_logits=sink_logits, scale=scale,
            return_lse=return_lse, compute_precision=compute_precision)[0]

    def _appended(self, layer: int, expected: Optional[int], key: Any) -> None:
        if expected is not None and self._tokens is not None:
            self._tokens[layer] = expected + (0 if key is None else int(np.shape(key)[1]))

    def fork(self, new_id: Optional[str] = None) -> "Session":
        """A copy-on-write child: no K/V is copied until one side writes.
        Its id is `new_id` (in this session's family: "family:...") or one
        made here in the family, so a balancer routes it with its parent."""
        msg = session_pb2.ForkSessionRequest(session_id=self.id,
                                             new_session_id=child_id(self.id, new_id))
        info = self._client._session_call("ForkSession", msg, self.id)
        return Session(self._client, info.session_id, info.layer_tokens)

    def truncate(self, tokens: int) -> SessionInfo:
        """Keeps the first `tokens` of every layer (rejected speculative tokens)."""
        msg = session_pb2.TruncateSessionRequest(session_id=self.id, tokens=int(tokens))
        info = self._client._session_call("TruncateSession", msg, self.id)
        self._tokens = list(info.layer_tokens)
        return SessionInfo(info)

    def info(self) -> SessionInfo:
        """The server's view of the session; the handle's token counts are
        set from it (after a FailedPrecondition, this resynchronizes)."""
        info = self._client._session_call(
            "GetSession", session_pb2.SessionRef(session_id=self.id), self.id)
        self._tokens = list(info.layer_tokens)
        return SessionInfo(info)

    def delete(self) -> SessionInfo:
        """Frees the session (its pages, once no fork holds them)."""
        return SessionInfo(self._client._session_call(
            "DeleteSession", session_pb2.SessionRef(session_id=self.id), self.id))

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        from .errors import NotFound

        try:
            self.delete()
        except NotFound:
            pass

    def __repr__(self) -> str:
        return f"Session({self.id!r})"


class AsyncSession:
    """As Session, each method a coroutine; an async context manager."""

    def __init__(self, client: Any, session_id: str, layer_tokens: Optional[Sequence[int]] = None):
        self._client = client
        self.id: str = session_id
        self._tokens: Optional[List[int]] = None if layer_tokens is None else list(layer_tokens)

    async def _expected(self, layer: int) -> Optional[int]:
        if self._tokens is None:
            await self.info()
        return self._tokens[layer] if 0 <= layer < len(self._tokens) else None

    _appended = Session._appended

    async def extend(self, layer: int, query: Any, key: Any = None, value: Any = None,
                     **kw: Any) -> rq.AttentionResult:
        """As Session.extend."""
        return (await self._client.extend_many(layer, [(self, query, key, value)], **kw))[0]

    async def fork(self, new_id: Optional[str] = None) -> "AsyncSession":
        msg = session_pb2.ForkSessionRequest(session_id=self.id,
                                             new_session_id=child_id(self.id, new_id))
        info = await self._client._session_call("ForkSession", msg, self.id)
        return AsyncSession(self._client, info.session_id, info.layer_tokens)

    async def truncate(self, tokens: int) -> SessionInfo:
        msg = session_pb2.TruncateSessionRequest(session_id=self.id, tokens=int(tokens))
        info = await self._client._session_call("TruncateSession", msg, self.id)
        self._tokens = list(info.layer_tokens)
        return SessionInfo(info)

    async def info(self) -> SessionInfo:
        info = await self._client._session_call(
            "GetSession", session_pb2.SessionRef(session_id=self.id), self.id)
        self._tokens = list(info.layer_tokens)
        return SessionInfo(info)

    async def delete(self) -> SessionInfo:
        return SessionInfo(await self._client._session_call(
            "DeleteSession", session_pb2.SessionRef(session_id=self.id), self.id))

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        from .errors import NotFound

        try:
            await self.delete()
        except NotFound:
            pass

    def __repr__(self) -> str:
        return f"AsyncSession({self.id!r})"
