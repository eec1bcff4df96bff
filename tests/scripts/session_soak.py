#!/usr/bin/env python3
"""Session soak (issue 25): random create / extend / fork / truncate / delete
across 200 sessions for SECONDS against a real attention-server with a small
pool (--kv-cache-mb 8, so that it fills), 4 client threads, each owning 50 sessions:

  - every Extend result is checked against a float64 replay of its session
    (one-shot attention over the tokens the layer holds, rounded to the
    cache's type), with GQA, windows and sinks drawn at random;
  - every step carries its layer's count (the session handles send
    expected_tokens); a random 5% of the steps that append are sent again
    as if their answer had been lost: each must be a replay (the layer's
    count unchanged) whose answer matches the same float64 replay;
  - the only codes allowed are OK and, when the pool is full,
    RESOURCE_EXHAUSTED (then the thread deletes a session and goes on);
  - the server's RSS at the end stays within its RSS after start-up plus the
    pool plus 64 MiB (docs/testing.md), and with every session deleted the
    pool reports 0 bytes used.

    session_soak.py SERVER_BIN [SECONDS]      (PYTHONPATH: the stubs and client/python)
"""
import random
import re
import subprocess
import sys
import threading
import time

import numpy as np

import attention_client as ac
from attention_client import AttentionClient

POOL_MB, MARGIN_MB = 8, 64


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def round_to(x, t, fmt=None):
    """What a side of a `t` cache stored as `fmt` (None, "int8", or "int4"
    for values) keeps of x [Hkv, n, D]: float64 models of the server's
    quantizers. int8: per kv head and token, codes round-half-even(x / f)
    with f = max|x| / 127. int4 values: per token in groups of 64 channels,
    codes round-half-even((x - min) / s) in [0, 15] with s = (max - min) / 15,
    held as min + code * s in float32."""
    if fmt == "int4":
        x = np.asarray(x, np.float32)
        out = np.empty_like(x)
        for g0 in range(0, x.shape[-1], 64):
            part = x[..., g0:g0 + 64].astype(np.float64)
            lo = part.min(axis=-1, keepdims=True)
            s = ((part.max(axis=-1, keepdims=True) - lo) / 15.0).astype(np.float32).astype(np.float64)
            code = np.clip(np.rint(np.divide(part - lo, s, out=np.zeros_like(part), where=s > 0)),
                           0, 15)
            out[..., g0:g0 + 64] = (lo + code * s).astype(np.float32)
        return out
    if fmt == "int8":
        x = np.asarray(x, np.float64)
        f = (np.abs(x).max(axis=-1, keepdims=True) / 127.0).astype(np.float32).astype(np.float64)
        q = np.clip(np.rint(np.divide(x, f, out=np.zeros_like(x), where=f > 0)), -127, 127)
        return (q * f).astype(np.float32)
    if t == "bfloat16":
        return ac.bf16_to_float32(ac.bf16_bits(np.asarray(x, np.float32)))
    if t == "float16":
        return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)
    return np.asarray(x, np.float32)


