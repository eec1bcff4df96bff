#include "kernels/simd/softmax_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>

#include "kernels/simd/online_block.h"
#include "kernels/simd/vec_math.h"
#include "support/isa_cap.h"
#include "support/simd.h"

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

void ScaleAddPortable(float* x, int64_t n, float a, const float* bias) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * a + bias[i];
}

float TimesMaxPortable(float* x, int64_t n, float a, const float* f) {
  if (f != nullptr) {
    for (int64_t i = 0; i < n; ++i) x[i] *= f[i];
  }
  ScalePortable(x, n, a);
  return ScaledMaxPortable(x, n, 1.0f);
}

float ExpSumTimesPortable(float* x, int64_t n, float m, const float* f) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float e = std::exp(x[i] - m);
    sum += e;
    x[i] = f != nullptr ? e * f[i] : e;
  }
  return sum;
}

// tanh near 0: its series to y^9, within an ulp for |y| < kTanhSeries.
constexpr float kTanhSeries = 0.25f;
constexpr float kT3 = -1.0f / 3, kT5 = 2.0f / 15, kT7 = -17.0f / 315, kT9 = 62.0f / 2835;

float TanhPortable(float y) {
  if (std::fabs(y) < kTanhSeries) {
    const float y2 = y * y;
    return y + y * y2 * (kT3 + y2 * (kT5 + y2 * (kT7 + y2 * kT9)));
  }
  return std::tanh(y);
}

void SoftcapPortable(float* x, int64_t n, float scale, float cap) {
  const float inner = scale / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = cap * TanhPortable(x[i] * inner);
}

void AlibiPortable(float* x, int64_t n, float slope, int64_t pos, int64_t k0) {
  for (int64_t j = 0; j < n; ++j) x[j] -= slope * static_cast<float>(std::llabs(pos - (k0 + j)));
}

// ---- AVX2 + FMA kernels -----------------------------------------------------
// The max, exp-and-sum and scale passes are vec_math.h's (ScaledMaxRow256,
// ExpSumRow256, ScaleRow256), shared with the online block step.

ATTN_AVX2 void ScaleAddAvx2(float* x, int64_t n, float a, const float* bias) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(x + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), av, _mm256_loadu_ps(bias + i)));
  }
  for (; i < n; ++i) x[i] = x[i] * a + bias[i];
}

ATTN_AVX2 inline __m256 Tanh256(__m256 y) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 ay = _mm256_andnot_ps(sign, y);
  const __m256 y2 = _mm256_mul_ps(y, y);
  __m256 p = _mm256_fmadd_ps(y2, _mm256_set1_ps(kT9), _mm256_set1_ps(kT7));
  p = _mm256_fmadd_ps(y2, p, _mm256_set1_ps(kT5));
  p = _mm256_fmadd_ps(y2, p, _mm256_set1_ps(kT3));
  const __m256 series = _mm256_fmadd_ps(_mm256_mul_ps(y, y2), p, y);
  // 1 - 2 / (exp(2|y|) + 1), with y's sign; exp saturates, so large |y| gives 1.
  const __m256 e = Exp256(_mm256_add_ps(ay, ay));
  const __m256 t =
      _mm256_sub_ps(_mm256_set1_ps(1.0f),
                    _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
  const __m256 far = _mm256_or_ps(t, _mm256_and_ps(sign, y));
  // NaN compares false: it takes `far`, where it has propagated.
  return _mm256_blendv_ps(far, series, _mm256_cmp_ps(ay, _mm256_set1_ps(kTanhSeries), _CMP_LT_OQ));
}

ATTN_AVX2 void SoftcapAvx2(float* x, int64_t n, float scale, float cap) {
  const __m256 inner = _mm256_set1_ps(scale / cap), cv = _mm256_set1_ps(cap);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(x + i,
                     _mm256_mul_ps(cv, Tanh256(_mm256_mul_ps(_mm256_loadu_ps(x + i), inner))));
  }
  if (i < n) {
    const __m256i k = LaneMask256(n - i);
    const __m256 y = _mm256_mul_ps(_mm256_maskload_ps(x + i, k), inner);
    _mm256_maskstore_ps(x + i, k, _mm256_mul_ps(cv, Tanh256(y)));
  }
}

ATTN_AVX2 void AlibiAvx2(float* x, int64_t n, float slope, int64_t pos, int64_t k0) {
  const int64_t d0 = pos - k0;  // the distance of j = 0, before |.|
  if (d0 > INT32_MAX || d0 - n < INT32_MIN) return AlibiPortable(x, n, slope, pos, k0);
  const __m256 sv = _mm256_set1_ps(slope);
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256i d = _mm256_sub_epi32(_mm256_set1_epi32(static_cast<int32_t>(d0 - j)), iota);
    const __m256 dist = _mm256_cvtepi32_ps(_mm256_abs_epi32(d));
    _mm256_storeu_ps(x + j, _mm256_fnmadd_ps(sv, dist, _mm256_loadu_ps(x + j)));
  }
  for (; j < n; ++j) x[j] -= slope * static_cast<float>(std::llabs(d0 - j));
}

