#!/usr/bin/env python3
"""Fits the polynomial of ExpNonPositive256 (core/src/kernels/simd/vec_math.h)
and checks the whole float32 exp against float64.

e^r on the reduced range [-ln2/2, ln2/2] is 1 + r q(r), q of degree 4,
minimax for the relative error by Lawson's algorithm (iteratively reweighted
least squares). The check then runs the kernel's steps in float32 with
float64-emulated FMAs (round once per fused step): n = round(x log2 e),
r = x - n C1 - n C2 (Cody-Waite), Horner, times 2^n, over x in [-87.3, 88].

  /usr/bin/python3 tests/scripts/fit_exp_poly.py
"""
import numpy as np

HALF_LN2 = np.log(2) / 2


def fit(degree=5, iterations=300):
    x = np.linspace(-HALF_LN2 * 1.0001, HALF_LN2 * 1.0001, 40001)
    x = x[x != 0]
    f = np.exp(x)
    v = np.vander(x, degree + 1, increasing=True)[:, 1:]  # r^1 .. r^degree; r^0 is 1
    w = np.ones_like(x)
    for _ in range(iterations):
        sw = np.sqrt(w) / f
        c, *_ = np.linalg.lstsq(v * sw[:, None], (f - 1) * sw, rcond=None)
        err = np.abs(1 + v @ c - f) / f
        w = w * err
        w /= w.sum()
    return [float(np.float32(ci)) for ci in c], float(err.max())


def fma32(a, b, c):
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


def check(coeffs):
    x = np.concatenate([np.linspace(-87.3, 0, 2000001), -np.logspace(-8, 0, 100001),
                        np.linspace(0, 88, 100001)]).astype(np.float32)
    n = np.round((x * np.float32(1.44269504088896341)).astype(np.float32))
    r = fma32(-n, np.full_like(x, 0.693359375), x)
    r = fma32(-n, np.full_like(x, -2.12194440e-4), r)
    c = np.array([1.0] + coeffs, dtype=np.float32)
    p = np.full_like(x, c[-1])
    for k in range(len(c) - 2, -1, -1):
        p = fma32(p, r, np.full_like(x, c[k]))
    got = (p.astype(np.float64) * np.exp2(n.astype(np.float64))).astype(np.float32)
    want = np.exp(x.astype(np.float64))
    rel = np.abs(got - want) / want
    return float(rel.max()), float(x[rel.argmax()]), float(got[x == 0][0])


if __name__ == "__main__":
    coeffs, exact_err = fit()
    print("coefficients r^1..r^5:", ", ".join("%.9g" % c for c in coeffs))
    print("relative error, exact arithmetic: %.3g" % exact_err)
    worst, at, one = check(coeffs)
    print("relative error, float32 kernel steps: %.3g (at x = %g); exp(0) = %r" % (worst, at, one))
