// Internal to core: the vector exp, reductions and row passes (max, exp
// and sum, scale) that the per-row kernels (softmax_kernels.cc) and the
// online block step (online_block.cc) share. Each is compiled for its ISA
// with a target attribute (support/simd.h).
#pragma once

#include <cstdint>
#include <limits>

#include "support/simd.h"

namespace attn::internal {

// The range reduction of the AVX2 exps: x = n ln2 + r with n an integer
// (round to nearest) and |r| <= ln2/2, ln2 in two parts (Cody-Waite) so
// that r is exact to float rounding.
ATTN_AVX2 inline __m256 ExpReduce256(__m256 x, __m256* n) {
  *n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_fnmadd_ps(*n, _mm256_set1_ps(0.693359375f), x);
  return _mm256_fnmadd_ps(*n, _mm256_set1_ps(-2.12194440e-4f), r);
}

// 2^n for integral n in [-127, 127], built in the exponent field (0 for -127).
ATTN_AVX2 inline __m256 Pow2Int256(__m256 n) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}

// c[0] r^(N-1) + ... + c[N-1] by Horner's rule.
template <int N>
ATTN_AVX2 inline __m256 Horner256(__m256 r, const float (&c)[N]) {
  __m256 p = _mm256_set1_ps(c[0]);
  for (int i = 1; i < N; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c[i]));
  return p;
}

// e^r on [-ln2/2, ln2/2] for Exp256 and Exp512: 1 + r + r^2 p(r), p of
// degree 5.
constexpr float kExpC[] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                           4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
// For the ExpNonPositive exps: 1 + r q(r), q of degree 4 and minimax for
// the relative error (9.2e-8 in exact arithmetic; tests/scripts/fit_exp_poly.py);
// the constant 1 keeps exp(0) exactly 1.
constexpr float kExpNonPositiveC[] = {8.29029456e-3f, 4.189796e-2f,   1.66676372e-1f,
                                      4.99991506e-1f, 9.99999702e-1f, 1.0f};

// The Exp512 below with AVX2's tools: no scalef, so 2^n is built in the
// exponent field, which holds n in [-126, 127]; x is clamped to that range and
// anything whose exp is below FLT_MIN gives 0 (softmax sums are >= 1, so the
// lost subnormals do not show).
ATTN_AVX2 inline __m256 Exp256(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33654f);
  const __m256 tiny = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);  // false for NaN
  // max(c, x) and min(c, x) return x when x is NaN, so NaN propagates.
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(lo, x));
  __m256 n;
  const __m256 r = ExpReduce256(x, &n);
  const __m256 p = _mm256_fmadd_ps(Horner256(r, kExpC), _mm256_mul_ps(r, r),
                                   _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, Pow2Int256(n)));
}

// exp(x) for a softmax argument, x = score - row max <= 0 (up to the
// argument's rounding), the hot path of every softmax pass: a degree-5
// minimax polynomial on the reduced range instead of Exp256's degree 7,
// and no overflow guard (correct up to x = 88; a softmax argument never
// nears it). Relative error 1.6e-7 over [-87.3, 88] with float32 steps,
// within the 4e-7 that the kernels promise (tests/core/kernels; the fit
// and that check: tests/scripts/fit_exp_poly.py). x is clamped at -88, where n =
// -127 makes the 2^n factor 0: a masked score (-inf) gives exactly 0, as
// does any x below about -87.7; between that and FLT_MIN's -87.34 the
// result is the subnormal. NaN propagates through max(c, x) and the
// polynomial.
ATTN_AVX2 inline __m256 ExpNonPositive256(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-88.0f), x);
  __m256 n;
  const __m256 r = ExpReduce256(x, &n);
  return _mm256_mul_ps(Horner256(r, kExpNonPositiveC), Pow2Int256(n));
}