def reference(q, k, v, causal, wl, sinks):
    hq, n, d = q.shape
    k, v = (np.repeat(np.asarray(x, np.float64), hq // x.shape[0], axis=0) for x in (k, v))
    L = k.shape[1]
    s = np.asarray(q, np.float64) @ k.transpose(0, 2, 1) / np.sqrt(d)
    pos = np.arange(n)[:, None] + L - n
    j = np.arange(L)[None, :]
    masked = (j > pos) if causal else np.zeros((n, L), bool)
    if wl is not None:
        masked = masked | (j < pos - wl)
    s = np.where(masked, -np.inf, s)
    m = s.max(-1, keepdims=True, initial=-np.inf)
    if sinks is not None:
        m = np.maximum(m, np.asarray(sinks, np.float64)[:, None, None])
    m = np.where(np.isinf(m), 0, m)
    e = np.exp(s - m)
    tot = e.sum(-1, keepdims=True) + (0 if sinks is None else np.exp(np.asarray(sinks)[:, None, None] - m))
    return np.where(tot > 0, e / np.where(tot > 0, tot, 1), 0) @ v


class Worker(threading.Thread):
    def __init__(self, target, index, deadline, stats):
        super().__init__()
        self.target, self.index, self.deadline, self.stats = target, index, deadline, stats
        self.rng = random.Random(index)
        self.nrng = np.random.default_rng(index)
        self.sessions = {}  # id -> dict(layers, hkv, d, type, k[layer], v[layer])
        self.error = None
        self.next_id = 0

    def fresh_id(self):
        self.next_id += 1
        return f"soak-{self.index}-{self.next_id}"

    def create(self, c):
        sid = self.fresh_id()
        spec = dict(layers=self.rng.choice([1, 2]), hkv=self.rng.choice([1, 2]),
                    d=self.rng.choice([8, 16]), type=self.rng.choice(["float32", "bfloat16", "float16"]),
                    kf=self.rng.choice([None, None, "int8"]),
                    vf=self.rng.choice([None, None, "int8", "int4"]))
        spec["h"] = c.create_session(spec["layers"], spec["hkv"], spec["d"],
                                     cache_dtype=spec["type"], session_id=sid,
                                     key_format=spec["kf"], value_format=spec["vf"])
        spec["k"] = [np.zeros((spec["hkv"], 0, spec["d"]), np.float32) for _ in range(spec["layers"])]
        spec["v"] = [x.copy() for x in spec["k"]]
        self.sessions[sid] = spec

    def extend(self, c, sid):
        s = self.sessions[sid]
        layer = self.rng.randrange(s["layers"])
        hq = s["hkv"] * self.rng.choice([1, 2])
        n = self.rng.choice([0, 1, 1, 1, 3, 17, 70])
        nq = self.rng.choice([n, n, 1, 0]) if n else self.rng.choice([1, 2])
        q = self.nrng.standard_normal((hq, nq, s["d"])).astype(np.float32)
        k, v = (self.nrng.standard_normal((s["hkv"], n, s["d"])).astype(np.float32) for _ in range(2))
        causal = self.rng.random() < 0.8
        wl = self.rng.choice([None, None, 4])
        sinks = self.nrng.standard_normal(hq).astype(np.float32) if self.rng.random() < 0.3 else None
        h = s["h"]

        def send():
            return h.extend(layer, q if nq else None, k if n else None, v if n else None,
                            causal=causal, window=(wl, None) if wl is not None else None,
                            sink_logits=sinks)
        results = [send()]
        s["k"][layer] = np.concatenate([s["k"][layer], round_to(k, s["type"], s["kf"])], 1)
        s["v"][layer] = np.concatenate([s["v"][layer], round_to(v, s["type"], s["vf"])], 1)
        if n and self.rng.random() < 0.05:
            h._tokens[layer] -= n  # the answer was lost: the engine sends the step again
            results.append(send())
            held = h.info().layer_tokens[layer]
            assert held == s["k"][layer].shape[1], f"{sid} layer {layer}: a retry appended"
            self.stats["replayed"] += 1
        if nq:
            want = reference(q, s["k"][layer], s["v"][layer], causal, wl, sinks)
            # int8 sides: the query (keys) or the weights (values) rounded to int16
            tol = 5e-4 if "int8" in (s["kf"], s["vf"]) else 1e-4
            for r in results:
                np.testing.assert_allclose(r.output, want, rtol=tol, atol=tol,
                                           err_msg=f"session {sid} layer {layer}")
            self.stats["checked"] += 1

    def op(self, c):
        if len(self.sessions) < 5 or (len(self.sessions) < 50 and self.rng.random() < 0.1):
            self.create(c)
            return "create"
        sid = self.rng.choice(sorted(self.sessions))
        x = self.rng.random()
        if x < 0.75:
            self.extend(c, sid)
            return "extend"
        if x < 0.85 and len(self.sessions) < 50:
            child = sid.split(":")[0] + ":" + self.fresh_id()  # a child stays in its family
            s = self.sessions[sid]
            self.sessions[child] = dict(s, k=list(s["k"]), v=list(s["v"]),
                                        h=s["h"].fork(child))
            return "fork"
        if x < 0.93:
            s = self.sessions[sid]
            tokens = self.rng.randrange(0, max(1, max(k.shape[1] for k in s["k"])) + 1)
            info = s["h"].truncate(tokens)
            s["k"] = [k[:, :tokens] for k in s["k"]]
            s["v"] = [v[:, :tokens] for v in s["v"]]
            assert info.layer_tokens == [k.shape[1] for k in s["k"]], (info, sid)
            return "truncate"
        c.session(sid).delete()
        del self.sessions[sid]
        return "delete"

    def run(self):
        try:
            with AttentionClient(self.target, timeout=30) as c:
                while time.monotonic() < self.deadline:
                    try:
                        name = self.op(c)
                        self.stats[name] += 1
                    except ac.ResourceExhausted as e:
                        assert "kv cache pool" in e.details() or "max_tokens" in e.details(), e.details()
                        self.stats["pool_full"] += 1
                        victim = self.rng.choice(sorted(self.sessions))
                        c.session(victim).delete()
                        del self.sessions[victim]
                for sid in list(self.sessions):
                    c.session(sid).delete()
        except BaseException as e:  # noqa: BLE001: reported by the main thread
            self.error = e


def main():
    server, seconds = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 60
    proc = subprocess.Popen([server, "--host", "127.0.0.1", "--port", "0", "--log-level", "info",
                             "--kv-cache-mb", str(POOL_MB), "--max-sessions", "256"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = None
    for _ in range(200):
        line = proc.stdout.readline()
        m = re.search(r"listening on [\d.]+:(\d+)", line)
        port = int(m.group(1)) if m else port
        if "SERVING" in line or not line:
            break
    # Keep reading what the server writes, so that its pipe never fills.
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    try:
        assert port, "attention-server did not start"
        time.sleep(0.5)
        start_kb = rss_kb(proc.pid)
        stats = {k: 0 for k in ("create", "extend", "fork", "truncate", "delete", "pool_full",
                                "checked", "replayed")}
        deadline = time.monotonic() + seconds
        workers = [Worker(f"127.0.0.1:{port}", i, deadline, stats) for i in range(4)]
        for w in workers:
            w.start()
        peak = start_kb
        while any(w.is_alive() for w in workers):
            time.sleep(1)
            peak = max(peak, rss_kb(proc.pid))
            assert time.monotonic() < deadline + 120, "the soak ran 120 s past its time"
        for w in workers:
            if w.error:
                raise w.error
        end_kb = rss_kb(proc.pid)
        with AttentionClient(f"127.0.0.1:{port}") as c:
            listed = c.list_sessions()
        print(f"session soak {seconds:.0f} s: " + ", ".join(f"{k} {v}" for k, v in stats.items()))
        print(f"RSS: {start_kb // 1024} MiB after start-up, peak {peak // 1024} MiB, end "
              f"{end_kb // 1024} MiB (bound: start + {POOL_MB} MiB pool + {MARGIN_MB} MiB)")
        assert stats["checked"] > 100, "too few results checked"
        assert stats["replayed"] > 0, "no step was retried"
        assert listed.sessions == [] and listed.cache_bytes_used == 0, listed
        assert peak <= start_kb + (POOL_MB + MARGIN_MB) * 1024, "RSS past the pool and the margin"
        print("PASS: every result equal to its replay, no unexpected code, RSS within bounds")
    finally:
        proc.terminate()
        proc.wait(timeout=15)


if __name__ == "__main__":
    main()