// f[i] (or 1) for the lanes of k.
ATTN_AVX2 inline __m256 Factors256(const float* f, int64_t i, __m256i k) {
  return f != nullptr ? _mm256_maskload_ps(f + i, k) : _mm256_set1_ps(1.0f);
}

ATTN_AVX2 float TimesMaxAvx2(float* x, int64_t n, float a, const float* f) {
  const __m256 av = _mm256_set1_ps(a);
  const __m256 neg_inf = _mm256_set1_ps(kNegInf);
  const __m256i all = _mm256_set1_epi32(-1);
  __m256 m0 = neg_inf, nan = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v =
        _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), Factors256(f, i, all)), av);
    _mm256_storeu_ps(x + i, v);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    m0 = _mm256_max_ps(m0, v);
  }
  if (i < n) {
    const __m256i k = LaneMask256(n - i);
    const __m256 v =
        _mm256_mul_ps(_mm256_mul_ps(_mm256_maskload_ps(x + i, k), Factors256(f, i, k)), av);
    _mm256_maskstore_ps(x + i, k, v);
    const __m256 live = _mm256_blendv_ps(neg_inf, v, _mm256_castsi256_ps(k));
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(live, live, _CMP_UNORD_Q));
    m0 = _mm256_max_ps(m0, live);
  }
  if (_mm256_movemask_ps(nan) != 0) return std::numeric_limits<float>::quiet_NaN();
  return ReduceMax256(m0);
}

ATTN_AVX2 float ExpSumTimesAvx2(float* x, int64_t n, float m, const float* f) {
  const __m256 mv = _mm256_set1_ps(m);
  const __m256i all = _mm256_set1_epi32(-1);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = ExpNonPositive256(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
    _mm256_storeu_ps(x + i, _mm256_mul_ps(e, Factors256(f, i, all)));
    acc = _mm256_add_ps(acc, e);
  }
  if (i < n) {
    const __m256i k = LaneMask256(n - i);
    const __m256 e = ExpNonPositive256(_mm256_sub_ps(_mm256_maskload_ps(x + i, k), mv));
    _mm256_maskstore_ps(x + i, k, _mm256_mul_ps(e, Factors256(f, i, k)));
    acc = _mm256_add_ps(acc, _mm256_and_ps(e, _mm256_castsi256_ps(k)));
  }
  return ReduceAdd256(acc);
}

// ---- AVX-512 kernels --------------------------------------------------------
// Likewise ScaledMaxRow512, ExpSumRow512 and ScaleRow512 (vec_math.h).

ATTN_AVX512 void ScaleAddAvx512(float* x, int64_t n, float a, const float* bias) {
  const __m512 av = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(x + i, _mm512_fmadd_ps(_mm512_loadu_ps(x + i), av, _mm512_loadu_ps(bias + i)));
  }
  for (; i < n; ++i) x[i] = x[i] * a + bias[i];
}

ATTN_AVX512 inline __m512 Tanh512(__m512 y) {
  const __m512 ay = _mm512_abs_ps(y);
  const __m512 y2 = _mm512_mul_ps(y, y);
  __m512 p = _mm512_fmadd_ps(y2, _mm512_set1_ps(kT9), _mm512_set1_ps(kT7));
  p = _mm512_fmadd_ps(y2, p, _mm512_set1_ps(kT5));
  p = _mm512_fmadd_ps(y2, p, _mm512_set1_ps(kT3));
  const __m512 series = _mm512_fmadd_ps(_mm512_mul_ps(y, y2), p, y);
  // tanh(y) rounds to 1 past |y| = 9; the clamp keeps exp(+inf) out (minps
  // returns its second operand, so a NaN y stays NaN).
  const __m512 e = Exp512(_mm512_min_ps(_mm512_set1_ps(40.0f), _mm512_add_ps(ay, ay)));
  const __m512 t =
      _mm512_sub_ps(_mm512_set1_ps(1.0f),
                    _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
  const __m512 far = _mm512_castsi512_ps(
      _mm512_or_si512(_mm512_castps_si512(t),
                      _mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32(INT32_MIN))));
  const __mmask16 near = _mm512_cmp_ps_mask(ay, _mm512_set1_ps(kTanhSeries), _CMP_LT_OQ);
  return _mm512_mask_mov_ps(far, near, series);
}

