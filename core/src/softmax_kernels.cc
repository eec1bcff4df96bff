#include "softmax_kernels.h"

// GCC 12 warns about _mm512_undefined_ps inside its own intrinsic headers
// (GCC bug 105593); the warnings are false positives.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cmath>
#include <cstdlib>
#include <limits>

namespace attn::internal {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// ---- Portable kernels -------------------------------------------------------

float ScaledMaxPortable(const float* x, int64_t n, float scale) {
  float m = kNegInf;
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] * scale;
    nan |= std::isnan(v);
    m = std::fmax(m, v);
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

float ExpSumPortable(float* x, int64_t n, float scale, float m) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] * scale - m);
    sum += x[i];
  }
  return sum;
}

void ScalePortable(float* x, int64_t n, float a) {
  for (int64_t i = 0; i < n; ++i) x[i] *= a;
}

// ---- AVX-512 kernels --------------------------------------------------------

#define ATTN_AVX512 __attribute__((target("avx512f")))

ATTN_AVX512 inline __m512 Exp512(__m512 x) {
  // Below -1000 the result underflows to 0 anyway; clamping keeps -inf from
  // turning into NaN in the range reduction. max(c, x) returns x when x is
  // NaN, so NaN propagates.
  x = _mm512_max_ps(_mm512_set1_ps(-1000.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

ATTN_AVX512 float ScaledMaxAvx512(const float* x, int64_t n, float scale) {
  const __m512 s = _mm512_set1_ps(scale);
  __m512 m0 = _mm512_set1_ps(kNegInf), m1 = m0;
  // maxps drops a NaN operand depending on its position, so NaN is tracked
  // separately: a NaN score must give a NaN row, not a "fully masked" one.
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
    const __mmask16 k = n - i >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 a = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), s);
    nan |= _mm512_mask_cmp_ps_mask(k, a, a, _CMP_UNORD_Q);
    m0 = _mm512_mask_max_ps(m0, k, m0, a);
  }
  if (nan) return std::numeric_limits<float>::quiet_NaN();
  return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

ATTN_AVX512 float ExpSumAvx512(float* x, int64_t n, float scale, float m) {
  const __m512 s = _mm512_set1_ps(scale);
  const __m512 mv = _mm512_set1_ps(m);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 e0 = Exp512(_mm512_fmsub_ps(_mm512_loadu_ps(x + i), s, mv));
    __m512 e1 = Exp512(_mm512_fmsub_ps(_mm512_loadu_ps(x + i + 16), s, mv));
    _mm512_storeu_ps(x + i, e0);
    _mm512_storeu_ps(x + i + 16, e1);
    acc0 = _mm512_add_ps(acc0, e0);
    acc1 = _mm512_add_ps(acc1, e1);
  }
  for (; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 e = Exp512(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, x + i), s, mv));
    _mm512_mask_storeu_ps(x + i, k, e);
    acc0 = _mm512_add_ps(acc0, _mm512_maskz_mov_ps(k, e));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

ATTN_AVX512 void ScaleAvx512(float* x, int64_t n, float a) {
  const __m512 av = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), av));
  for (; i < n; ++i) x[i] *= a;
}

SoftmaxKernels Choose() {
  __builtin_cpu_init();
  // ATTN_DISABLE_AVX512=1 forces the portable kernels (tests run both).
  const char* disable = std::getenv("ATTN_DISABLE_AVX512");
  const bool disabled = disable != nullptr && disable[0] != '\0' && disable[0] != '0';
  if (!disabled && __builtin_cpu_supports("avx512f")) {
    return {ScaledMaxAvx512, ExpSumAvx512, ScaleAvx512, true};
  }
  return {ScaledMaxPortable, ExpSumPortable, ScalePortable, false};
}

}  // namespace

const SoftmaxKernels& GetSoftmaxKernels() {
  static const SoftmaxKernels kernels = Choose();
  return kernels;
}

}  // namespace attn::internal