ATTN_AVX2 inline float ReduceMax256(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

ATTN_AVX2 inline float ReduceAdd256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The AVX-512 exps' range reduction, as ExpReduce256 (scalef takes 2^n
// for any n). Below -1000 the result underflows to 0 anyway; clamping keeps
// -inf from turning into NaN in the reduction. max(c, x) returns x when x
// is NaN, so NaN propagates.
ATTN_AVX512 inline __m512 ExpReduce512(__m512 x, __m512* n) {
  x = _mm512_max_ps(_mm512_set1_ps(-1000.0f), x);
  *n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmadd_ps(*n, _mm512_set1_ps(0.693359375f), x);
  return _mm512_fnmadd_ps(*n, _mm512_set1_ps(-2.12194440e-4f), r);
}

// c[0] r^(N-1) + ... + c[N-1] by Horner's rule.
template <int N>
ATTN_AVX512 inline __m512 Horner512(__m512 r, const float (&c)[N]) {
  __m512 p = _mm512_set1_ps(c[0]);
  for (int i = 1; i < N; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c[i]));
  return p;
}

ATTN_AVX512 inline __m512 Exp512(__m512 x) {
  __m512 n;
  const __m512 r = ExpReduce512(x, &n);
  const __m512 p = _mm512_fmadd_ps(Horner512(r, kExpC), _mm512_mul_ps(r, r),
                                   _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// ExpNonPositive256's degree-4 q(r) on Exp512's range reduction and scalef:
// exp(x) for x = score - row max <= 0, every AVX-512 exp pass. Within
// 4e-7 relative above FLT_MIN (the kernel tests); exp(0) is exactly 1, -inf
// gives 0, NaN propagates.
ATTN_AVX512 inline __m512 ExpNonPositive512(__m512 x) {
  __m512 n;
  const __m512 r = ExpReduce512(x, &n);
  return _mm512_scalef_ps(Horner512(r, kExpNonPositiveC), n);
}

// ---- Row passes, one per tier ---------------------------------------------
// max_j(x[j] * scale) over n floats, NaN if any product is NaN (maxps drops
// a NaN operand depending on its position, so NaN is tracked apart: a NaN
// score must give a NaN row, not a "fully masked" one); -inf for n == 0.
// Full vectors in the loops, the tail masked (AMD's masked stores are slow).

ATTN_AVX2 inline float ScaledMaxRow256(const float* x, int64_t n, float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 m0 = neg_inf, m1 = neg_inf, nan = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_mul_ps(_mm256_loadu_ps(x + i), s);
    const __m256 b = _mm256_mul_ps(_mm256_loadu_ps(x + i + 8), s);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
    m0 = _mm256_max_ps(m0, a);
    m1 = _mm256_max_ps(m1, b);
  }
  for (; i < n; i += 8) {
    const __m256i k = LaneMask256(n - i);
    __m256 a = _mm256_mul_ps(_mm256_maskload_ps(x + i, k), s);
    a = _mm256_blendv_ps(neg_inf, a, _mm256_castsi256_ps(k));
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    m0 = _mm256_max_ps(m0, a);
  }
  if (_mm256_movemask_ps(nan) != 0) return std::numeric_limits<float>::quiet_NaN();
  return ReduceMax256(_mm256_max_ps(m0, m1));
}

// x[j] = exp(x[j] * scale - m) in place; returns their sum. One
// accumulator for the two vectors of an iteration: with two, the exp's
// constants leave no register for the second, which then lives on the stack
// (a store-to-load chain through every iteration).
ATTN_AVX2 inline float ExpSumRow256(float* x, int64_t n, float scale, float m) {
  const __m256 s = _mm256_set1_ps(scale);
  const __m256 mv = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 e0 = ExpNonPositive256(_mm256_fmsub_ps(_mm256_loadu_ps(x + i), s, mv));
    const __m256 e1 = ExpNonPositive256(_mm256_fmsub_ps(_mm256_loadu_ps(x + i + 8), s, mv));
    _mm256_storeu_ps(x + i, e0);
    _mm256_storeu_ps(x + i + 8, e1);
    acc = _mm256_add_ps(acc, _mm256_add_ps(e0, e1));
  }
  for (; i < n; i += 8) {
    const __m256i k = LaneMask256(n - i);
    const __m256 e = ExpNonPositive256(_mm256_fmsub_ps(_mm256_maskload_ps(x + i, k), s, mv));
    _mm256_maskstore_ps(x + i, k, e);
    acc = _mm256_add_ps(acc, _mm256_and_ps(e, _mm256_castsi256_ps(k)));
  }
  return ReduceAdd256(acc);
}

// x[j] *= a.
ATTN_AVX2 inline void ScaleRow256(float* x, int64_t n, float a) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), av));
  for (; i < n; ++i) x[i] *= a;
}

