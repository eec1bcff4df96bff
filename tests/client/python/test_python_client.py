"""The Python client against a real attention-server (loopback, free port).

Run by ctest with ATTN_SERVER_BIN, ATTN_GOLDEN_DIR and PYTHONPATH (the
generated stubs and client/python) set; uses /usr/bin/python3 with
python3-grpcio and python3-numpy. PyTorch is not needed: its results are the
committed golden files from tests/golden/make_goldens.py.
"""
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

import grpc
import numpy as np

from attention_client import AttentionClient
from goldens import call_case, read_safetensors  # noqa: F401 - test_oip_grpc imports it from here

SERVER = os.environ["ATTN_SERVER_BIN"]
GOLDEN = os.environ["ATTN_GOLDEN_DIR"]


def assert_close(testcase, got, want, floor):
    """|got - want| <= 1e-5 * max(|want|, floor), elementwise."""
    testcase.assertEqual(got.shape, want.shape)
    tol = 1e-5 * np.maximum(np.abs(want), floor)
    bad = np.abs(got - want) > tol
    testcase.assertFalse(bad.any(), f"{bad.sum()} elements differ; max error "
                         f"{np.max(np.abs(got - want))}")


def start_server(*args, timeout=30):
    """Starts the server on a free port; returns (process, port) once SERVING."""
    proc = subprocess.Popen([SERVER, "--host", "127.0.0.1", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + timeout
    port = None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.search(r"listening on [\d.]+:(\d+)", line)
        if m:
            port = int(m.group(1))
        if "SERVING" in line and port:
            return proc, port
    proc.kill()
    raise RuntimeError("attention-server did not start")


class PythonClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc, port = start_server("--model-dir", os.path.join(GOLDEN, "models"))
        cls.client = AttentionClient(f"127.0.0.1:{port}")

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.proc.terminate()
        cls.proc.wait(timeout=15)

    def test_health(self):
        self.assertEqual(self.client.health(), "SERVING")

    def test_seed_worked_example(self):
        x = np.array([[1, 0], [0, 1], [1, 1], [1, 1], [0.5, 1]], np.float32)
        for encoding in ("data", "values"):
            out, w = self.client.attention(x, return_weights=True, encoding=encoding)
            xd = x.astype(np.float64)
            s = xd @ xd.T / np.sqrt(2.0)
            p = np.exp(s - s.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            assert_close(self, out, p @ xd, 0)
            assert_close(self, w, p, 0)
            self.assertAlmostEqual(float(out[0, 0]), 0.7988, places=4)
            self.assertAlmostEqual(float(out[0, 1]), 0.7616, places=4)

    def test_pytorch_goldens(self):
        cases = sorted(f[:-len(".safetensors")] for f in os.listdir(os.path.join(GOLDEN, "cases")))
        self.assertEqual(len(cases), 11)
        for name in cases:
            with self.subTest(name):
                meta, t = read_safetensors(os.path.join(GOLDEN, "cases", name + ".safetensors"))
                want_w = meta["need_weights"] == "1"
                out, w = call_case(self.client, name, meta, t)
                expected = t["expected_output"]
                assert_close(self, out, expected, np.abs(expected).max())
                if want_w:
                    assert_close(self, w, t["expected_weights"], 1e-6)

    def test_inline_projections_match_the_model(self):
        _, weights = read_safetensors(os.path.join(GOLDEN, "models", "seed_cross_attention.safetensors"))
        _, t = read_safetensors(os.path.join(GOLDEN, "cases", "seed_cross_attention.safetensors"))
        proj = {f"{p}_{kind}": weights[f"{p}_linear.{kind}"]
                for p in ("q", "k", "v") for kind in ("weight", "bias")}
        out, _ = self.client.cross_attention(t["query"], t["key"], projections=proj,
                                             encoding="values")
        assert_close(self, out, t["expected_output"], np.abs(t["expected_output"]).max())

    def test_errors_have_codes_and_name_the_field(self):
        q = np.ones((2, 4, 8), np.float32)
        with self.assertRaises(grpc.RpcError) as e:
            self.client.attention(q, np.ones((2, 4, 4), np.float32), np.ones((2, 4, 4), np.float32))
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("key: last dim must equal query's (8), got 4", e.exception.details())
        with self.assertRaises(grpc.RpcError) as e:
            self.client.multi_head_attention(q, model="no-such-model")
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertIn("model: no model named 'no-such-model'", e.exception.details())

    def test_list_models(self):
        names = {m["name"]: m for m in self.client.list_models()}
        self.assertEqual(names["mha_cross_kdim_vdim_bias4d"]["kdim"], 12)
        self.assertEqual(names["seed_cross_attention"]["kind"], "cross_attention")



def make_pki(directory):
    """A CA, a server certificate for 127.0.0.1 and a client certificate (openssl CLI)."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args):
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    run("req", "-x509", *ec, "-days", "2", "-subj", "/CN=py-ca", "-keyout", "ca.key",
        "-out", "ca.pem", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=keyCertSign")
    with open(os.path.join(directory, "server.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    with open(os.path.join(directory, "client.ext"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    for name, cn in (("server", "localhost"), ("client", "py-client")):
        run("req", *ec, "-subj", f"/CN={cn}", "-keyout", f"{name}.key", "-out", f"{name}.csr")
        run("x509", "-req", "-days", "2", "-in", f"{name}.csr", "-CA", "ca.pem",
            "-CAkey", "ca.key", "-CAcreateserial", "-extfile", f"{name}.ext",
            "-out", f"{name}.pem")


class SecureClientTest(unittest.TestCase):
    """mTLS and a bearer token from Python."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="attn-py-tls-")
        make_pki(cls.dir)
        cls.token = "py-token-8c1f"
        with open(os.path.join(cls.dir, "tokens"), "w") as f:
            f.write(cls.token + "\n")
        def p(name):
            return os.path.join(cls.dir, name)
        cls.proc, cls.port = start_server(
            "--tls-cert", p("server.pem"), "--tls-key", p("server.key"),
            "--tls-client-ca", p("ca.pem"), "--auth-token-file", p("tokens"))

    @classmethod
    def tearDownClass(cls):
        cls.proc.terminate()
        cls.proc.wait(timeout=15)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def p(self, name):
        return os.path.join(self.dir, name)

    def client(self, **kw):
        return AttentionClient(f"127.0.0.1:{self.port}", timeout=10, **kw)

    def test_mtls_with_token_computes_the_seed_example(self):
        with self.client(tls_ca=self.p("ca.pem"), tls_cert=self.p("client.pem"),
                         tls_key=self.p("client.key"), token=self.token) as c:
            self.assertEqual(c.health(), "SERVING")
            out, _ = c.attention(np.array([[1, 0], [0, 1], [1, 1], [1, 1], [0.5, 1]], np.float32))
            self.assertAlmostEqual(float(out[0, 0]), 0.7988, places=4)

    def test_missing_token_is_unauthenticated_and_health_is_open(self):
        with self.client(tls_ca=self.p("ca.pem"), tls_cert=self.p("client.pem"),
                         tls_key=self.p("client.key")) as c:
            self.assertEqual(c.health(), "SERVING")
            with self.assertRaises(grpc.RpcError) as e:
                c.list_models()
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAUTHENTICATED)

    def test_no_client_certificate_is_refused(self):
        with self.client(tls_ca=self.p("ca.pem"), token=self.token) as c:
            with self.assertRaises(grpc.RpcError) as e:
                c.health()
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)


if __name__ == "__main__":
    unittest.main()
