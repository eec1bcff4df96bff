"""The Python client of the Attention Service.

    import numpy as np
    from attention_client import AttentionClient
    with AttentionClient("localhost:50051") as client:
        out, weights = client.attention(np.eye(2, dtype=np.float32), return_weights=True)

numpy (float32, float16, bool; bfloat16 as a uint16 view with
dtype="bfloat16") and PyTorch tensors (float32, float16, bfloat16, bool) in;
answers in the query's kind and dtype. AsyncAttentionClient is the asyncio
twin. Errors are AttentionError subclasses by gRPC code. KV-cache sessions:
client.create_session(...) -> Session (extend, fork, truncate, info, delete),
and client.extend_many(layer, [(session, q, k, v), ...]) for a batch.
"""
from ._arrays import DATA, VALUES, bf16_bits, bf16_to_float32, from_tensor, to_tensor
from ._requests import AttentionResult
from .aio import AsyncAttentionClient
from .client import AttentionClient
from .sessions import AsyncSession, Session, SessionInfo, SessionList
from .errors import (Aborted, AlreadyExists, AttentionError, Cancelled, DeadlineExceeded,
                     FailedPrecondition, InvalidArgument, NotFound, PermissionDenied,
                     ResourceExhausted, Unauthenticated, Unavailable)

__version__ = "0.5.0"

__all__ = [
    "AttentionClient", "AsyncAttentionClient", "AttentionResult", "AttentionError",
    "Session", "AsyncSession", "SessionInfo", "SessionList",
    "InvalidArgument", "NotFound", "AlreadyExists", "ResourceExhausted", "Unauthenticated",
    "PermissionDenied", "DeadlineExceeded", "Unavailable", "Aborted", "Cancelled",
    "FailedPrecondition", "to_tensor",
    "from_tensor", "bf16_bits", "bf16_to_float32", "DATA", "VALUES", "__version__",
]