ATTN_AVX512 void SoftcapAvx512(float* x, int64_t n, float scale, float cap) {
  const __m512 inner = _mm512_set1_ps(scale / cap), cv = _mm512_set1_ps(cap);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = Lanes16(n - i);
    const __m512 y = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), inner);
    _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(cv, Tanh512(y)));
  }
}

ATTN_AVX512 void AlibiAvx512(float* x, int64_t n, float slope, int64_t pos, int64_t k0) {
  const int64_t d0 = pos - k0;
  if (d0 > INT32_MAX || d0 - n < INT32_MIN) return AlibiPortable(x, n, slope, pos, k0);
  const __m512 sv = _mm512_set1_ps(slope);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = Lanes16(n - j);
    const __m512i d = _mm512_sub_epi32(_mm512_set1_epi32(static_cast<int32_t>(d0 - j)), iota);
    const __m512 dist = _mm512_cvtepi32_ps(_mm512_abs_epi32(d));
    _mm512_mask_storeu_ps(x + j, k, _mm512_fnmadd_ps(sv, dist, _mm512_maskz_loadu_ps(k, x + j)));
  }
}

// f[i] (or 1) for the lanes of k.
ATTN_AVX512 inline __m512 Factors512(const float* f, int64_t i, __mmask16 k) {
  return f != nullptr ? _mm512_maskz_loadu_ps(k, f + i) : _mm512_set1_ps(1.0f);
}

ATTN_AVX512 float TimesMaxAvx512(float* x, int64_t n, float a, const float* f) {
  const __m512 av = _mm512_set1_ps(a);
  __m512 m0 = _mm512_set1_ps(kNegInf);
  __mmask16 nan = 0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v =
        _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), Factors512(f, i, 0xFFFF)), av);
    _mm512_storeu_ps(x + i, v);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    m0 = _mm512_max_ps(m0, v);
  }
  if (i < n) {
    const __mmask16 k = Lanes16(n - i);
    const __m512 v =
        _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), Factors512(f, i, k)), av);
    _mm512_mask_storeu_ps(x + i, k, v);
    nan |= _mm512_mask_cmp_ps_mask(k, v, v, _CMP_UNORD_Q);
    m0 = _mm512_mask_max_ps(m0, k, m0, v);
  }
  if (nan) return std::numeric_limits<float>::quiet_NaN();
  return _mm512_reduce_max_ps(m0);
}

ATTN_AVX512 float ExpSumTimesAvx512(float* x, int64_t n, float m, const float* f) {
  const __m512 mv = _mm512_set1_ps(m);
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = ExpNonPositive512(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv));
    _mm512_storeu_ps(x + i, _mm512_mul_ps(e, Factors512(f, i, 0xFFFF)));
    acc = _mm512_add_ps(acc, e);
  }
  if (i < n) {
    const __mmask16 k = Lanes16(n - i);
    const __m512 e = ExpNonPositive512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), mv));
    _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(e, Factors512(f, i, k)));
    acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(k, e));
  }
  return _mm512_reduce_add_ps(acc);
}

constexpr SoftmaxKernels kPortable{ScaledMaxPortable,   ExpSumPortable,   ScalePortable,
                                   ScaleAddPortable,    SoftcapPortable,  AlibiPortable,
                                   OnlineBlockPortable, TimesMaxPortable, ExpSumTimesPortable,
                                   IsaTier::kPortable};
constexpr SoftmaxKernels kAvx2{ScaledMaxRow256, ExpSumRow256,  ScaleRow256,     ScaleAddAvx2,
                               SoftcapAvx2,     AlibiAvx2,     OnlineBlockAvx2, TimesMaxAvx2,
                               ExpSumTimesAvx2, IsaTier::kAvx2};
constexpr SoftmaxKernels kAvx512{
    ScaledMaxRow512, ExpSumRow512,      ScaleRow512,    ScaleAddAvx512,    SoftcapAvx512,
    AlibiAvx512,     OnlineBlockAvx512, TimesMaxAvx512, ExpSumTimesAvx512, IsaTier::kAvx512};

}  // namespace

const SoftmaxKernels* SoftmaxKernelsFor(IsaTier tier) {
  if (!CpuHasTier(tier)) return nullptr;
  switch (tier) {
    case IsaTier::kAvx512:
      return &kAvx512;
    case IsaTier::kAvx2:
      return &kAvx2;
    case IsaTier::kPortable:
      break;
  }
  return &kPortable;
}

const SoftmaxKernels& GetSoftmaxKernels() {
  static const SoftmaxKernels& kernels = *SoftmaxKernelsFor(KernelTier());
  return kernels;
}

}  // namespace attn::internal
