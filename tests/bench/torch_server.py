#!/usr/bin/python3
"""The alternative a user would write: a Python grpcio server running PyTorch
1.13 nn.MultiheadAttention, on the same proto. A benchmark baseline, run by
tests/bench/run_server_bench.sh (not part of CI).

    client/python/generate_stubs.sh /tmp/stubs
    PYTHONPATH=/tmp/stubs /usr/bin/python3 tests/bench/torch_server.py --port 50061

Serves MultiHeadAttention for the models demo-mha (E=512, 8 heads) and
demo-mha-small (E=64, 4 heads) with random weights, ListModels, and
grpc.health.v1 Check, so that attention-client bench can drive it.
"""
import argparse
import json
import os
import sys
from concurrent import futures

import grpc
import numpy as np
import torch

from attention.v1 import attention_pb2, attention_pb2_grpc
import health_pb2
import health_pb2_grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_blas import describe, loaded_blas  # noqa: E402

MODELS = {"demo-mha": (512, 8), "demo-mha-small": (64, 4)}


def to_array(t):
    shape = tuple(t.shape)
    if t.values:
        return np.array(t.values, np.float32).reshape(shape)
    return np.frombuffer(t.data, "<f4").reshape(shape)


def to_tensor(a, values):
    t = attention_pb2.Tensor(shape=list(a.shape), dtype=attention_pb2.DATA_TYPE_FLOAT32)
    if values:
        t.values.extend(a.ravel().tolist())
    else:
        t.data = np.ascontiguousarray(a, "<f4").tobytes()
    return t


class Service(attention_pb2_grpc.AttentionServiceServicer):
    def __init__(self):
        torch.manual_seed(0)
        self.modules = {name: torch.nn.MultiheadAttention(e, h, batch_first=True).eval()
                        for name, (e, h) in MODELS.items()}

    def MultiHeadAttention(self, request, context):
        module = self.modules.get(request.model)
        if module is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"model: no model named '{request.model}'")
        q = torch.from_numpy(to_array(request.query).copy())
        k = torch.from_numpy(to_array(request.key).copy()) if request.HasField("key") else q
        v = torch.from_numpy(to_array(request.value).copy()) if request.HasField("value") else q
        mask = None
        if request.causal:
            mask = torch.ones(q.shape[1], k.shape[1], dtype=torch.bool).triu(1)
        with torch.inference_mode():
            out, w = module(q, k, v, attn_mask=mask, need_weights=request.return_weights,
                            average_attn_weights=not request.per_head_weights)
        values = len(request.query.values) > 0
        resp = attention_pb2.AttentionResponse(output=to_tensor(out.numpy(), values))
        if request.return_weights:
            resp.weights.CopyFrom(to_tensor(w.numpy(), values))
        return resp

    def ListModels(self, request, context):
        return attention_pb2.ListModelsResponse(models=[
            attention_pb2.ModelInfo(name=n, kind="multi_head_attention", embed_dim=e,
                                    num_heads=h, kdim=e, vdim=e) for n, (e, h) in MODELS.items()])


class Health(health_pb2_grpc.HealthServicer):
    def Check(self, request, context):
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=50061)
    ap.add_argument("--threads", type=int, default=2, help="torch threads and gRPC workers")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    # summarize_server_bench.py reads this line, and shows no PyTorch row
    # unless the BLAS is OpenBLAS.
    blas = loaded_blas()
    print(f"torch BLAS: {json.dumps(blas)}", flush=True)
    print(f"PyTorch {torch.__version__}, {describe(blas)}", flush=True)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.threads), options=[
        ("grpc.max_send_message_length", 64 << 20),
        ("grpc.max_receive_message_length", 64 << 20)])
    attention_pb2_grpc.add_AttentionServiceServicer_to_server(Service(), server)
    health_pb2_grpc.add_HealthServicer_to_server(Health(), server)
    server.add_insecure_port(f"{args.host}:{args.port}")
    server.start()
    print(f"torch server listening on {args.host}:{args.port}; SERVING", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
