#!/usr/bin/python3
"""Checks a running server that serves tests/golden/models (as its
--model-dir): health, ListModels lists exactly those models, and every
PyTorch golden case (tests/golden/cases) within 1e-5. Used by
deploy/kube_test.sh, where the models come from the pod's volume.

    PYTHONPATH=STUBS:client/python:tests/client/python \
      /usr/bin/python3 tests/client/python/check_goldens.py HOST:PORT GOLDEN_DIR
"""
import os
import sys

import numpy as np

from attention_client import AttentionClient
from goldens import call_case, max_error, read_safetensors


def main():
    target, golden = sys.argv[1], sys.argv[2]
    models = sorted(f[:-len(".safetensors")] for f in os.listdir(os.path.join(golden, "models")))
    cases = sorted(f[:-len(".safetensors")] for f in os.listdir(os.path.join(golden, "cases")))
    failures = []
    with AttentionClient(target) as c:
        assert c.health() == "SERVING"
        served = sorted(m["name"] for m in c.list_models())
        assert served == models, f"ListModels: {served}, expected {models}"
        print(f"ListModels: the {len(served)} models of the volume")
        for name in cases:
            meta, t = read_safetensors(os.path.join(golden, "cases", name + ".safetensors"))
            out, w = call_case(c, name, meta, t)
            want = t["expected_output"]
            err = max_error(out, want, np.abs(want).max())
            if meta["need_weights"] == "1":
                err = max(err, max_error(w, t["expected_weights"], 1e-6))
            print(f"{meta['op']:5} {name}: max relative error {err:.2e}")
            if not err <= 1e-5:
                failures.append(name)
    if failures:
        sys.exit(f"FAIL: {failures} differ from the PyTorch goldens")
    print(f"all {len(cases)} PyTorch golden cases within 1e-5")


if __name__ == "__main__":
    main()
