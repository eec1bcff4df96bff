#!/usr/bin/env python3
"""A 1-token Session.extend from Python against the C++ client's step, side
by side on one server: the same session shape, the same cache length (each
step is followed by an untimed truncate back to the prefill, as the C++
bench's --hold-length does), rounds alternating between the two clients so
that both see the same phases of the machine. Then where Python's time
goes, each part timed alone: encoding the request, the gRPC call of those
bytes with no client code around it, decoding the answer.

    tests/bench/python_step_bench.py BUILD_DIR [--rounds 5] [--seconds 4]
        [--target HOST:PORT] [--prefill 128] [--json FILE]

Without --target it starts BUILD_DIR/bin/attention-server on 127.0.0.1
(--threads 2). Run it with /usr/bin/python3 (Debian's grpcio and numpy);
it imports the client from client/python and the stubs BUILD_DIR makes.
The bench is the measurement; nothing here is a pass/fail bound."""
import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

SHAPE = dict(num_heads=32, num_kv_heads=8, dim=128)  # Llama-3-8B's attention


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpp_round(client_bin, target, prefill, seconds):
    """The C++ client's step p50 (ms) over one round of `bench --op decode`."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([client_bin, "bench", "--op", "decode", "--target", target,
                        "--sessions", "1", "--prefill", str(prefill), "--hold-length",
                        "--num-heads", str(SHAPE["num_heads"]),
                        "--num-kv-heads", str(SHAPE["num_kv_heads"]), "--dim", str(SHAPE["dim"]),
                        "--cache-dtype", "bfloat16", "--duration", f"{seconds}s",
                        "--warmup", "500ms", "--json", out.name],
                       check=True, capture_output=True, timeout=120 + seconds)
        return json.load(open(out.name))["step_p50_ms"]


def python_round(client, prefill, seconds, rng):
    """Over one round, alternating call by call: Session.extend's p50 (ms),
    and the p50 of grpcio's bare call of the same request's bytes (no
    client code around it: the floor of any Python client on grpcio)."""
    from attention_client import sessions as ss
    hq, hkv, d = SHAPE["num_heads"], SHAPE["num_kv_heads"], SHAPE["dim"]
    with client.create_session(1, hkv, d, cache_dtype="bfloat16") as s:
        k0 = rng.standard_normal((hkv, prefill, d)).astype(np.float32)
        s.extend(0, None, k0, k0)
        q = rng.standard_normal((hq, 1, d)).astype(np.float32)
        k = rng.standard_normal((hkv, 1, d)).astype(np.float32)
        payload, _, sid = ss.extend_request(0, [(s, q, k, k)], causal=True, window=None,
                                            alibi_slopes=None, softcap=None, sink_logits=None,
                                            scale=None, return_lse=False, compute_precision=None)
        metadata = ss._metadata(client._metadata, sid)
        full, bare = [], []
        end, warm = time.monotonic() + seconds + 0.5, time.monotonic() + 0.5
        while time.monotonic() < end:
            t0 = time.perf_counter()
            s.extend(0, q, k, k)
            t1 = time.perf_counter()
            s.truncate(prefill)
            t2 = time.perf_counter()
            client._extend(payload, timeout=client.timeout, metadata=metadata)
            t3 = time.perf_counter()
            s.truncate(prefill)
            if time.monotonic() >= warm:
                full.append(t1 - t0)
                bare.append(t3 - t2)
    return float(np.median(full)) * 1e3, float(np.median(bare)) * 1e3, len(full)


def breakdown(client, prefill, rng, n=2000):
    """Python's parts, each alone: µs per call."""
    from attention_client import sessions as ss
    hq, hkv, d = SHAPE["num_heads"], SHAPE["num_kv_heads"], SHAPE["dim"]
    q = rng.standard_normal((hq, 1, d)).astype(np.float32)
    k = rng.standard_normal((hkv, 1, d)).astype(np.float32)

    def per_call(f, count=n):
        for _ in range(100):
            f()
        t0 = time.perf_counter()
        for _ in range(count):
            f()
        return (time.perf_counter() - t0) / count * 1e6

    with client.create_session(1, hkv, d, cache_dtype="bfloat16") as s:
        k0 = rng.standard_normal((hkv, prefill, d)).astype(np.float32)
        s.extend(0, None, k0, k0)
        encode = lambda: ss.extend_request(0, [(s, q, k, k)], causal=True, window=None,  # noqa
                                           alibi_slopes=None, softcap=None, sink_logits=None,
                                           scale=None, return_lse=False, compute_precision=None)
        payload, kinds, sid = encode()
        metadata = ss._metadata(client._metadata, sid)
        answer = client._extend(payload, timeout=30, metadata=metadata)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            client._extend(payload, timeout=30, metadata=metadata)
            times.append(time.perf_counter() - t0)
            s.truncate(prefill)
        return {"encode_us": per_call(encode),
                "metadata_us": per_call(lambda: ss._metadata(client._metadata, sid)),
                "grpc_call_p50_us": float(np.median(times)) * 1e6,
                "decode_us": per_call(lambda: ss.extend_results(answer, kinds, False))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--prefill", type=int, default=128)
    ap.add_argument("--target")
    ap.add_argument("--json")
    a = ap.parse_args()
    sys.path[:0] = [os.path.join(a.build, "tests", "client", "python-stubs"),
                    os.path.join(ROOT, "client", "python")]
    from attention_client import AttentionClient
    client_bin = os.path.join(a.build, "bin", "attention-client")
    server = None
    target = a.target
    if target is None:
        port = free_port()
        target = f"127.0.0.1:{port}"
        server = subprocess.Popen([os.path.join(a.build, "bin", "attention-server"), "--host",
                                   "127.0.0.1", "--port", str(port), "--threads", "2"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = AttentionClient(target)
        deadline = time.monotonic() + 30
        while True:
            try:
                if client.health() == "SERVING":
                    break
            except Exception:  # not listening yet
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the server did not start")
            time.sleep(0.1)
        rng = np.random.default_rng(0)
        cpp, py, bare = [], [], []
        for r in range(a.rounds):  # alternating, so both see the same phases
            cpp.append(cpp_round(client_bin, target, a.prefill, a.seconds))
            p50, floor, count = python_round(client, a.prefill, a.seconds, rng)
            py.append(p50)
            bare.append(floor)
            print(f"round {r + 1}: C++ {cpp[-1]:.3f} ms, Python {py[-1]:.3f} ms ({count} steps; "
                  f"grpcio's bare call {floor:.3f} ms), Python / C++ {py[-1] / cpp[-1]:.2f}",
                  flush=True)
        parts = breakdown(client, a.prefill, rng)
        cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                    if l.startswith("model name")), platform.processor())
        result = {"cpu": cpu, "target": target, "prefill": a.prefill, **SHAPE,
                  "cpp_p50_ms": float(np.median(cpp)), "python_p50_ms": float(np.median(py)),
                  "ratio": float(np.median(py) / np.median(cpp)),
                  "grpcio_bare_p50_ms": float(np.median(bare)),
                  "grpcio_bare_ratio": float(np.median(bare) / np.median(cpp)),
                  "rounds_cpp_ms": cpp, "rounds_python_ms": py, "rounds_grpcio_bare_ms": bare,
                  **parts}
        print(f"medians of {a.rounds} rounds: C++ {result['cpp_p50_ms']:.3f} ms, Python "
              f"{result['python_p50_ms']:.3f} ms: Python / C++ {result['ratio']:.2f}; grpcio's "
              f"bare call {result['grpcio_bare_p50_ms']:.3f} ms, / C++ "
              f"{result['grpcio_bare_ratio']:.2f}")
        print("Python's parts, each alone: encode {encode_us:.1f} us, metadata {metadata_us:.2f} "
              "us, the gRPC call of those bytes p50 {grpc_call_p50_us:.1f} us, decode "
              "{decode_us:.1f} us".format(**parts))
        print(f"CPU: {cpu}")
        if a.json:
            json.dump(result, open(a.json, "w"), indent=1)
        client.close()
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
