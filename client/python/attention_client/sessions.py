"""KV-cache sessions: the server keeps each sequence's keys and values per
layer, and a decode step sends only its new tokens (attention.v1's
SessionService).

    with client.create_session(num_layers=32, num_kv_heads=8, head_dim=128,
                               cache_dtype="bfloat16") as s:
        out = s.extend(0, q, k, v).output          # q [Hq, n, D], k/v [Hkv, n, D]

Every call on one session sends the `x-attn-session` header, by which a load
balancer keeps a session on the replica that holds it. Sessions live in the
server's memory: a restart or an idle timeout loses them (NotFound).
"""
import warnings
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from . import _requests as rq
from ._arrays import DATA, kind_of, to_tensor
from ._pb import attention_pb2, session_pb2

_CACHE_DTYPES = {"float32": attention_pb2.DATA_TYPE_FLOAT32,
                 "bfloat16": attention_pb2.DATA_TYPE_BFLOAT16,
                 "float16": attention_pb2.DATA_TYPE_FLOAT16}
_CACHE_NAMES = {v: k for k, v in _CACHE_DTYPES.items()}
_CACHE_NAMES[attention_pb2.DATA_TYPE_UNSPECIFIED] = "float32"

Window = Optional[Tuple[Optional[int], Optional[int]]]
# (session, query, key, value): a Session (or its id), and arrays or None.
Step = Tuple[Any, Any, Any, Any]


class SessionInfo:
    """What the server says of a session: its shape, the tokens each layer
    holds (`layer_tokens`) and the bytes its pages take (`cache_bytes`;
    pages shared with a fork count in both)."""

    __slots__ = ("session_id", "num_layers", "num_kv_heads", "head_dim", "value_dim",
                 "cache_dtype", "max_tokens", "layer_tokens", "cache_bytes")

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

    def __repr__(self) -> str:
        return (f"SessionInfo({self.session_id!r}, layers={self.num_layers}, "
                f"kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, "
                f"cache={self.cache_dtype}, layer_tokens={self.layer_tokens}, "
                f"cache_bytes={self.cache_bytes})")


class SessionList:
    """What ListSessions answers: `sessions` (SessionInfo, by id) and the
    pool's bytes, `cache_bytes_used` of `cache_bytes_limit`. Indexing it as
    the dict older releases returned (`listed["sessions"]`) still works for
    one release, with a DeprecationWarning."""

    __slots__ = ("sessions", "cache_bytes_used", "cache_bytes_limit")
    _KEYS = ("sessions", "cache_bytes_used", "cache_bytes_limit")

    def __init__(self, msg: Any):
        self.sessions: List[SessionInfo] = [SessionInfo(m) for m in msg.sessions]
        self.cache_bytes_used: int = msg.cache_bytes_used
        self.cache_bytes_limit: int = msg.cache_bytes_limit

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
        return (f"SessionList({len(self.sessions)} sessions, pool {self.cache_bytes_used} of "
                f"{self.cache_bytes_limit} bytes)")


def create_request(num_layers: int, num_kv_heads: int, head_dim: int, value_dim: int,
                   cache_dtype: str, max_tokens: int, session_id: Optional[str]) -> Any:
    if cache_dtype not in _CACHE_DTYPES:
        raise ValueError(f"cache_dtype: expected one of {sorted(_CACHE_DTYPES)}, got "
                         f"{cache_dtype!r}")
    return session_pb2.CreateSessionRequest(
        session_id=session_id or "", num_layers=int(num_layers), num_kv_heads=int(num_kv_heads),
        head_dim=int(head_dim), value_dim=int(value_dim), cache_dtype=_CACHE_DTYPES[cache_dtype],
        max_tokens=int(max_tokens))


def _id_of(session: Any) -> str:
    return session.id if isinstance(session, (Session, AsyncSession)) else str(session)


