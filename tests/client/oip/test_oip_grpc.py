"""An Open Inference Protocol client against a real attention-server.

The stubs are generated here, with grpc_tools (python3-grpc-tools), from
proto/inference/open_inference_grpc.proto: the specification's proto, as any
OIP client would build it. Checks every RPC, raw and typed contents,
FP16/BF16, parameters, the PyTorch goldens, and the errors.

Run by ctest with ATTN_SERVER_BIN, ATTN_GOLDEN_DIR and ATTN_PROTO_DIR set.
"""
import importlib
import os
import subprocess
import sys
import tempfile
import unittest

import grpc
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)) + "/python")
from test_python_client import assert_close, read_safetensors, start_server  # noqa: E402

GOLDEN = os.environ["ATTN_GOLDEN_DIR"]
PROTO_DIR = os.environ["ATTN_PROTO_DIR"]


def generate_stubs():
    out = tempfile.mkdtemp(prefix="oip-stubs-")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", PROTO_DIR,
                    f"--python_out={out}", f"--grpc_python_out={out}",
                    os.path.join(PROTO_DIR, "inference", "open_inference_grpc.proto")],
                   check=True)
    sys.path.insert(0, out)
    return (importlib.import_module("inference.open_inference_grpc_pb2"),
            importlib.import_module("inference.open_inference_grpc_pb2_grpc"))


pb, pb_grpc = generate_stubs()

NP = {"FP32": np.float32, "FP16": np.float16, "BOOL": np.bool_, "INT8": np.int8, "INT64": np.int64}


