"""Limits before work on SessionService.Extend, measured on a real server's
peak RSS (VmHWM):

- a request of 2 million empty steps is refused by --max-extend-steps from
  its bytes, before one step is parsed;
- a 65-row prefill (a speculative-decoding verification) over a 65k-token
  bfloat16 layer with --max-request-memory-mb 64 is answered right, reading
  the pages in place instead of widening the layer to float32.

Run by ctest with ATTN_SERVER_BIN set and PYTHONPATH holding the
attention.v1 stubs and client/python.
"""
import time
import unittest

import grpc
import numpy as np
from attention.v1 import attention_pb2, session_pb2
from attention_client import AttentionClient, to_tensor
from unread_answers_test import rss_mib, start_server

MIB = 1 << 20


def reset_peak(pid):
    """Resets VmHWM to the current RSS (Linux: 5 > clear_refs); False when
    the kernel refuses, then the caller compares with VmRSS before."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class ExtendLimits(unittest.TestCase):
    def setUp(self):
        self.proc = None

    def tearDown(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def serve(self, *args):
        self.proc, port, _ = start_server("--threads", "2", *args)
        return port

    def test_two_million_empty_steps_are_counted_not_parsed(self):
        port = self.serve()
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[
            ("grpc.max_send_message_length", 64 * MIB)])
        extend = channel.unary_unary("/attention.v1.SessionService/Extend",
                                     request_serializer=None, response_deserializer=None)
        # An ExtendRequest of 2,000,000 empty SessionSteps (field 2, length 0):
        # 4 MB of bytes that protobuf would build into 2 million messages.
        payload = b"\x12\x00" * 2_000_000
        reset = reset_peak(self.proc.pid)
        before = rss_mib(self.proc.pid, "VmHWM" if reset else "VmRSS")
        t0 = time.monotonic()
        with self.assertRaises(grpc.RpcError) as e:
            extend(payload, timeout=60)
        seconds = time.monotonic() - t0
        grown = rss_mib(self.proc.pid, "VmHWM") - before
        print(f"2,000,000 empty steps refused in {seconds * 1e3:.0f} ms; VmHWM grew {grown:.1f} MiB")
        self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("more than 1024 steps", e.exception.details())
        self.assertIn("--max-extend-steps", e.exception.details())
        self.assertLess(grown, 64, "the steps were built before the cap refused them")
        # 1024 steps are fine as far as the cap goes: the next check speaks.
        with self.assertRaises(grpc.RpcError) as e:
            extend(b"\x12\x00" * 1024, timeout=60)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("steps[0].session_id", e.exception.details())
        channel.close()

    def test_duplicate_ids_are_found_before_any_step_is_decoded(self):
        port = self.serve()
        with AttentionClient(f"127.0.0.1:{port}") as c:
            s = c.create_session(1, 1, 8, session_id="dup")
            q = np.ones((1, 1, 8), np.float32)
            with self.assertRaises(grpc.RpcError) as e:
                c.extend_many(0, [(s, q, None, None), (s, q, None, None)])
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("steps[1] (session 'dup'): a session may appear once in an Extend",
                          e.exception.details())
            # The second step's key is malformed (3 bytes for 8 floats): were
            # the steps decoded before the ids are checked, that would speak.
            req = session_pb2.ExtendRequest(causal=True)
            req.steps.add(session_id="dup").query.CopyFrom(to_tensor(q))
            bad = req.steps.add(session_id="dup")
            bad.key.CopyFrom(attention_pb2.Tensor(shape=[1, 1, 8], dtype=attention_pb2.DATA_TYPE_FLOAT32,
                                                 data=b"abc"))
            bad.value.CopyFrom(bad.key)
            with self.assertRaises(grpc.RpcError) as e:
                c.channel.unary_unary("/attention.v1.SessionService/Extend")(
                    req.SerializeToString(), timeout=30)
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("steps[1] (session 'dup'): a session may appear once",
                          e.exception.details())

    def test_a_long_prefill_stays_within_the_request_memory(self):
        hkv, d, held, rows = 4, 128, 65536, 65
        port = self.serve("--kv-cache-mb", "512", "--max-request-memory-mb", "64")
        rng = np.random.default_rng(7)
        # Small integers over 32: exact in bfloat16, so the cache holds
        # exactly what the test keeps.
        def block(n):
            return (rng.integers(-64, 65, size=(hkv, n, d)) / 32).astype(np.float32)
        keys, values = [], []
        with AttentionClient(f"127.0.0.1:{port}", timeout=120) as c:
            s = c.create_session(1, hkv, d, cache_dtype="bfloat16", session_id="verify")
            for _ in range(held // 8192):
                k, v = block(8192), block(8192)
                s.extend(0, None, k, v)
                keys.append(k)
                values.append(v)
            q, k, v = block(rows), block(rows), block(rows)
            keys.append(k)
            values.append(v)
            reset = reset_peak(self.proc.pid)
            before = rss_mib(self.proc.pid, "VmHWM" if reset else "VmRSS")
            out = s.extend(0, q, k, v).output
            grown = rss_mib(self.proc.pid, "VmHWM") - before
            self.assertEqual(s.info().layer_tokens, [held + rows])
        print(f"{rows} rows over {held + rows} bfloat16 tokens x {hkv} heads: VmHWM grew "
              f"{grown:.1f} MiB (a float32 copy of the layer would be "
              f"{2 * hkv * (held + rows) * d * 4 / MIB:.0f} MiB)")
        self.assertLess(grown, 64 + 48)
        K, V = np.concatenate(keys, axis=1), np.concatenate(values, axis=1)
        total = held + rows
        for h in range(hkv):
            kh, vh = K[h].astype(np.float64), V[h].astype(np.float64)
            scores = q[h].astype(np.float64) @ kh.T / np.sqrt(d)  # [rows, total]
            pos = held + np.arange(rows)[:, None]  # bottom-right causal
            scores[np.arange(total)[None, :] > pos] = -np.inf
            scores -= scores.max(axis=1, keepdims=True)
            w = np.exp(scores)
            want = (w / w.sum(axis=1, keepdims=True)) @ vh
            np.testing.assert_allclose(out[h], want, rtol=0, atol=2e-5, err_msg=f"head {h}")


if __name__ == "__main__":
    unittest.main()