def extend_request(layer: int, steps: Sequence[Step], *, causal: bool, window: Window,
                   alibi_slopes: Any, softcap: Optional[float], sink_logits: Any,
                   scale: Optional[float], return_lse: bool, compute_precision: Optional[str],
                   encoding: str = DATA) -> Tuple[Any, list]:
    """The ExtendRequest, and each step's kind (its answer's), from the query
    (or, for a step without queries, from its keys)."""
    req = session_pb2.ExtendRequest(layer=int(layer), causal=bool(causal))
    if scale is not None:
        req.scale = float(scale)
    rq._options(req, encoding, "bottom_right", window, alibi_slopes, softcap, sink_logits,
                return_lse, compute_precision)
    kinds = []
    for step in steps:
        if len(step) != 4:
            raise ValueError("extend_many: each step is (session, query, key, value)")
        session, query, key, value = step
        if (key is None) != (value is None):
            raise ValueError("key and value come together (both or neither)")
        like = query if query is not None else key
        kind = kind_of(like) if like is not None else kind_of(np.zeros(0, np.float32))
        st = req.steps.add(session_id=_id_of(session))
        if query is not None:
            st.query.CopyFrom(to_tensor(query, encoding, kind.wire))
        if key is not None:
            st.key.CopyFrom(to_tensor(key, encoding, kind.wire))
            st.value.CopyFrom(to_tensor(value, encoding, kind.wire))
        kinds.append(kind)
    return req, kinds


def extend_results(resp: Any, kinds: list, return_lse: bool) -> List[rq.AttentionResult]:
    return [rq.result(r, k, False, return_lse) for r, k in zip(resp.results, kinds)]


def _metadata(base: Any, session_id: Optional[str]) -> Any:
    extra = (("x-attn-session", session_id),) if session_id else ()
    return tuple(base or ()) + extra or None


class Session:
    """One session on an AttentionClient. A context manager that deletes the
    session on exit (a session already gone is fine)."""

    def __init__(self, client: Any, session_id: str):
        self._client = client
        self.id: str = session_id

    def extend(self, layer: int, query: Any, key: Any = None, value: Any = None, *,
               causal: bool = True, window: Window = None, alibi_slopes: Any = None,
               softcap: Optional[float] = None, sink_logits: Any = None,
               scale: Optional[float] = None, return_lse: bool = False,
               compute_precision: Optional[str] = None) -> rq.AttentionResult:
        """Appends key/value ([Hkv, n, D], [Hkv, n, Dv]; None: none) to
        `layer`, then attends `query` ([Hq, n_q, D]; None: none) over
        everything the layer holds, aligned bottom-right. The output is
        [Hq, n_q, Dv] in the query's kind and dtype (lse [Hq, n_q] with
        return_lse). All or nothing: an error changes nothing."""
        return self._client.extend_many(
            layer, [(self, query, key, value)], causal=causal, window=window,
            alibi_slopes=alibi_slopes, softcap=softcap, sink_logits=sink_logits, scale=scale,
            return_lse=return_lse, compute_precision=compute_precision)[0]

    def fork(self, new_id: Optional[str] = None) -> "Session":
        """A copy-on-write child: no K/V is copied until one side writes."""
        msg = session_pb2.ForkSessionRequest(session_id=self.id, new_session_id=new_id or "")
        info = self._client._session_call("ForkSession", msg, self.id)
        return Session(self._client, info.session_id)

    def truncate(self, tokens: int) -> SessionInfo:
        """Keeps the first `tokens` of every layer (rejected speculative tokens)."""
        msg = session_pb2.TruncateSessionRequest(session_id=self.id, tokens=int(tokens))
        return SessionInfo(self._client._session_call("TruncateSession", msg, self.id))

    def info(self) -> SessionInfo:
        return SessionInfo(self._client._session_call(
            "GetSession", session_pb2.SessionRef(session_id=self.id), self.id))

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

    def __init__(self, client: Any, session_id: str):
        self._client = client
        self.id: str = session_id

    async def extend(self, layer: int, query: Any, key: Any = None, value: Any = None,
                     **kw: Any) -> rq.AttentionResult:
        """As Session.extend."""
        return (await self._client.extend_many(layer, [(self, query, key, value)], **kw))[0]

    async def fork(self, new_id: Optional[str] = None) -> "AsyncSession":
        msg = session_pb2.ForkSessionRequest(session_id=self.id, new_session_id=new_id or "")
        info = await self._client._session_call("ForkSession", msg, self.id)
        return AsyncSession(self._client, info.session_id)

    async def truncate(self, tokens: int) -> SessionInfo:
        msg = session_pb2.TruncateSessionRequest(session_id=self.id, tokens=int(tokens))
        return SessionInfo(await self._client._session_call("TruncateSession", msg, self.id))

    async def info(self) -> SessionInfo:
        return SessionInfo(await self._client._session_call(
            "GetSession", session_pb2.SessionRef(session_id=self.id), self.id))

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
