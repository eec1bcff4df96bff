// Row kernels of the online (blocked) softmax. Internal to core.
//
// Three tiers, chosen once at run time (attn/cpu_info.h): AVX-512 and
// AVX2 + FMA versions with a vectorized polynomial exp (range-reduced,
// within 4e-7 relative above FLT_MIN; below it 0 or the subnormal; AVX2's
// softmax passes use the shorter ExpNonPositive256 of vec_math.h), and a
// portable version using std::exp. Each tier is
// compiled with a target attribute, so the shipped binary needs no
// -march=native and runs on every x86-64 CPU.
#pragma once

#include <cstdint>

#include "attn/cpu_info.h"

namespace attn::internal {

// One score block of the online softmax (blocked_attention.cc), for rows
// whose scores need only the scale. Row r (of `rows`) is s[r * kn, ...)
// and sees keys [a, e) of the block, a = clamp(lo[r] - k0, 0, kn) and
// e = clamp(hi[r] - k0, a, kn). With m[r], l[r] its running max and sum:
//   m_new = max(m[r], max over [a, e) of s * scale) (NaN if any is NaN);
//   s becomes exp(s * scale - m_new) on [a, e) and 0 elsewhere;
//   alpha = exp(m[r] - m_new) (0 for a row's first keys); l[r] = l[r] * alpha
//   + sum; m[r] = m_new; and the row's accumulated output o[r * dv, ...) is
//   multiplied by alpha (set to 0 when alpha is 0).
// A row that has seen no unmasked key yet keeps m = -inf, l = 0, its s = 0
// and its o. The AVX2 and AVX-512 steps may keep m_new = m[r] (alpha 1,
// exps up to e^reach) for a row with a finite m[r] whose block's scores
// reach at most `reach` above it: 1, or 8 where the AVX-512 exp pass writes
// p16 itself (online_block.cc, the lazy step); the normalisation and the
// lse (m + log l) are the same either way.
// With p16 set (a bf16 problem), P also goes to p16[r * kn, ...), 0 outside
// [a, e), each value rounded to bf16 to nearest even; l still sums the
// float32 values. Where Bf16MatrixTier() is set, the AVX-512 step writes
// p16 from its exp pass (VCVTNE2PS2BF16, which makes values below FLT_MIN
// 0) and leaves s as scratch; the other steps round s's row.
struct OnlineBlock {
  float* s;
  int64_t kn, rows;
  const int64_t *lo, *hi;
  int64_t k0;
  float scale;
  float *m, *l;
  float* o;
  int64_t dv;
  uint16_t* p16 = nullptr;
};

struct SoftmaxKernels {
  // max over i < n of x[i] * scale; -inf when n == 0; NaN if any is NaN.
  float (*scaled_max)(const float* x, int64_t n, float scale);
  // x[i] = exp(x[i] * scale - m) for i < n; returns the sum. A masked score
  // (-inf) gives exactly 0; NaN propagates.
  float (*exp_sum)(float* x, int64_t n, float scale, float m);
  // x[i] *= a for i < n.
  void (*scale)(float* x, int64_t n, float a);
  // x[i] = x[i] * a + bias[i] for i < n (a contiguous additive mask row).
  void (*scale_add)(float* x, int64_t n, float a, const float* bias);
  // Logit softcapping: x[i] = cap * tanh(x[i] * scale / cap), within 2 ulp
  // of tanh (a short series near 0, 1 - 2 / (exp(2y) + 1) beyond); NaN
  // propagates, +-inf give +-cap.
  void (*softcap)(float* x, int64_t n, float scale, float cap);
  // ALiBi: x[j] -= slope * |pos - (k0 + j)| for j < n, the distance
  // converted to float exactly as static_cast<float> of the integer.
  void (*alibi)(float* x, int64_t n, float slope, int64_t pos, int64_t k0);
  // The block step above, every row in one call.
  void (*online_block)(const OnlineBlock& blk);
  // The decode kernel's fused passes over a row of raw dot products, f
  // being a quantized side's per-token factors (null: none). times_max:
  // x[i] = x[i] * f[i] * a (f null: x[i] * a), rounded after each product,
  // and returns the max as scaled_max does. exp_sum_times: x[i] = exp(x[i] -
  // m) * f[i] (f null: exp(x[i] - m)), and returns the sum of the exps
  // before their factors. Each result equals the separate passes'.
  float (*times_max)(float* x, int64_t n, float a, const float* f);
  float (*exp_sum_times)(float* x, int64_t n, float m, const float* f);
  IsaTier tier;
};

// The kernels of KernelTier().
const SoftmaxKernels& GetSoftmaxKernels();

// The kernels of one tier, for tests that compare tiers on one machine.
// Returns null when the CPU cannot run that tier.
const SoftmaxKernels* SoftmaxKernelsFor(IsaTier tier);

}  // namespace attn::internal
