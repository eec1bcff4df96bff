"""The installed attention_client package (client/python) against a real
attention-server, with pytest (Debian's python3-pytest), run by ctest with
the venv's python (tests/client/CMakeLists.txt): the package installed with
pip --no-build-isolation into a fresh --system-site-packages venv.

Checks every dtype round trip (numpy float32/float16/bfloat16 bits, torch
float32/float16/bfloat16 when torch is importable) against float64, every
attention option, packed batches, grouped-query projections, OIP infer,
asyncio (100 concurrent calls), tokens and TLS, each exception type, and bad
input from Python. ATTN_SERVER_BIN names the server binary.
"""
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc

import grpc
import numpy as np
import pytest

import attention_client as ac
from attention_client import AttentionClient, AsyncAttentionClient

SERVER = os.environ["ATTN_SERVER_BIN"]
try:
    import torch
except ImportError:  # python3-torch stays out of CI
    torch = None


def start(*args):
    proc = subprocess.Popen([SERVER, "--host", "127.0.0.1", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline, port = time.monotonic() + 30, None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.search(r"listening on [\d.]+:(\d+)", line)
        port = int(m.group(1)) if m else port
        if "SERVING" in line and port:
            return proc, port
    proc.kill()
    raise RuntimeError("attention-server did not start")


@pytest.fixture(scope="module")
def server():
    proc, port = start()
    yield f"127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=15)


@pytest.fixture
def client(server):
    with AttentionClient(server) as c:
        yield c


def reference(q, k, v, causal=False, bottom_right=False, window=(None, None), softcap=None,
              slopes=None, sinks=None, scale=None):
    """The issue's one definition in float64: q [..., H, Lq, D], k/v [..., Hkv, Lk, *]."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    if q.ndim == 4 and k.shape[1] != q.shape[1]:
        k, v = (np.repeat(x, q.shape[1] // k.shape[1], axis=1) for x in (k, v))
    lq, lk = q.shape[-2], k.shape[-2]
    s = q @ np.swapaxes(k, -1, -2) * (scale if scale is not None else 1 / np.sqrt(q.shape[-1]))
    if softcap:
        s = softcap * np.tanh(s / softcap)
    pos = np.arange(lq)[:, None] + (lk - lq if bottom_right else 0)
    j = np.arange(lk)[None, :]
    if slopes is not None:
        s = s - np.asarray(slopes, np.float64)[..., None, None] * np.abs(pos - j)
    masked = np.zeros((lq, lk), bool)
    if causal:
        masked |= j > pos
    if window[0] is not None:
        masked |= j < pos - window[0]
    if window[1] is not None:
        masked |= j > pos + window[1]
    s = np.where(masked, -np.inf, s)
    sink = None if sinks is None else np.asarray(sinks, np.float64)[:, None, None]
    m = s.max(-1, keepdims=True) if sink is None else np.maximum(s.max(-1, keepdims=True), sink)
    m = np.where(np.isinf(m), 0, m)
    e = np.exp(s - m)
    total = e.sum(-1, keepdims=True) + (0 if sink is None else np.exp(sink - m))
    out = np.where(total > 0, (e / np.where(total > 0, total, 1)) @ v, 0)
    lse = np.where(total[..., 0] > 0, (m + np.log(np.where(total > 0, total, 1)))[..., 0], -np.inf)
    return out, lse


def rng_arrays(seed, *shapes):
    r = np.random.default_rng(seed)
    return [r.standard_normal(s).astype(np.float32) for s in shapes]


def test_installed_outside_the_source_tree():
    assert ac.__version__ == "0.5.0"
    here = os.path.dirname(os.path.abspath(__file__))
    source = os.path.normpath(os.path.join(here, "..", "..", "..", "client", "python"))
    if os.environ.get("ATTN_EXPECT_INSTALLED") == "1":
        assert not os.path.abspath(ac.__file__).startswith(source), ac.__file__
        assert "attention_client._proto" in ac._pb.attention_pb2.__name__
    assert os.path.exists(os.path.join(os.path.dirname(ac.__file__), "py.typed"))


def test_seed_example_and_the_old_tuple(client):
    x = np.array([[1, 0], [0, 1], [1, 1], [1, 1], [0.5, 1]], np.float32)
    out, weights = client.attention(x, return_weights=True)  # the old (output, weights) shape
    want, _ = reference(x, x, x)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    r = client.attention(x)
    assert r.weights is None and r.lse is None and r.output.dtype == np.float32


@pytest.mark.parametrize("wire", ["float32", "float16", "bfloat16"])
def test_numpy_dtypes_round_trip(client, wire):
    q, k, v = rng_arrays(1, (2, 4, 7, 16), (2, 4, 9, 16), (2, 4, 9, 8))
    ulp = {"float32": 0.0, "float16": 2.0**-11, "bfloat16": 2.0**-8}[wire]
    if wire == "float16":
        args, kw = [x.astype(np.float16) for x in (q, k, v)], {}
        rounded = [x.astype(np.float64) for x in args]
    elif wire == "bfloat16":
        args, kw = [ac.bf16_bits(x) for x in (q, k, v)], {"dtype": "bfloat16"}
        rounded = [ac.bf16_to_float32(x) for x in args]
    else:
        args, kw, rounded = [q, k, v], {}, [q, k, v]
    # Computed in float32, the answer is the float64 one on the inputs as sent,
    # rounded once to the wire type.
    r = client.attention(*args, causal=True, compute_precision="float32", **kw)
    assert r.compute_precision == "float32"
    want, _ = reference(*rounded, causal=True)
    got = ac.bf16_to_float32(r.output) if wire == "bfloat16" else r.output.astype(np.float64)
    assert r.output.dtype == {"float32": np.float32, "float16": np.float16,
                              "bfloat16": np.uint16}[wire]
    assert np.all(np.abs(got - want) <= ulp * np.abs(want) + 2e-5), np.abs(got - want).max()
    # float32 arrays sent as bfloat16 come back widened to float32. Left to the
    # server's auto policy, bfloat16 queries compute bf16 where the CPU has a
    # bf16 matrix tier (docs/precision.md's bound), float32 elsewhere.
    want, _ = reference(*[ac.bf16_to_float32(ac.bf16_bits(x)) for x in (q, k, v)])
    for asked in ("float32", None):
        extra = {"compute_precision": asked} if asked else {}
        r = client.attention(q, k, v, wire_dtype="bfloat16", **extra)
        assert r.output.dtype == np.float32
        assert r.compute_precision in (("float32",) if asked else ("float32", "bfloat16"))
        atol = 3e-2 if r.compute_precision == "bfloat16" else 2e-5
        assert np.all(np.abs(r.output - want) <= 2.0**-8 * np.abs(want) + atol)


@pytest.mark.skipif(torch is None, reason="python3-torch is not installed")
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_torch_dtypes_round_trip(client, dtype):
    q, k, v = rng_arrays(2, (1, 2, 6, 8), (1, 2, 6, 8), (1, 2, 6, 8))
    tdt = getattr(torch, dtype)
    tq, tk, tv = (torch.from_numpy(x).to(tdt) for x in (q, k, v))
    # float32 compute: the answer is the rounded inputs' one, rounded once
    # (test_numpy_dtypes_round_trip covers the server's auto policy).
    r = client.attention(tq, tk, tv, causal=True, return_lse=True, compute_precision="float32")
    assert r.compute_precision == "float32"
    assert isinstance(r.output, torch.Tensor) and r.output.dtype == tdt
    assert isinstance(r.lse, torch.Tensor) and r.lse.dtype == torch.float32
    want, lse = reference(*(t.float().numpy() for t in (tq, tk, tv)), causal=True)
    ulp = {"float32": 0.0, "float16": 2.0**-11, "bfloat16": 2.0**-8}[dtype]
    got = r.output.float().numpy().astype(np.float64)
    assert np.all(np.abs(got - want) <= ulp * np.abs(want) + 2e-5)
    np.testing.assert_allclose(r.lse.numpy(), lse, rtol=2e-5, atol=2e-5)
    # And against PyTorch's own SDPA on the same (rounded) inputs, in float64.
    m = torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)
    s = tq.double() @ tk.double().transpose(-1, -2) / np.sqrt(8)
    torch_out = torch.softmax(s.masked_fill(m, float("-inf")), -1) @ tv.double()
    assert np.all(np.abs(got - torch_out.numpy()) <= ulp * np.abs(want) + 2e-5)


def test_every_option_at_once_with_grouped_heads(client):
    q, k, v = rng_arrays(3, (2, 4, 5, 8), (2, 2, 12, 8), (2, 2, 12, 8))
    slopes = np.array([[0.5, 0.25, 0.125, 0.0], [0.1, 0.2, 0.3, 0.4]], np.float32)
    sinks = np.array([0.0, 1.0, -1.0, 2.0], np.float32)
    r = client.attention(q, k, v, causal=True, causal_alignment="bottom_right", window=(3, 0),
                         alibi_slopes=slopes, softcap=4.0, sink_logits=sinks, return_lse=True,
                         compute_precision="float32")
    want, lse = reference(q, k, v, causal=True, bottom_right=True, window=(3, 0), softcap=4.0,
                          slopes=slopes, sinks=sinks)
    np.testing.assert_allclose(r.output, want, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(r.lse, lse, rtol=1e-5, atol=2e-6)
    # The server's attn-compute-precision header, on the result.
    assert r.compute_precision == "float32"
    assert "compute_precision='float32'" in repr(r)
    # A window without causal, one side unbounded.
    r = client.attention(q, k, v, window=(None, 1))
    np.testing.assert_allclose(r.output, reference(q, k, v, window=(None, 1))[0], rtol=1e-5,
                               atol=2e-6)


def test_packed_batch(client):
    lengths = [(3, 5), (0, 2), (6, 6), (1, 9)]
    cu_q = np.cumsum([0] + [a for a, _ in lengths])
    cu_k = np.cumsum([0] + [b for _, b in lengths])
    q, k, v = rng_arrays(4, (cu_q[-1], 4, 8), (cu_k[-1], 2, 8), (cu_k[-1], 2, 8))
    r = client.attention(q, k, v, causal=True, causal_alignment="bottom_right",
                         cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True)
    assert r.output.shape == (cu_q[-1], 4, 8) and r.lse.shape == (4, cu_q[-1])
    for s, (lq, _) in enumerate(lengths):
        if lq == 0:
            continue
        qs = q[cu_q[s]:cu_q[s + 1]].transpose(1, 0, 2)[None]
        ks, vs = (x[cu_k[s]:cu_k[s + 1]].transpose(1, 0, 2)[None] for x in (k, v))
        want, lse = reference(qs, ks, vs, causal=True, bottom_right=True)
        np.testing.assert_allclose(r.output[cu_q[s]:cu_q[s + 1]].transpose(1, 0, 2)[None], want,
                                   rtol=1e-5, atol=2e-6)
        np.testing.assert_allclose(r.lse[:, cu_q[s]:cu_q[s + 1]][None], lse, rtol=1e-5,
                                   atol=2e-6)
    with pytest.raises(ac.InvalidArgument, match="cu_seqlens_k: required with cu_seqlens_q"):
        client.attention(q, k, v, cu_seqlens_q=cu_q)


def test_grouped_query_projections_and_models(client):
    models = {m["name"]: m for m in client.list_models()}
    assert models["demo-gqa"]["num_heads"] == 8 and models["demo-gqa"]["num_kv_heads"] == 2
    r = np.random.default_rng(5)
    e, h, hkv = 16, 4, 2
    w = {"q_weight": r.standard_normal((e, e)).astype(np.float32) * 0.3,
         "k_weight": r.standard_normal((hkv * e // h, e)).astype(np.float32) * 0.3,
         "v_weight": r.standard_normal((hkv * e // h, e)).astype(np.float32) * 0.3}
    x = r.standard_normal((1, 5, e)).astype(np.float32)
    got = client.multi_head_attention(x, num_heads=h, num_kv_heads=hkv, projections=w,
                                      causal=True).output
    xq, xk, xv = (x.astype(np.float64) @ w[n].T.astype(np.float64)
                  for n in ("q_weight", "k_weight", "v_weight"))
    split = lambda a, heads: a.reshape(1, 5, heads, -1).transpose(0, 2, 1, 3)  # noqa: E731
    want, _ = reference(split(xq, h), split(xk, hkv), split(xv, hkv), causal=True)
    np.testing.assert_allclose(got, want.transpose(0, 2, 1, 3).reshape(1, 5, e), rtol=1e-5,
                               atol=2e-6)
    assert client.multi_head_attention(np.zeros((1, 3, 256), np.float32),
                                       model="demo-gqa").output.shape == (1, 3, 256)


def test_oip_infer(client):
    q, k, v = rng_arrays(6, (1, 2, 4, 8), (1, 2, 6, 8), (1, 2, 6, 8))
    out = client.infer("scaled_dot_product_attention", {"query": q, "key": k, "value": v},
                       parameters={"causal": True, "causal_alignment": "bottom_right",
                                   "return_lse": True})
    want, lse = reference(q, k, v, causal=True, bottom_right=True)
    np.testing.assert_allclose(out["output"], want, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(out["lse"], lse, rtol=1e-5, atol=2e-6)
    with pytest.raises(ac.NotFound, match="nope"):
        client.infer("nope", {"query": q})


def test_async_100_concurrent_calls(server):
    q, k, v = rng_arrays(7, (1, 2, 8, 16), (1, 2, 8, 16), (1, 2, 8, 16))
    want, _ = reference(q, k, v, causal=True)

    async def main():
        async with AsyncAttentionClient(server) as c:
            results = await asyncio.gather(
                *[c.attention(q, k, v, causal=True) for _ in range(100)])
            models = await c.list_models()
            health = await c.health()
            with pytest.raises(ac.InvalidArgument):
                await c.attention(q, k[..., :4], v)
            mha = await c.multi_head_attention(np.zeros((1, 2, 64), np.float32),
                                               model="demo-mha-small", return_lse=True)
            return results, models, health, mha

    results, models, health, mha = asyncio.run(asyncio.wait_for(main(), 60))
    assert len(results) == 100
    for r in results:
        np.testing.assert_allclose(r.output, want, rtol=1e-5, atol=2e-6)
        assert r.compute_precision == "float32"
    assert health == "SERVING" and any(m["name"] == "demo-mha" for m in models)
    assert mha.lse.shape == (1, 4, 2)


def test_tokens_and_tls():
    with tempfile.TemporaryDirectory() as d:
        tokens = os.path.join(d, "tokens")
        with open(tokens, "w") as f:
            f.write("s3cret\n")
        key, cert = os.path.join(d, "key.pem"), os.path.join(d, "cert.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "1", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                       check=True, capture_output=True)
        proc, port = start("--auth-token-file", tokens, "--tls-cert", cert, "--tls-key", key)
        target = f"127.0.0.1:{port}"
        x = np.eye(2, dtype=np.float32)
        try:
            with AttentionClient(target, tls_ca=cert, token="s3cret") as c:
                assert c.attention(x).output.shape == (2, 2)
            with AttentionClient(target, tls_ca=cert) as c:
                assert c.health() == "SERVING"  # health needs no token
                with pytest.raises(ac.Unauthenticated):
                    c.attention(x)
            os.environ["ATTN_TOKEN"] = "s3cret"
            try:
                with AttentionClient(target, tls_ca=cert) as c:
                    assert c.attention(x).output.shape == (2, 2)
            finally:
                del os.environ["ATTN_TOKEN"]
            with AttentionClient(target, timeout=5) as c:  # plaintext to a TLS server
                with pytest.raises(ac.Unavailable):
                    c.attention(x)
        finally:
            proc.terminate()
            proc.wait(timeout=15)


def test_each_exception_type(server):
    x = np.eye(2, dtype=np.float32)
    with AttentionClient(server) as c:
        with pytest.raises(ac.InvalidArgument, match="key: last dim must equal") as e:
            c.attention(x, np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "key: last dim" in e.value.details() and isinstance(e.value, grpc.RpcError)
        assert isinstance(e.value.rpc_error, grpc.RpcError)
        assert isinstance(e.value, ac.AttentionError)
        with pytest.raises(ac.NotFound, match="no model named 'nope'"):
            c.multi_head_attention(x[None], model="nope")
    proc, port = start("--max-attention-work", "100")
    try:
        with AttentionClient(f"127.0.0.1:{port}") as c:
            with pytest.raises(ac.ResourceExhausted, match="--max-attention-work"):
                c.attention(np.zeros((64, 64), np.float32))
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    with AttentionClient("127.0.0.1:1", timeout=2) as c:
        with pytest.raises(ac.Unavailable):
            c.health()
    with AttentionClient(server, timeout=1e-4) as c:
        with pytest.raises(ac.DeadlineExceeded):
            c.attention(np.zeros((1, 8, 512, 64), np.float32))

    class Fake(grpc.RpcError):  # codes no server path gives yet
        def __init__(self, code):
            self._code = code

        def code(self):
            return self._code

        def details(self):
            return "why"

    for code, cls in [(grpc.StatusCode.ALREADY_EXISTS, ac.AlreadyExists),
                      (grpc.StatusCode.ABORTED, ac.Aborted),
                      (grpc.StatusCode.CANCELLED, ac.Cancelled),
                      (grpc.StatusCode.PERMISSION_DENIED, ac.PermissionDenied)]:
        err = ac.errors.from_rpc_error(Fake(code))
        assert type(err) is cls and err.details() == "why" and err.code() == code


def test_bad_input_from_python(server):
    c = AttentionClient(server)
    with pytest.raises(TypeError, match="arrays must be float32"):
        c.attention(np.zeros((2, 2), np.complex64))
    with pytest.raises(TypeError, match='dtype="bfloat16" needs a uint16'):
        c.attention(np.zeros((2, 2), np.float32), dtype="bfloat16")
    with pytest.raises(ValueError, match="wire_dtype"):
        c.attention(np.zeros((2, 2), np.float32), wire_dtype="fp8")
    with pytest.raises(ValueError, match="causal_alignment"):
        c.attention(np.zeros((2, 2), np.float32), causal_alignment="middle")
    # Non-contiguous views are sent by value, as their contiguous copies.
    q = np.random.default_rng(8).standard_normal((8, 6)).astype(np.float32)
    np.testing.assert_array_equal(c.attention(q.T).output,
                                  c.attention(np.ascontiguousarray(q.T)).output)
    c.close()
    with pytest.raises(ac.AttentionError, match="closed"):
        c.attention(q)


def test_no_copy_beyond_the_message():
    big = np.zeros((64, 1024, 256), np.float32)  # 64 MiB
    tracemalloc.start()
    t = ac.to_tensor(big)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(t.data) == big.nbytes
    # The bytes of the message and at most one more buffer of that size.
    assert peak <= 2.2 * big.nbytes, peak / big.nbytes


def _extend_args(**kw):
    base = dict(causal=True, window=None, alibi_slopes=None, softcap=None, sink_logits=None,
                scale=None, return_lse=False, compute_precision=None)
    base.update(kw)
    return base


def test_extend_bytes_are_protobufs():
    """The Extend request the client writes by hand (sessions.extend_request,
    the decode step's cached headers too) is byte for byte protobuf's own
    serialization of the same message, for every kind of step; and an
    Extend answer read in place gives what protobuf's parse gives."""
    from attention_client import sessions as ss
    from attention_client._pb import attention_pb2, session_pb2

    r = np.random.default_rng(3)
    f32 = lambda *shape: r.standard_normal(shape).astype(np.float32)  # noqa: E731
    cases = [
        (0, [("s", f32(4, 1, 8), f32(2, 1, 8), f32(2, 1, 8))], {}),  # a decode step
        (200, [("s" * 128, f32(4, 3, 8), f32(2, 3, 8), f32(2, 3, 8))], {}),  # layer > 127
        (5, [("s", f32(2, 1, 130), f32(1, 200, 130), f32(1, 200, 130))], {}),  # dims > 127
        (1, [("a", None, f32(2, 5, 8), f32(2, 5, 8)), ("b", f32(2, 1, 8), None, None)],
         dict(return_lse=True, window=(3, None), softcap=2.0, scale=0.5,
              alibi_slopes=[0.5, 0.25], compute_precision="float32")),
        (2, [("c", f32(4, 1, 8).astype(np.float16), f32(2, 1, 8).astype(np.float16),
              f32(2, 1, 8).astype(np.float16))], dict(causal=False)),
        (3, [("d", f32(4, 2, 8)[:, ::2], f32(2, 1, 8), f32(2, 1, 8))], {}),  # a strided view
        (4, [("e", f32(4, 0, 8), f32(2, 0, 8), f32(2, 0, 8))], {}),  # empty tensors
    ]
    if torch is not None:
        t = lambda *shape: torch.randn(*shape, dtype=torch.bfloat16)  # noqa: E731
        cases.append((6, [("f", t(4, 1, 8), t(2, 1, 8), t(2, 1, 8))], {}))
    # expected_tokens: none, 0, one varint byte, two and three (the decode
    # step's cached header is keyed by its length, its bytes written each call)
    for ex in (0, 5, 300, 70000):
        cases.append((0, [("s", f32(4, 1, 8), f32(2, 1, 8), f32(2, 1, 8))], dict(expected=[ex])))
    cases.append((1, [("a", None, f32(2, 5, 8), f32(2, 5, 8)), ("b", f32(2, 1, 8), None, None)],
                  dict(expected=[None, 129])))
    for layer, steps, kw in cases:
        expected = kw.pop("expected", [None] * len(steps))
        for _ in range(2):  # the second time from the decode step's cached headers
            payload, kinds, sid = ss.extend_request(layer, steps, expected=expected,
                                                    **_extend_args(**kw))
            want = session_pb2.ExtendRequest(layer=layer, causal=kw.get("causal", True))
            if "scale" in kw:
                want.scale = kw["scale"]
            from attention_client import _requests as rq
            rq._options(want, rq.DATA, "bottom_right", kw.get("window"), kw.get("alibi_slopes"),
                        kw.get("softcap"), None, kw.get("return_lse", False),
                        kw.get("compute_precision"))
            for (sid_, q, k, v), kind, ex in zip(steps, kinds, expected):
                st = want.steps.add(session_id=sid_)
                if ex is not None:
                    st.expected_tokens = ex
                if q is not None:
                    st.query.CopyFrom(ac.to_tensor(q, wire_dtype=kind.wire))
                if k is not None:
                    st.key.CopyFrom(ac.to_tensor(k, wire_dtype=kind.wire))
                    st.value.CopyFrom(ac.to_tensor(v, wire_dtype=kind.wire))
            assert payload == want.SerializeToString(), (layer, kw)
            assert session_pb2.ExtendRequest.FromString(payload) == want
    # Answers: the decode step's form, lse, a query-only step's empty
    # output, several results, values instead of data, `replayed` after.
    def answer(*results):
        resp = session_pb2.ExtendResponse()
        for out, lse in results:
            a = resp.results.add()
            a.output.CopyFrom(out)
            if lse is not None:
                a.lse.CopyFrom(lse)
        return resp
    out = ac.to_tensor(f32(4, 1, 8))
    forms = [answer((out, None)), answer((out, ac.to_tensor(f32(4, 1)))),
             answer((ac.to_tensor(f32(4, 0, 8)), None)), answer((out, None), (out, None)),
             answer((ac.to_tensor(f32(4, 1, 8), encoding=ac.VALUES), None)),
             answer((ac.to_tensor(f32(2, 1, 300)), None))]
    for resp in forms:
        n = len(resp.results)
        for lse in (False, True):
            if lse and not all(r.HasField("lse") for r in resp.results):
                continue
            kinds = [ss._F32_KIND] * n
            got = ss.extend_results(resp.SerializeToString(), kinds, lse)
            for g, w in zip(got, resp.results):
                np.testing.assert_array_equal(g.output, ac.from_tensor(w.output))
                if lse:
                    np.testing.assert_array_equal(g.lse, ac.from_tensor(w.lse))
                g.output[...] = 0  # a copy, not a view of the answer's bytes
    whole = answer((out, None)).SerializeToString()
    for cut in (len(whole) - 1, len(whole) // 2, 3):
        with pytest.raises(ValueError, match="truncated"):
            ss.extend_results(whole[:cut], [ss._F32_KIND], False)


def test_decode_step_fast_path_equals_general(client):
    """Session.extend's path for a plain float32 step gives what extend_many
    (the general path, with every keyword) gives for the same step."""
    r = np.random.default_rng(4)
    k0 = r.standard_normal((2, 20, 8)).astype(np.float32)
    q, k = (r.standard_normal(shape).astype(np.float32) for shape in ((4, 1, 8), (2, 1, 8)))
    with client.create_session(1, 2, 8) as a, client.create_session(1, 2, 8) as b:
        a.extend(0, None, k0, k0)
        b.extend(0, None, k0, k0)
        fast = a.extend(0, q, k, k).output
        general = client.extend_many(0, [(b, q, k, k)], causal=True, window=None)[0].output
        np.testing.assert_array_equal(fast, general)
        assert fast.dtype == np.float32 and fast.shape == (4, 1, 8) and fast.flags.writeable
        assert a.info().layer_tokens == b.info().layer_tokens == [21]


# ---- KV-cache sessions ----------------------------------------------------------


def round_to(x, cache_dtype):
    """What a cache of `cache_dtype` keeps of float32 x."""
    x = np.asarray(x, np.float32)
    if cache_dtype == "bfloat16":
        return ac.bf16_to_float32(ac.bf16_bits(x))
    if cache_dtype == "float16":
        return x.astype(np.float16).astype(np.float32)
    return x


@pytest.mark.parametrize("cache_dtype", ["float32", "bfloat16", "float16"])
def test_session_decode_loop_equals_one_shot(client, cache_dtype):
    """A prefill of 50 tokens, then 30 decode steps: each step's output is
    one-shot attention (bottom-right causal, GQA 8/2) over every token the
    layer holds, in float64 on the rounded cache."""
    hq, hkv, d = 8, 2, 32
    r = np.random.default_rng(11)
    keys, values = np.zeros((hkv, 0, d), np.float32), np.zeros((hkv, 0, d), np.float32)
    with client.create_session(2, hkv, d, cache_dtype=cache_dtype) as s:
        for n in [50] + [1] * 30:
            q = r.standard_normal((hq, n, d)).astype(np.float32)
            k = r.standard_normal((hkv, n, d)).astype(np.float32)
            v = r.standard_normal((hkv, n, d)).astype(np.float32)
            out = s.extend(1, q, k, v, return_lse=True)
            keys = np.concatenate([keys, round_to(k, cache_dtype)], axis=1)
            values = np.concatenate([values, round_to(v, cache_dtype)], axis=1)
            want, lse = reference(q[None], keys[None], values[None], causal=True, bottom_right=True)
            assert out.output.dtype == np.float32 and out.output.shape == (hq, n, d)
            np.testing.assert_allclose(out.output, want[0], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(out.lse, lse[0], rtol=1e-5, atol=1e-5)
        info = s.info()
        assert info.layer_tokens == [0, 80] and info.cache_dtype == cache_dtype
        assert info.cache_bytes > 0
    with pytest.raises(ac.NotFound, match="create it again"):
        s.info()  # the context manager deleted it


def int8_held(x):
    """What an int8 side keeps of x [Hkv, n, D]: per (kv head, token), codes
    round-half-even(x / f) in [-127, 127] with f = max|x| / 127 rounded to
    float32, times f (float64 model of the server's quantizer)."""
    x = np.asarray(x, np.float64)
    f = (np.abs(x).max(axis=-1, keepdims=True) / 127.0).astype(np.float32).astype(np.float64)
    codes = np.clip(np.rint(np.divide(x, f, out=np.zeros_like(x), where=f > 0)), -127, 127)
    return codes * f


def test_int8_session_decode_loop(client):
    """key_format/value_format "int8": each step equals float64 attention
    over what the quantizer keeps (tight), and stays within 2% relative RMS
    of attention over the unquantized inputs; fp8_e4m3 within 8%."""
    hq, hkv, d = 8, 2, 32
    r = np.random.default_rng(12)
    for fmt in ("int8", "fp8_e4m3", "int4"):
        ks, vs = [], []
        with client.create_session(1, hkv, d, cache_dtype="bfloat16", key_format=fmt,
                                   value_format=fmt) as s:
            info = s.info()
            assert (info.key_format, info.value_format, info.cache_dtype) == (fmt, fmt, "bfloat16")
            for n in [40] + [1] * 10:
                q = r.standard_normal((hq, n, d)).astype(np.float32)
                k = r.standard_normal((hkv, n, d)).astype(np.float32)
                v = r.standard_normal((hkv, n, d)).astype(np.float32)
                out = s.extend(0, q, k, v).output
                ks.append(k)
                vs.append(v)
                keys, values = np.concatenate(ks, axis=1), np.concatenate(vs, axis=1)
                exact, _ = reference(q[None], keys[None], values[None], causal=True,
                                     bottom_right=True)
                err = np.sqrt(np.mean((out - exact[0]) ** 2) / np.mean(exact[0] ** 2))
                assert err < {"int8": 0.02, "fp8_e4m3": 0.08, "int4": 0.25}[fmt], (fmt, err)
                if fmt == "int8":
                    held, _ = reference(q[None], int8_held(keys)[None], int8_held(values)[None],
                                        causal=True, bottom_right=True)
                    # int8 keys meet the query rounded to int16 (2^-16 of its largest)
                    np.testing.assert_allclose(out, held[0], rtol=2e-4, atol=2e-4)
    with pytest.raises(ValueError, match="key_format: expected None or one of"):
        client.create_session(1, 1, 8, key_format="int3")


@pytest.mark.skipif(torch is None, reason="python3-torch is not installed")
def test_session_torch_bf16_decode_loop(client):
    """torch bfloat16 tensors in and out, over a bfloat16 cache."""
    hq, hkv, d = 4, 1, 64
    g = torch.Generator().manual_seed(3)
    keys, values = [], []
    with client.create_session(1, hkv, d, cache_dtype="bfloat16") as s:
        for n in [20, 1, 1, 1]:
            q, k, v = (torch.randn(h, n, d, generator=g).bfloat16() for h in (hq, hkv, hkv))
            out = s.extend(0, q, k, v).output
            assert out.dtype == torch.bfloat16 and tuple(out.shape) == (hq, n, d)
            keys.append(k.float())
            values.append(v.float())
            want, _ = reference(q.float().numpy()[None], torch.cat(keys, 1).numpy()[None],
                                torch.cat(values, 1).numpy()[None], causal=True, bottom_right=True)
            np.testing.assert_allclose(out.float().numpy(), want[0], atol=3e-2)


def test_decode_loop_example(server, tmp_path):
    """client/python/decode_loop.py, the README's decode-loop example, runs
    and its every step matches one-shot attention (torch when installed,
    else numpy; a bfloat16 cache rounds the inputs the reference sees too)."""
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                          "client", "python", "decode_loop.py")
    # Run from elsewhere: beside the source package the script would import it.
    example = tmp_path / "decode_loop.py"
    example.write_text(open(source).read())
    bf16_tol = 2e-2 if torch is not None else 1e-5  # torch bfloat16 answers are rounded
    for dtype, tol in (("float32", 1e-5), ("bfloat16", bf16_tol)):
        out = subprocess.run([sys.executable, str(example), "--target", server, "--steps", "4",
                              "--prefill", "16", "--dtype", dtype],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        diffs = [float(m) for m in re.findall(r"one-shot float64\| = ([0-9.e+-]+)", out.stdout)]
        assert len(diffs) == 5, out.stdout
        assert max(diffs) <= tol, out.stdout


def test_list_sessions_is_typed(client):
    """list_sessions() answers a SessionList: its sessions (SessionInfo) and
    the pool's bytes as attributes; the dict keys of older releases still
    work for one release, each with a DeprecationWarning."""
    import warnings
    with client.create_session(1, 1, 8, session_id="py-listed") as s:
        s.extend(0, None, np.ones((1, 3, 8), np.float32), np.ones((1, 3, 8), np.float32))
        listed = client.list_sessions()
        assert isinstance(listed, ac.SessionList)
        mine = [i for i in listed.sessions if i.session_id == "py-listed"]
        assert len(mine) == 1 and isinstance(mine[0], ac.SessionInfo)
        assert mine[0].layer_tokens == [3]
        assert 0 < listed.cache_bytes_used <= listed.cache_bytes_limit
        assert [i.session_id for i in listed] == [i.session_id for i in listed.sessions]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert listed["sessions"] is listed.sessions
            assert listed["cache_bytes_used"] == listed.cache_bytes_used
            assert listed["cache_bytes_limit"] == listed.cache_bytes_limit
        assert [w.category for w in caught] == [DeprecationWarning] * 3, caught
        assert "use the attribute .sessions" in str(caught[0].message)
        with pytest.raises(KeyError):
            listed["nope"]


def test_sessions_belong_to_their_principal():
    """Two named tokens: each sees its own sessions (SessionInfo.owner), its
    own bytes and quota in list_sessions(), and NotFound for the other's."""
    with tempfile.TemporaryDirectory() as d:
        tokens = os.path.join(d, "tokens")
        with open(tokens, "w") as f:
            f.write("team-a tok-a-py\nteam-b tok-b-py\n")
        proc, port = start("--auth-token-file", tokens, "--kv-cache-mb-per-principal", "2")
        try:
            target = f"127.0.0.1:{port}"
            with AttentionClient(target, token="tok-a-py") as a, \
                    AttentionClient(target, token="tok-b-py") as b:
                s = a.create_session(1, 1, 8, session_id="py-owned")
                s.extend(0, None, np.ones((1, 3, 8), np.float32), np.ones((1, 3, 8), np.float32))
                assert s.info().owner == "team-a"
                mine, theirs = a.list_sessions(), b.list_sessions()
                assert [i.session_id for i in mine] == ["py-owned"]
                assert mine.sessions[0].owner == "team-a"
                assert 0 < mine.owner_bytes_used == mine.cache_bytes_used
                assert mine.owner_bytes_limit == 2 << 20 < mine.cache_bytes_limit
                assert len(theirs) == 0 and theirs.owner_bytes_used == 0
                with pytest.raises(ac.NotFound):
                    b.session("py-owned").info()
                with pytest.raises(ac.NotFound):
                    b.session("py-owned").delete()
                assert s.info().layer_tokens == [3]
                assert "owner='team-a'" in repr(s.info())
        finally:
            proc.terminate()
            proc.wait(timeout=15)


def test_session_steps_carry_their_counts_and_retries_replay(server):
    """A Session sends each layer's count (expected_tokens): a step its
    handle already sent is a replay (nothing appended, the same answer), a
    stale handle is refused with FailedPrecondition and info() resyncs it.
    With retry=True a step is sent again after UNAVAILABLE, only when it
    carries its count; ids are made by the client, forks in the family."""
    from attention_client import sessions as ss

    r = np.random.default_rng(11)
    f32 = lambda *shape: r.standard_normal(shape).astype(np.float32)  # noqa: E731
    with AttentionClient(server, retry=True) as c:
        s = c.create_session(2, 2, 8)
        assert s.id.startswith("s-") and len(s.id) == 26 and s._tokens == [0, 0]
        q, k, v = f32(4, 1, 8), f32(2, 3, 8), f32(2, 3, 8)
        first = s.extend(1, q, k, v).output
        assert s._tokens == [0, 3]
        stale = c.session(s.id)
        assert stale.info().layer_tokens == [0, 3]
        s._tokens[1] = 0  # as if the answer was lost: the same step again
        again = s.extend(1, q, k, v).output
        np.testing.assert_allclose(again, first, rtol=0, atol=1e-6)
        assert s.info().layer_tokens == [0, 3], "appended once"
        s.extend(1, q, f32(2, 1, 8), f32(2, 1, 8))  # layer 1: 4
        with pytest.raises(ac.FailedPrecondition, match="layer 1 holds 4 tokens, expected_tokens 3"):
            stale.extend(1, q, f32(2, 1, 8), f32(2, 1, 8))
        assert stale.info().layer_tokens == [0, 4], "refused: nothing changed; info resyncs"
        stale.extend(1, q, f32(2, 1, 8), f32(2, 1, 8))
        assert s.info().layer_tokens == [0, 5]
        # The same through extend_many, general path (lse) and async.
        out = c.extend_many(0, [(s, q, k, v)], return_lse=True)[0]
        s._tokens[0] = 0
        out2 = c.extend_many(0, [(s, q, k, v)], return_lse=True)[0]
        np.testing.assert_allclose(out2.lse, out.lse, rtol=0, atol=1e-6)
        assert s.info().layer_tokens == [3, 5]
        child = s.fork()
        assert child.id.startswith(s.id + ":") and child._tokens == [3, 5]

        # Retries: UNAVAILABLE, then the answer. Sent again only with a count.
        calls = []

        def flaky():
            calls.append(1)
            if len(calls) == 1:
                raise _unavailable()
            return "ok"
        assert ss._with_retries(c, True, flaky) == "ok" and len(calls) == 2
        calls.clear()
        with pytest.raises(ac.Unavailable):
            ss._with_retries(c, False, flaky)  # no count: never sent twice
        assert len(calls) == 1
    with AttentionClient(server) as plain:  # retry=False: once
        calls.clear()
        with pytest.raises(ac.Unavailable):
            ss._with_retries(plain, True, flaky)
        assert len(calls) == 1


def _unavailable():
    """An Unavailable as the client raises it for a gRPC UNAVAILABLE."""
    from attention_client.errors import from_rpc_error

    class E(grpc.RpcError):
        def code(self):
            return grpc.StatusCode.UNAVAILABLE

        def details(self):
            return "no attention-server replica is available"
    return from_rpc_error(E())


def test_session_fork_truncate_and_options(client):
    hq, hkv, d = 4, 2, 16
    r = np.random.default_rng(5)
    k0, v0 = (r.standard_normal((hkv, 40, d)).astype(np.float32) for _ in range(2))
    parent = client.create_session(1, hkv, d, session_id="py-parent")
    assert parent.id == "py-parent"
    parent.extend(0, None, k0, v0)  # keys and values only: no query
    child = parent.fork(parent.id + ":child")
    assert child.info().layer_tokens == [40]
    used = client.list_sessions().cache_bytes_used
    assert child.info().cache_bytes == parent.info().cache_bytes
    assert client.list_sessions().cache_bytes_used == used, "a fork copies no page"
    t = child.truncate(25)
    assert t.layer_tokens == [25]
    opts = dict(window=(8, None), softcap=4.0, alibi_slopes=[0.5, 0.25, 0.125, 0.0625],
                sink_logits=[0.1, 0.2, -0.3, 0.0])
    q = r.standard_normal((hq, 2, d)).astype(np.float32)
    k1, v1 = (r.standard_normal((hkv, 2, d)).astype(np.float32) for _ in range(2))
    got = child.extend(0, q, k1, v1, return_lse=True, **opts)
    keys, values = np.concatenate([k0[:, :25], k1], 1), np.concatenate([v0[:, :25], v1], 1)
    want, lse = reference(q[None], keys[None], values[None], causal=True, bottom_right=True,
                          window=(8, None), softcap=4.0, slopes=opts["alibi_slopes"],
                          sinks=opts["sink_logits"])
    np.testing.assert_allclose(got.output, want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.lse, lse[0], rtol=1e-5, atol=1e-5)
    assert parent.info().layer_tokens == [40], "the parent is unaffected"
    parent.delete()
    assert child.info().layer_tokens == [27], "the child outlives its parent"
    child.delete()


def test_extend_many_mixes_decode_prefill_and_query_only(client):
    r = np.random.default_rng(9)
    d = 16
    a = client.create_session(1, 1, d, session_id="many-a")
    b = client.create_session(1, 1, d, session_id="many-b", cache_dtype="float16")
    try:
        ka, va = (r.standard_normal((1, 30, d)).astype(np.float32) for _ in range(2))
        qa = r.standard_normal((2, 1, d)).astype(np.float32)
        qb = r.standard_normal((2, 3, d)).astype(np.float32)
        kb, vb = (r.standard_normal((1, 3, d)).astype(np.float32) for _ in range(2))
        res = client.extend_many(0, [(a, qa, ka, va), ("many-b", qb, kb, vb)])
        assert len(res) == 2
        want_a, _ = reference(qa[None], ka[None], va[None], causal=True, bottom_right=True)
        want_b, _ = reference(qb[None], round_to(kb, "float16")[None],
                              round_to(vb, "float16")[None], causal=True, bottom_right=True)
        np.testing.assert_allclose(res[0].output, want_a[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(res[1].output, want_b[0], rtol=1e-5, atol=1e-5)
        # query only: nothing appended
        only = client.extend_many(0, [(a, qa, None, None)])[0]
        np.testing.assert_allclose(only.output, want_a[0][:, -1:], rtol=1e-5, atol=1e-5)
        assert a.info().layer_tokens == [30]
    finally:
        a.delete()
        b.delete()


def test_session_errors(client):
    s = client.create_session(2, 2, 8, session_id="py-err", max_tokens=4)
    try:
        with pytest.raises(ac.AlreadyExists, match="already exists"):
            client.create_session(1, 1, 8, session_id="py-err")
        with pytest.raises(ac.InvalidArgument, match="has 2 layers"):
            s.extend(2, np.zeros((2, 1, 8), np.float32))
        with pytest.raises(ac.InvalidArgument, match="a session may appear once"):
            z = np.zeros((2, 1, 8), np.float32)
            client.extend_many(0, [(s, z, None, None), (s, z, None, None)])
        with pytest.raises(ac.ResourceExhausted, match="max_tokens"):
            s.extend(0, None, np.zeros((2, 5, 8), np.float32), np.zeros((2, 5, 8), np.float32))
        with pytest.raises(ac.InvalidArgument, match="tokens: must be >= 0"):
            s.truncate(-1)
        with pytest.raises(ValueError, match="cache_dtype"):
            client.create_session(1, 1, 8, cache_dtype="int8")
        with pytest.raises(ValueError, match="key and value come together"):
            s.extend(0, None, np.zeros((2, 1, 8), np.float32))
    finally:
        s.delete()
    with pytest.raises(ac.NotFound, match="may have expired"):
        client.session("py-err").extend(0, np.zeros((2, 1, 8), np.float32))


def test_async_sessions(server):
    async def main():
        async with AsyncAttentionClient(server) as c:
            sessions = [await c.create_session(1, 1, 8) for _ in range(10)]
            z = np.ones((1, 3, 8), np.float32)
            outs = await asyncio.gather(*[s.extend(0, np.ones((2, 1, 8), np.float32), z, z)
                                          for s in sessions])
            info = await sessions[0].info()
            child = await sessions[0].fork()
            async with child:
                await child.truncate(1)
            listed = await c.list_sessions()
            for s in sessions:
                await s.delete()
            return outs, info, listed

    outs, info, listed = asyncio.run(asyncio.wait_for(main(), 60))
    for o in outs:  # three equal keys: the output is the value, 1
        np.testing.assert_allclose(o.output, np.ones((2, 1, 8)), rtol=1e-6)
    assert info.layer_tokens == [3]
    assert isinstance(listed, ac.SessionList)
    assert len(listed.sessions) >= 10 and listed.cache_bytes_used > 0
