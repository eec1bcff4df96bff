#!/usr/bin/env python3
"""KV-cache session families through nginx (deploy/nginx/nginx.conf) in
front of three replicas, run by deploy/lb_test.sh.

30 families: 10 created without an id (the client names them, "s-<hex>"),
20 with the caller's id; each root forked twice (one child named by the
caller in the family, "root:b1", one named by the client). Every member is
prefilled and stepped through the balancer, each answer checked against
float64 attention; none may be NOT_FOUND (nginx hashes the family: the id
before its first ':'). Each replica is then asked directly what it holds:
every family on exactly one replica. The replica of REPLICA_TO_KILL is
killed, and every member stepped again: whole families are lost (NotFound
or Unavailable, with the clear message), and nothing else is.

    lb_session_test.py LB_TARGET KILL_INDEX REPLICA_TARGET:PID...
"""
import os
import signal
import sys
import time

import numpy as np

import attention_client as ac
from attention_client import AttentionClient

HQ, HKV, D = 4, 2, 16
FAMILIES, CLIENT_NAMED = 30, 10


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
    lb, kill_index = sys.argv[1], int(sys.argv[2])
    replicas = [(t.rsplit(":", 1)[0], int(t.rsplit(":", 1)[1])) for t in sys.argv[3:]]
    rng = np.random.default_rng(0)
    family_of, sessions, keys, values = {}, {}, {}, {}

    def step(sid, n):
        q = rng.standard_normal((HQ, n, D)).astype(np.float32)
        k, v = (rng.standard_normal((HKV, n, D)).astype(np.float32) for _ in range(2))
        out = sessions[sid].extend(0, q, k, v).output
        keys[sid] = np.concatenate([keys[sid], k], 1)
        values[sid] = np.concatenate([values[sid], v], 1)
        np.testing.assert_allclose(out, reference(q, keys[sid], values[sid]), rtol=1e-5,
                                   atol=1e-5, err_msg=sid)

    def add(s, family, like=None):
        sessions[s.id] = s
        family_of[s.id] = family
        keys[s.id] = keys[like] if like else np.zeros((HKV, 0, D), np.float32)
        values[s.id] = values[like] if like else np.zeros((HKV, 0, D), np.float32)

    with AttentionClient(lb, timeout=30, retry=True) as c:
        for i in range(FAMILIES):
            root = c.create_session(1, HKV, D, session_id=None if i < CLIENT_NAMED else f"fam-{i}")
            add(root, i)
            step(root.id, 8)  # any error, NOT_FOUND included, fails the test
            add(root.fork(f"{root.id}:b1"), i, root.id)
            add(root.fork(), i, root.id)  # the client names it in the family
        for n in [1, 1, 1]:
            for sid in sessions:
                step(sid, n)
        assert all(sid.startswith("s-") for sid, f in family_of.items() if f < CLIENT_NAMED)
        # Where each session lives, asked of each replica directly.
        where = {}
        for r, (target, _) in enumerate(replicas):
            with AttentionClient(target) as direct:
                for s in direct.list_sessions().sessions:
                    assert s.session_id not in where, f"{s.session_id} on two replicas"
                    where[s.session_id] = r
        assert set(where) == set(sessions), "every member on some replica"
        home = {}
        for sid, f in family_of.items():
            assert home.setdefault(f, where[sid]) == where[sid], f"family {f} split over replicas"
        counts = [sum(1 for h in home.values() if h == r) for r in range(len(replicas))]
        print(f"{FAMILIES} families ({CLIENT_NAMED} named by the client), {len(sessions)} "
              f"sessions, each stepped 4 times through nginx, every answer right; families "
              f"per replica {counts}")
        assert all(counts), "the hash spread the families over every replica"

        os.kill(replicas[kill_index][1], signal.SIGKILL)
        time.sleep(0.5)
        lost, kept = set(), set()
        for sid in sessions:
            try:
                step(sid, 1)
                kept.add(family_of[sid])
            except (ac.NotFound, ac.Unavailable) as e:
                lost.add(family_of[sid])
                if isinstance(e, ac.NotFound):
                    assert "lost in a server restart" in e.details() and sid in e.details(), \
                        e.details()
        doomed = {f for f, r in home.items() if r == kill_index}
        assert lost == doomed, f"lost families {sorted(lost)}, expected {sorted(doomed)}"
        assert not lost & kept, f"families partly lost: {sorted(lost & kept)}"
    print(f"after killing replica {kill_index + 1}: its {len(doomed)} families lost whole, "
          f"the other {len(kept)} went on without an error")
    print("PASS: every session, fork and client-named one reachable through nginx; a killed "
          "replica loses whole families and nothing else")


if __name__ == "__main__":
    main()