ATTN_AVX512 inline float ScaledMaxRow512(const float* x, int64_t n, float scale) {
  const __m512 s = _mm512_set1_ps(scale);
  __m512 m0 = _mm512_set1_ps(-std::numeric_limits<float>::infinity()), m1 = m0;
  __mmask16 nan = 0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a = _mm512_mul_ps(_mm512_loadu_ps(x + i), s);
    const __m512 b = _mm512_mul_ps(_mm512_loadu_ps(x + i + 16), s);
    nan |= _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q);
    m0 = _mm512_max_ps(m0, a);
    m1 = _mm512_max_ps(m1, b);
  }
  for (; i < n; i += 16) {
    const __mmask16 k = Lanes16(n - i);
    const __m512 a = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), s);
    nan |= _mm512_mask_cmp_ps_mask(k, a, a, _CMP_UNORD_Q);
    m0 = _mm512_mask_max_ps(m0, k, m0, a);
  }
  if (nan) return std::numeric_limits<float>::quiet_NaN();
  return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

// Where ExpSumRowTo512 puts its exps: back as float32, or as bf16 bits by
// AVX512-BF16's VCVTNE2PS2BF16 / VCVTNEPS2BF16 (asm statements, so that no
// caller needs that target; run only where the CPU has it): nearest even,
// except that values below FLT_MIN become 0. The tail: its first n lanes.
ATTN_AVX512 inline void StoreExps512(float* y, __m512 e0, __m512 e1) {
  _mm512_storeu_ps(y, e0);
  _mm512_storeu_ps(y + 16, e1);
}
ATTN_AVX512 inline void StoreExps512(uint16_t* y, __m512 e0, __m512 e1) {
  __m512i bits;
  asm("vcvtne2ps2bf16 %2, %1, %0" : "=v"(bits) : "v"(e1), "v"(e0));  // e0 low, e1 high
  _mm512_storeu_si512(y, bits);
}
ATTN_AVX512 inline void StoreExpsTail512(float* y, __m512 e, int64_t n) {
  _mm512_mask_storeu_ps(y, Lanes16(n), e);
}
ATTN_AVX512 inline void StoreExpsTail512(uint16_t* y, __m512 e, int64_t n) {
  __m256i bits;
  asm("vcvtneps2bf16 %1, %0" : "=v"(bits) : "v"(e));
  alignas(32) uint16_t lanes[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), bits);
  for (int64_t j = 0; j < n && j < 16; ++j) y[j] = lanes[j];
}

// y[i] = exp(x[i] * scale - m) for i < n, y being x itself (float32) or a
// bf16 row (StoreExps512); returns the sum of the float32 exps. m is the
// row's max, so the arguments are <= 0 up to the fmsub's rounding:
// ExpNonPositive512, as ExpSumRow256 takes ExpNonPositive256.
template <typename Out>
ATTN_AVX512 inline float ExpSumRowTo512(const float* x, Out* y, int64_t n, float scale, float m) {
  const __m512 s = _mm512_set1_ps(scale);
  const __m512 mv = _mm512_set1_ps(m);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 e0 = ExpNonPositive512(_mm512_fmsub_ps(_mm512_loadu_ps(x + i), s, mv));
    const __m512 e1 = ExpNonPositive512(_mm512_fmsub_ps(_mm512_loadu_ps(x + i + 16), s, mv));
    StoreExps512(y + i, e0, e1);
    acc0 = _mm512_add_ps(acc0, e0);
    acc1 = _mm512_add_ps(acc1, e1);
  }
  for (; i < n; i += 16) {
    const __mmask16 k = Lanes16(n - i);
    const __m512 e = ExpNonPositive512(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, x + i), s, mv));
    StoreExpsTail512(y + i, e, n - i);
    acc0 = _mm512_add_ps(acc0, _mm512_maskz_mov_ps(k, e));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

ATTN_AVX512 inline float ExpSumRow512(float* x, int64_t n, float scale, float m) {
  return ExpSumRowTo512(x, x, n, scale, m);
}

ATTN_AVX512 inline void ScaleRow512(float* x, int64_t n, float a) {
  const __m512 av = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), av));
  if (i < n) {
    const __mmask16 k = Lanes16(n - i);
    _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), av));
  }
}

}  // namespace attn::internal
