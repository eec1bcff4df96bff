"""Python client for the Attention Service: numpy arrays in and out.

    from attention_client import AttentionClient
    client = AttentionClient("localhost:50051")
    out, weights = client.attention(np.array([[1, 0], [0, 1]], np.float32),
                                    return_weights=True)

Needs python3-grpcio and python3-numpy (/usr/bin/python3 on Debian) and the
generated stubs: run client/python/generate_stubs.sh (they go to
client/python/generated, found automatically) or put them on PYTHONPATH.
"""
import os
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.isdir(os.path.join(_HERE, "generated")):
    sys.path.insert(0, os.path.join(_HERE, "generated"))

import grpc  # noqa: E402
from attention.v1 import attention_pb2, attention_pb2_grpc  # noqa: E402
import health_pb2  # noqa: E402
import health_pb2_grpc  # noqa: E402

DATA, VALUES = "data", "values"


def to_tensor(array, encoding=DATA):
    """numpy array -> attention.v1.Tensor (bool arrays become DATA_TYPE_BOOL)."""
    a = np.asarray(array)
    t = attention_pb2.Tensor(shape=list(a.shape))
    if a.dtype == np.bool_:
        t.dtype = attention_pb2.DATA_TYPE_BOOL
        if encoding == VALUES:
            t.values.extend(a.astype(np.float32).ravel().tolist())
        else:
            t.data = np.ascontiguousarray(a, dtype=np.uint8).tobytes()
        return t
    t.dtype = attention_pb2.DATA_TYPE_FLOAT32
    a = np.ascontiguousarray(a, dtype="<f4")
    if encoding == VALUES:
        t.values.extend(a.ravel().tolist())
    else:
        t.data = a.tobytes()
    return t


def from_tensor(tensor):
    """attention.v1.Tensor -> numpy array (float32, or bool)."""
    shape = tuple(tensor.shape)
    if tensor.dtype == attention_pb2.DATA_TYPE_BOOL:
        if tensor.values:
            return np.array(tensor.values, np.float32).reshape(shape) != 0
        return np.frombuffer(tensor.data, np.uint8).reshape(shape) != 0
    if tensor.values:
        return np.array(tensor.values, np.float32).reshape(shape)
    return np.frombuffer(tensor.data, "<f4").reshape(shape).copy()


class AttentionClient:
    """A channel to one server. Every call raises grpc.RpcError on failure
    (e.code() is e.g. grpc.StatusCode.INVALID_ARGUMENT, e.details() says why)."""

    def __init__(self, target="localhost:50051", max_message_mb=64, timeout=30.0, *,
                 tls=False, tls_ca=None, tls_cert=None, tls_key=None, token=None):
        """TLS when `tls` is set or a PEM path is given: the server's certificate
        must chain to `tls_ca` (default: the system's roots); `tls_cert` and
        `tls_key` are a client certificate for mutual TLS. `token` is sent as
        `authorization: Bearer <token>` on every AttentionService call."""
        size = max_message_mb << 20
        options = [("grpc.max_send_message_length", size),
                   ("grpc.max_receive_message_length", size)]
        if tls or tls_ca or tls_cert or tls_key:
            def read(path):
                if path is None:
                    return None
                with open(path, "rb") as f:
                    return f.read()
            creds = grpc.ssl_channel_credentials(root_certificates=read(tls_ca),
                                                 private_key=read(tls_key),
                                                 certificate_chain=read(tls_cert))
            self.channel = grpc.secure_channel(target, creds, options=options)
        else:
            self.channel = grpc.insecure_channel(target, options=options)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        self.stub = attention_pb2_grpc.AttentionServiceStub(self.channel)
        self.health_stub = health_pb2_grpc.HealthStub(self.channel)
        self.timeout = timeout

    def close(self):
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @staticmethod
    def _fill(req, encoding, key=None, value=None, projections=None, key_padding_mask=None,
              attn_bias=None):
        """Sets the optional fields that the three requests share."""
        if key is not None:
            req.key.CopyFrom(to_tensor(key, encoding))
        if value is not None:
            req.value.CopyFrom(to_tensor(value, encoding))
        for name, array in (projections or {}).items():
            getattr(req.projections, name).CopyFrom(to_tensor(array, encoding))
        if key_padding_mask is not None:
            req.key_padding_mask.CopyFrom(
                to_tensor(np.asarray(key_padding_mask, dtype=bool), encoding))
        if attn_bias is not None:
            req.attn_bias.CopyFrom(to_tensor(attn_bias, encoding))

    @staticmethod
    def _result(resp, return_weights):
        out = from_tensor(resp.output)
        return (out, from_tensor(resp.weights)) if return_weights else (out, None)

    def attention(self, query, key=None, value=None, *, model="", projections=None,
                  causal=False, key_padding_mask=None, attn_bias=None, scale=None,
                  return_weights=False, encoding=DATA):
        """Scaled dot-product attention; query alone is self-attention.
        `projections` is an optional dict of arrays (q_weight, q_bias, ...,
        out_bias) in nn.Linear layout. Returns (output, weights or None)."""
        req = attention_pb2.AttentionRequest(query=to_tensor(query, encoding), model=model,
                                             causal=causal, return_weights=return_weights)
        if scale is not None:
            req.scale = scale
        self._fill(req, encoding, key, value, projections, key_padding_mask, attn_bias)
        return self._result(self.stub.Attention(req, timeout=self.timeout, metadata=self._metadata), return_weights)

    def cross_attention(self, decoder, encoder, *, model="", projections=None, causal=False,
                        key_padding_mask=None, attn_bias=None, scale=None,
                        return_weights=False, encoding=DATA):
        """Queries from `decoder`, keys and values from `encoder`."""
        req = attention_pb2.CrossAttentionRequest(
            decoder=to_tensor(decoder, encoding), encoder=to_tensor(encoder, encoding),
            model=model, causal=causal, return_weights=return_weights)
        if scale is not None:
            req.scale = scale
        self._fill(req, encoding, projections=projections, key_padding_mask=key_padding_mask,
                   attn_bias=attn_bias)
        return self._result(self.stub.CrossAttention(req, timeout=self.timeout, metadata=self._metadata), return_weights)

    def multi_head_attention(self, query, key=None, value=None, *, model="", num_heads=0,
                             projections=None, causal=False, key_padding_mask=None,
                             attn_bias=None, return_weights=False, per_head_weights=False,
                             encoding=DATA):
        """nn.MultiheadAttention(batch_first=True) semantics."""
        req = attention_pb2.MultiHeadAttentionRequest(
            query=to_tensor(query, encoding), model=model, num_heads=num_heads, causal=causal,
            return_weights=return_weights, per_head_weights=per_head_weights)
        self._fill(req, encoding, key, value, projections, key_padding_mask, attn_bias)
        return self._result(self.stub.MultiHeadAttention(req, timeout=self.timeout, metadata=self._metadata),
                            return_weights)

    def list_models(self):
        """[{name, kind, embed_dim, num_heads, kdim, vdim}, ...]"""
        resp = self.stub.ListModels(attention_pb2.ListModelsRequest(), timeout=self.timeout,
                                    metadata=self._metadata)
        return [{"name": m.name, "kind": m.kind, "embed_dim": m.embed_dim,
                 "num_heads": m.num_heads, "kdim": m.kdim, "vdim": m.vdim}
                for m in resp.models]

    def health(self, service=""):
        """"SERVING", "NOT_SERVING", ..."""
        resp = self.health_stub.Check(health_pb2.HealthCheckRequest(service=service),
                                      timeout=self.timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