def bf16_bytes(a):
    """float32 -> bfloat16 bytes, round to nearest even (NaN-free input)."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).tobytes()


def bf16_values(raw):
    return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)


def infer_input(name, a, datatype=None, raw=True):
    a = np.asarray(a)
    t = pb.ModelInferRequest.InferInputTensor(name=name, shape=list(a.shape))
    t.datatype = datatype or ("BOOL" if a.dtype == np.bool_ else
                              "INT64" if a.dtype == np.int64 else "FP32")
    if t.datatype == "BF16":
        return t, bf16_bytes(a)
    if raw:
        return t, np.ascontiguousarray(a, NP[t.datatype]).tobytes()
    if t.datatype == "BOOL":
        t.contents.bool_contents.extend(a.ravel().tolist())
    elif t.datatype == "INT64":
        t.contents.int64_contents.extend(a.ravel().tolist())
    else:
        t.contents.fp32_contents.extend(a.astype(np.float32).ravel().tolist())
    return t, None


def request(model, inputs, raw=True, outputs=(), **params):
    """inputs: [(name, array[, datatype])]."""
    req = pb.ModelInferRequest(model_name=model, id="req-1")
    for item in inputs:
        t, data = infer_input(*item, raw=raw)
        req.inputs.append(t)
        if data is not None:
            req.raw_input_contents.append(data)
    for name, value in params.items():
        p = req.parameters[name]
        if isinstance(value, bool):
            p.bool_param = value
        elif isinstance(value, float):
            p.double_param = value
        elif isinstance(value, int):
            p.int64_param = value
        else:
            p.string_param = value
    for o in outputs:
        req.outputs.append(pb.ModelInferRequest.InferRequestedOutputTensor(name=o))
    return req


def output(resp, name):
    for i, o in enumerate(resp.outputs):
        if o.name != name:
            continue
        if resp.raw_output_contents:
            raw = resp.raw_output_contents[i]
            a = bf16_values(raw) if o.datatype == "BF16" else np.frombuffer(raw, NP[o.datatype])
        else:
            a = np.array(o.contents.fp32_contents, np.float32)
        return a.reshape(list(o.shape)), o.datatype
    raise KeyError(name)


def sdpa64(q, k, v, causal=False, scale=None):
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) * (scale if scale is not None else 1 / np.sqrt(q.shape[-1]))
    if causal:
        s = np.where(np.triu(np.ones(s.shape[-2:], bool), 1), -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return p @ v, p


class OipGrpcTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc, port = start_server("--model-dir", os.path.join(GOLDEN, "models"))
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        cls.stub = pb_grpc.GRPCInferenceServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.proc.terminate()
        cls.proc.wait(timeout=15)

    def infer(self, req):
        return self.stub.ModelInfer(req, timeout=30)

    def assert_error(self, req, code, text):
        with self.assertRaises(grpc.RpcError) as e:
            self.infer(req)
        self.assertEqual(e.exception.code(), code, e.exception.details())
        self.assertIn(text, e.exception.details())

    def test_attention_variants_as_parameters_and_inputs(self):
        """GQA shapes, bottom-right causal, a window, softcap, ALiBi, sinks and
        the lse (issue 23), against numpy in float64."""
        rng = np.random.default_rng(9)
        q = rng.standard_normal((2, 4, 5, 8)).astype(np.float32)
        k = rng.standard_normal((2, 1, 12, 8)).astype(np.float32)  # MQA: one kv head
        v = rng.standard_normal((2, 1, 12, 8)).astype(np.float32)
        slopes = np.array([[0.5, 0.25, 0.125, 0.0], [0.1, 0.2, 0.3, 0.4]], np.float32)  # [B, H]
        sink = np.array([0.0, 1.0, -1.0, 2.0], np.float32)
        for raw in (True, False):
            resp = self.infer(request(
                "scaled_dot_product_attention",
                [("query", q), ("key", k), ("value", v), ("alibi_slopes", slopes),
                 ("sink_logits", sink)],
                raw=raw, outputs=("output", "lse"), causal=True, causal_alignment="bottom_right",
                window_left=3, window_right=0, softcap=4.0, return_lse=True))
            out, _ = output(resp, "output")
            lse, dtype = output(resp, "lse")
            self.assertEqual(dtype, "FP32")
            # The arithmetic used: fp32 for an FP32 query (bf16 is never picked for it).
            self.assertEqual(resp.parameters["compute_precision"].string_param, "fp32")
            kk, vv = (np.repeat(x.astype(np.float64), 4, axis=1) for x in (k, v))
            s = q.astype(np.float64) @ np.swapaxes(kk, -1, -2) / np.sqrt(8)
            s = 4.0 * np.tanh(s / 4.0)
            pos = np.arange(5)[:, None] + 12 - 5
            j = np.arange(12)[None, :]
            s = s - slopes.astype(np.float64)[:, :, None, None] * np.abs(pos - j)
            s = np.where((j > pos) | (j < pos - 3), -np.inf, s)
            sk = sink.astype(np.float64)[None, :, None, None]
            m = np.maximum(s.max(-1, keepdims=True), sk)
            e = np.exp(s - m)
            tot = e.sum(-1, keepdims=True) + np.exp(sk - m)
            assert_close(self, out, (e / tot) @ vv, 1.0)
            assert_close(self, lse, (m + np.log(tot))[..., 0], 1.0)
        self.assert_error(request("scaled_dot_product_attention", [("query", q)],
                                  causal_alignment="sideways"),
                          grpc.StatusCode.INVALID_ARGUMENT,
                          "parameters.causal_alignment: expected 'top_left' or 'bottom_right'")
        self.assert_error(request("scaled_dot_product_attention", [("query", q)], softcap=-1.0),
                          grpc.StatusCode.INVALID_ARGUMENT, "softcap: must be > 0")
        self.assert_error(request("scaled_dot_product_attention",
                                  [("query", q), ("cu_seqlens_q", np.array([0, 5], np.float32))]),
                          grpc.StatusCode.INVALID_ARGUMENT,
                          "inputs[1] (cu_seqlens_q).datatype: expected INT64, got 'FP32'")

    def test_packed_batch_with_cu_seqlens(self):
        """Three sequences packed as [total, H, D] with INT64 offsets, raw and
        typed; each equals its own attention in float64 (GQA, bottom-right
        causal); the lse is [H, total_q]."""
        rng = np.random.default_rng(4)
        lq, lk = [3, 0, 6], [5, 2, 6]
        cu_q, cu_k = np.cumsum([0] + lq), np.cumsum([0] + lk)
        q = rng.standard_normal((cu_q[-1], 4, 8)).astype(np.float32)
        k = rng.standard_normal((cu_k[-1], 2, 8)).astype(np.float32)
        v = rng.standard_normal((cu_k[-1], 2, 8)).astype(np.float32)
        for raw in (True, False):
            resp = self.infer(request(
                "scaled_dot_product_attention",
                [("query", q), ("key", k), ("value", v), ("cu_seqlens_q", cu_q.astype(np.int64)),
                 ("cu_seqlens_k", cu_k.astype(np.int64))],
                raw=raw, outputs=("output", "lse"), causal=True, causal_alignment="bottom_right"))
            out, _ = output(resp, "output")
            lse, _ = output(resp, "lse")
            self.assertEqual(out.shape, (cu_q[-1], 4, 8))
            self.assertEqual(lse.shape, (4, cu_q[-1]))
            for s in (0, 2):  # sequence 1 has no queries (and so no rows to check)
                qs = q[cu_q[s]:cu_q[s + 1]].transpose(1, 0, 2).astype(np.float64)
                ks, vs = (np.repeat(x[cu_k[s]:cu_k[s + 1]].transpose(1, 0, 2).astype(np.float64),
                                    2, axis=0) for x in (k, v))
                sc = qs @ np.swapaxes(ks, -1, -2) / np.sqrt(8)
                pos = np.arange(lq[s])[:, None] + lk[s] - lq[s]
                sc = np.where(np.arange(lk[s])[None, :] > pos, -np.inf, sc)
                m = sc.max(-1, keepdims=True)
                e = np.exp(sc - m)
                want = (e / e.sum(-1, keepdims=True)) @ vs
                assert_close(self, out[cu_q[s]:cu_q[s + 1]].transpose(1, 0, 2), want, 1.0)
                assert_close(self, lse[:, cu_q[s]:cu_q[s + 1]],
                             (m + np.log(e.sum(-1, keepdims=True)))[..., 0], 1.0)
        self.assert_error(request("scaled_dot_product_attention",
                                  [("query", q), ("key", k), ("value", v),
                                   ("cu_seqlens_q", np.array([0, 5, 2, 9], np.int64)),
                                   ("cu_seqlens_k", cu_k.astype(np.int64))]),
                          grpc.StatusCode.INVALID_ARGUMENT,
                          "cu_seqlens_q: offsets must not fall, got [1] = 5 then [2] = 2")
        self.assert_error(request("scaled_dot_product_attention",
                                  [("query", q), ("key", k), ("value", v),
                                   ("cu_seqlens_q", cu_q.astype(np.int64))]),
                          grpc.StatusCode.INVALID_ARGUMENT, "cu_seqlens_k: required with cu_seqlens_q")

    def test_live_ready_and_metadata(self):
        self.assertTrue(self.stub.ServerLive(pb.ServerLiveRequest()).live)
        self.assertTrue(self.stub.ServerReady(pb.ServerReadyRequest()).ready)
        self.assertTrue(self.stub.ModelReady(pb.ModelReadyRequest(name="seed_multi_head_self_attention")).ready)
        meta = self.stub.ServerMetadata(pb.ServerMetadataRequest())
        self.assertEqual(meta.name, "attention-server")
        self.assertIn("binary_tensor_data", meta.extensions)
        m = self.stub.ModelMetadata(pb.ModelMetadataRequest(name="seed_multi_head_self_attention"))
        self.assertEqual(m.versions, ["1"])
        self.assertTrue(m.platform)
        inputs = {t.name: (t.datatype, list(t.shape)) for t in m.inputs}
        self.assertEqual(inputs["key_padding_mask"][0], "BOOL")
        self.assertEqual(inputs["query"][1][:2], [-1, -1])
        self.assertEqual([t.name for t in m.outputs], ["output", "weights", "lse"])
        sdpa = self.stub.ModelMetadata(pb.ModelMetadataRequest(name="scaled_dot_product_attention"))
        self.assertEqual([t.name for t in sdpa.inputs],
                         ["query", "key", "value", "key_padding_mask", "attn_bias",
                          "alibi_slopes", "sink_logits", "cu_seqlens_q", "cu_seqlens_k"])
        for rpc, req in ((self.stub.ModelReady, pb.ModelReadyRequest(name="nope")),
                         (self.stub.ModelMetadata, pb.ModelMetadataRequest(name="nope"))):
            with self.assertRaises(grpc.RpcError) as e:
                rpc(req)
            self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
            self.assertIn("model_name: no model named 'nope'", e.exception.details())

    def test_sdpa_raw_and_typed_contents(self):
        rng = np.random.default_rng(1)
        q, k, v = (rng.standard_normal((2, 3, 5, 8), dtype=np.float32) for _ in range(3))
        want, want_w = sdpa64(q, k, v, causal=True, scale=0.5)
        for raw in (True, False):
            with self.subTest(raw=raw):
                resp = self.infer(request("scaled_dot_product_attention",
                                          [("query", q), ("key", k), ("value", v)], raw=raw,
                                          outputs=("output", "weights"), causal=True, scale=0.5))
                self.assertEqual(resp.id, "req-1")
                self.assertEqual(resp.model_version, "1")
                self.assertEqual(bool(resp.raw_output_contents), raw)
                out, dtype = output(resp, "output")
                self.assertEqual(dtype, "FP32")
                assert_close(self, out, want, np.abs(v).max())
                assert_close(self, output(resp, "weights")[0], want_w, 1e-6)

    def test_half_types_in_and_out(self):
        rng = np.random.default_rng(2)
        q, k, v = (rng.standard_normal((4, 6, 16), dtype=np.float32) for _ in range(3))
        for dtype, widen, half_ulp in (("FP16", lambda a: a.astype(np.float16).astype(np.float64), 2.0**-11),
                                       ("BF16", lambda a: bf16_values(bf16_bytes(a)).reshape(a.shape).astype(np.float64),
                                        2.0**-8)):
            # Asked float32, the answer is the widened inputs' rounded once. Without
            # the parameter the server's auto policy computes BF16 queries in bf16
            # where the CPU has a bf16 matrix tier, and says so.
            for asked in ("fp32", None):
                with self.subTest(dtype=dtype, asked=asked):
                    params = {"compute_precision": asked} if asked else {}
                    req = request("scaled_dot_product_attention",
                                  [("query", q, dtype), ("key", k, dtype), ("value", v, dtype)],
                                  **params)
                    self.assertEqual(len(req.raw_input_contents[0]), 2 * q.size)
                    resp = self.infer(req)
                    out, got_type = output(resp, "output")
                    self.assertEqual(got_type, dtype)
                    self.assertEqual(len(resp.raw_output_contents[0]), 2 * out.size)
                    used = resp.parameters["compute_precision"].string_param
                    self.assertIn(used, ("fp32", "bf16") if asked is None and dtype == "BF16"
                                  else ("fp32",))
                    want, _ = sdpa64(widen(q), widen(k), widen(v))
                    # One rounding after float32; bf16 compute: docs/precision.md's bound.
                    tol = half_ulp * np.abs(want) + (3e-2 if used == "bf16" else 1e-5)
                    self.assertTrue((np.abs(out.astype(np.float64) - want) <= tol).all())
        # Typed contents cannot carry a half type.
        t, _ = infer_input("query", q, "FP16")
        req = pb.ModelInferRequest(model_name="scaled_dot_product_attention", inputs=[t])
        self.assert_error(req, grpc.StatusCode.INVALID_ARGUMENT,
                          "query: FP16 travels as raw_input_contents bytes only")

    def test_output_datatype_parameter(self):
        q = np.random.default_rng(3).standard_normal((3, 4), dtype=np.float32)
        req = request("scaled_dot_product_attention", [("query", q)], outputs=("output",))
        req.outputs[0].parameters["datatype"].string_param = "BF16"
        resp = self.infer(req)
        out, dtype = output(resp, "output")
        self.assertEqual(dtype, "BF16")
        want, _ = sdpa64(q, q, q)
        self.assertTrue((np.abs(out - want) <= 2.0**-8 * np.abs(want) + 1e-5).all())

    def test_pytorch_goldens_through_oip(self):
        cases = sorted(f[:-len(".safetensors")] for f in os.listdir(os.path.join(GOLDEN, "cases")))
        self.assertEqual(len(cases), 11)
        for name in cases:
            with self.subTest(name):
                meta, t = read_safetensors(os.path.join(GOLDEN, "cases", name + ".safetensors"))
                inputs = [("query", t["query"])]
                if "key" in t:
                    inputs.append(("key", t["key"]))
                    inputs.append(("value", t.get("value", t["key"])))
                if "key_padding_mask" in t:
                    inputs.append(("key_padding_mask", t["key_padding_mask"] != 0))
                if "attn_bias" in t:
                    inputs.append(("attn_bias", t["attn_bias"]))
                params = dict(causal=meta["causal"] == "1",
                              return_weights=meta["need_weights"] == "1")
                model = "scaled_dot_product_attention" if meta["op"] == "sdpa" else name
                if meta["op"] != "sdpa" and meta.get("average_weights") == "0":
                    params["per_head_weights"] = True
                resp = self.infer(request(model, inputs, **params))
                assert_close(self, output(resp, "output")[0], t["expected_output"],
                             np.abs(t["expected_output"]).max())
                if params["return_weights"]:
                    assert_close(self, output(resp, "weights")[0], t["expected_weights"], 1e-6)

    def test_errors_name_the_field(self):
        q = np.ones((2, 4, 8), np.float32)
        sdpa = "scaled_dot_product_attention"
        INVALID, NOT_FOUND = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND
        self.assert_error(request("nope", [("query", q)]), NOT_FOUND, "model_name: no model named 'nope'")
        self.assert_error(request("", [("query", q)]), INVALID, "model_name: required")
        bad_version = request(sdpa, [("query", q)])
        bad_version.model_version = "7"
        self.assert_error(bad_version, NOT_FOUND, "model_version: model 'scaled_dot_product_attention' has version 1 only, got '7'")
        self.assert_error(request(sdpa, [("query", q)], flavour=True), INVALID,
                          "parameters.flavour: unknown parameter")
        self.assert_error(request(sdpa, [("query", q)], causal="yes"), INVALID,
                          "parameters.causal: expected a bool_param, got string_param")
        self.assert_error(request(sdpa, [("qurey", q)]), INVALID, "inputs[0].name: unknown input 'qurey'")
        self.assert_error(request(sdpa, [("query", q), ("query", q)]), INVALID,
                          "inputs[1].name: 'query' given twice")
        self.assert_error(request(sdpa, [("query", q)], outputs=("logits",)), INVALID,
                          "outputs[0].name: unknown output 'logits'")
        self.assert_error(request(sdpa, [("query", q, "INT8")]), INVALID,
                          "query: datatype must be FP32, FP16 or BF16, got INT8")
        short = request(sdpa, [("query", q)])
        short.raw_input_contents[0] = short.raw_input_contents[0][:-4]
        self.assert_error(short, INVALID, "query: raw_input_contents[0] has 252 bytes, expected 256")
        extra = request(sdpa, [("query", q)])
        extra.raw_input_contents.append(b"1234")
        self.assert_error(extra, INVALID, "raw_input_contents: 2 entries for 1 inputs")
        both = request(sdpa, [("query", q)])
        both.inputs[0].contents.fp32_contents.extend([1.0])
        self.assert_error(both, INVALID, "inputs[0] (query).contents: set together with raw_input_contents")
        wrong_field = request(sdpa, [("query", q)], raw=False)
        wrong_field.inputs[0].contents.int_contents.extend([1])
        self.assert_error(wrong_field, INVALID, "inputs[0] (query).contents: FP32 takes fp32_contents, got int_contents")
        few = request(sdpa, [("query", q[:1])], raw=False)
        few.inputs[0].shape[0] = 2
        self.assert_error(few, INVALID, "query: shape [2, 4, 8] needs 64 contents.fp32_contents, got 32")
        self.assert_error(request(sdpa, [("query", q), ("key", np.ones((2, 4, 4), np.float32)),
                                         ("value", q)]), INVALID, "key: last dim must equal query's (8), got 4")
        huge = request(sdpa, [("query", q)])
        huge.inputs[0].shape[:] = [1 << 40, 1 << 40]
        self.assert_error(huge, INVALID, "query: element count of [1099511627776, 1099511627776] overflows int64")
        big = request(sdpa, [("query", q)])
        big.inputs[0].shape[:] = [1 << 20, 1 << 10]
        self.assert_error(big, grpc.StatusCode.RESOURCE_EXHAUSTED, "elements exceed the limit")
        self.assert_error(request("seed_multi_head_self_attention", [("query", q)]), INVALID, "query")


if __name__ == "__main__":
    unittest.main()
