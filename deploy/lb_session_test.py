#!/usr/bin/env python3
"""KV-cache sessions through nginx (deploy/nginx/nginx.conf) in front of two
replicas, run by deploy/lb_test.sh: 50 sessions are created and stepped
through the balancer, every answer checked against float64 one-shot
attention, none NOT_FOUND (the x-attn-session hash keeps each session on its
replica). Then the second replica is killed: its sessions get NOT_FOUND or
UNAVAILABLE with the clear message, and the first replica's go on without
an error.

    lb_session_test.py LB_TARGET REPLICA1_TARGET REPLICA2_TARGET REPLICA2_PID
"""
import os
import signal
import sys
import time

import numpy as np

import attention_client as ac
from attention_client import AttentionClient

HQ, HKV, D = 4, 2, 16


def reference(q, k, v):
    """Bottom-right causal GQA in float64: q [Hq, n, D], k/v [Hkv, L, D]."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    k, v = (np.repeat(x, HQ // HKV, axis=0) for x in (k, v))
    n, L = q.shape[1], k.shape[1]
    s = q @ k.transpose(0, 2, 1) / np.sqrt(D)
    pos = np.arange(n)[:, None] + L - n
    s = np.where(np.arange(L)[None, :] > pos, -np.inf, s)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


def main():
    lb, r1, r2, pid2 = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    rng = np.random.default_rng(0)
    ids = [f"lb-{i}" for i in range(50)]
    keys = {i: np.zeros((HKV, 0, D), np.float32) for i in ids}
    values = dict(keys)

    def step(c, sid, n):
        q = rng.standard_normal((HQ, n, D)).astype(np.float32)
        k, v = (rng.standard_normal((HKV, n, D)).astype(np.float32) for _ in range(2))
        out = c.session(sid).extend(0, q, k, v).output
        keys[sid] = np.concatenate([keys[sid], k], 1)
        values[sid] = np.concatenate([values[sid], v], 1)
        np.testing.assert_allclose(out, reference(q, keys[sid], values[sid]), rtol=1e-5, atol=1e-5)

    with AttentionClient(lb, timeout=30) as c:
        for sid in ids:
            c.create_session(1, HKV, D, session_id=sid)
        for n in [8, 1, 1, 1, 1, 1]:
            for sid in ids:
                step(c, sid, n)  # any error, NOT_FOUND included, fails the test
    # Where each session lives, asked of each replica directly.
    held = {}
    for name, target in (("replica 1", r1), ("replica 2", r2)):
        with AttentionClient(target) as c:
            held[name] = {s.session_id for s in c.list_sessions().sessions}
    on1, on2 = held["replica 1"] & set(ids), held["replica 2"] & set(ids)
    print(f"sessions: {len(on1)} on replica 1, {len(on2)} on replica 2; each stepped 6 times "
          "through nginx, every answer right")
    assert on1 | on2 == set(ids) and not on1 & on2, "every session on exactly one replica"
    assert on1 and on2, "the hash spread the sessions over both replicas"
    os.kill(pid2, signal.SIGKILL)
    time.sleep(0.5)
    lost_codes = {}
    with AttentionClient(lb, timeout=30) as c:
        for sid in ids:
            if sid in on1:
                step(c, sid, 1)  # must go on without an error
                continue
            try:
                step(c, sid, 1)
                raise AssertionError(f"{sid} answered after its replica was killed")
            except (ac.NotFound, ac.Unavailable) as e:
                lost_codes[type(e).__name__] = lost_codes.get(type(e).__name__, 0) + 1
                if isinstance(e, ac.NotFound):
                    assert "lost in a server restart" in e.details() and sid in e.details(), e.details()
    print(f"after killing replica 2: its {len(on2)} sessions got {lost_codes}; replica 1's "
          f"{len(on1)} went on without an error")
    print("PASS: sessions stay on their replica through nginx; a lost replica's sessions "
          "say so, the others go on")


if __name__ == "__main__":
    main()
