"""The generated gRPC stubs: the package's own (built by setup.py into
attention_client/_proto), or, in the source tree, those of
client/python/generate_stubs.sh on PYTHONPATH."""
try:
    from attention_client._proto import health_pb2, health_pb2_grpc
    from attention_client._proto.attention.v1 import attention_pb2, attention_pb2_grpc
    from attention_client._proto.attention.v1 import session_pb2, session_pb2_grpc
    from attention_client._proto.inference import open_inference_grpc_pb2 as oip_pb2
    from attention_client._proto.inference import open_inference_grpc_pb2_grpc as oip_pb2_grpc
except ImportError:  # not installed: the stubs of generate_stubs.sh
    import os
    import sys

    _GENERATED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                              "generated")
    if os.path.isdir(_GENERATED):  # generate_stubs.sh's default folder
        sys.path.insert(0, _GENERATED)
    import health_pb2  # noqa: F401
    import health_pb2_grpc  # noqa: F401
    from attention.v1 import attention_pb2, attention_pb2_grpc  # noqa: F401
    from attention.v1 import session_pb2, session_pb2_grpc  # noqa: F401
    from inference import open_inference_grpc_pb2 as oip_pb2  # noqa: F401
    from inference import open_inference_grpc_pb2_grpc as oip_pb2_grpc  # noqa: F401

__all__ = ["attention_pb2", "attention_pb2_grpc", "health_pb2", "health_pb2_grpc", "oip_pb2",
           "oip_pb2_grpc", "session_pb2", "session_pb2_grpc"]
