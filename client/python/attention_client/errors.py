"""Exceptions by gRPC status code, all subclasses of AttentionError, each
carrying the server's message; the grpc.RpcError stays in `rpc_error`."""
from typing import Optional

import grpc


class AttentionError(grpc.RpcError):
    """A failed call. Like the grpc.RpcError it also is (so that code catching
    grpc.RpcError keeps working): `code()` (a grpc.StatusCode, or None for a
    local error such as a closed client) and `details()` (the server's
    message, also `message`); the original grpc.RpcError is `rpc_error`."""

    def __init__(self, details: str, code: Optional[grpc.StatusCode] = None,
                 rpc_error: Optional[grpc.RpcError] = None):
        super().__init__(f"{code.name}: {details}" if code is not None else details)
        self.message, self._code, self.rpc_error = details, code, rpc_error

    def code(self) -> Optional[grpc.StatusCode]:
        return self._code

    def details(self) -> str:
        return self.message


class InvalidArgument(AttentionError):
    """INVALID_ARGUMENT: the request is wrong; the message names the field."""


class NotFound(AttentionError):
    """NOT_FOUND: an unknown model (or session)."""


class AlreadyExists(AttentionError):
    """ALREADY_EXISTS."""


class ResourceExhausted(AttentionError):
    """RESOURCE_EXHAUSTED: over a server limit, or the server is full."""


class Unauthenticated(AttentionError):
    """UNAUTHENTICATED: a missing or wrong bearer token."""


class PermissionDenied(AttentionError):
    """PERMISSION_DENIED."""


class DeadlineExceeded(AttentionError):
    """DEADLINE_EXCEEDED: the call's timeout passed."""


class Unavailable(AttentionError):
    """UNAVAILABLE: the server cannot be reached (or is shutting down)."""


class Aborted(AttentionError):
    """ABORTED."""


class FailedPrecondition(AttentionError):
    """FAILED_PRECONDITION: a session step sent at the wrong position (its
    expected_tokens is neither the layer's count nor a replay); the message
    names the layer, the tokens held and expected_tokens."""


class Cancelled(AttentionError):
    """CANCELLED."""


_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.ABORTED: Aborted,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.CANCELLED: Cancelled,
}


def from_rpc_error(e: grpc.RpcError) -> AttentionError:
    """The AttentionError subclass of e's code."""
    code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
    details = e.details() if hasattr(e, "details") else str(e)
    return _BY_CODE.get(code, AttentionError)(details or "", code, e)
