// The online softmax's step over one score block (online_block.h): each
// row's max over its keys, then exp, sum and the running state, and its
// output row rescaled, with no call per row. On the vector tiers a row
// that has seen keys skips the max pass while the block stays within
// reach of its running max (the lazy step): 0.155 -> 0.105 ns a score on
// AVX-512 over 256 x 512 blocks, two rows at a time.
#include "kernels/simd/online_block.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/simd/vec_math.h"
#include "support/half_kernels.h"
#include "support/simd.h"

namespace attn::internal {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The scalar part of OnlineBlock's step for one row, shared by every tier:
// from the block's max, the new running max; false when the row has seen
// no unmasked key yet (its s is then zeroed by the caller and nothing else
// changes). NaN (from a NaN input) is kept: max(NaN, x) is NaN here.
inline bool OnlineMax(float m_blk, float m_old, float* m_new) {
  *m_new = std::isnan(m_blk) ? m_blk : std::max(m_old, m_blk);
  return *m_new != kNegInf;
}
// After the row's exp pass (sum): the factor its accumulated output takes.
inline float OnlineCommit(const OnlineBlock& b, int64_t r, float m_new, float sum) {
  const float m_old = b.m[r];
  const float alpha = m_old == kNegInf ? 0.0f : std::exp(m_old - m_new);
  b.l[r] = b.l[r] * alpha + sum;
  b.m[r] = m_new;
  return alpha;
}
inline void RowRange(const OnlineBlock& b, int64_t r, int64_t* a, int64_t* e) {
  *a = std::clamp<int64_t>(b.lo[r] - b.k0, 0, b.kn);
  *e = std::clamp<int64_t>(b.hi[r] - b.k0, *a, b.kn);
}

ATTN_AVX2 inline void ZeroAvx2(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_setzero_ps());
  for (; i < n; ++i) x[i] = 0.0f;
}

ATTN_AVX512 inline void Zero512(float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16)
    _mm512_mask_storeu_ps(x + i, Lanes16(n - i), _mm512_setzero_ps());
}

// A bf16 step's P where the exp pass cannot write it (the AVX2 and portable
// tiers, bf16 emulation): row r, computed in s, rounded while it is still
// in L1.
inline void RowToBf16(const OnlineBlock& b, int64_t r) {
  if (b.p16 != nullptr) GetHalfKernels().f32_to_bf16(b.s + r * b.kn, b.p16 + r * b.kn, b.kn);
}

// Row r's output times the step's alpha: cleared when alpha is 0 (the
// row's first keys), untouched when it is 1.
ATTN_AVX2 inline void RescaleO256(const OnlineBlock& b, int64_t r, float alpha) {
  float* o = b.o + r * b.dv;
  if (alpha == 0.0f) {
    ZeroAvx2(o, b.dv);
  } else if (alpha != 1.0f) {
    ScaleRow256(o, b.dv, alpha);
  }
}
ATTN_AVX512 inline void RescaleO512(const OnlineBlock& b, int64_t r, float alpha) {
  float* o = b.o + r * b.dv;
  if (alpha == 0.0f) {
    Zero512(o, b.dv);
  } else if (alpha != 1.0f) {
    ScaleRow512(o, b.dv, alpha);
  }
}

// Row r's P outside its keys [a, e) zeroed, once the exp pass has written
// [a, e): in p16 where the AVX-512 exp pass writes it (to16), else in s,
// which is then rounded into p16 (RowToBf16).
ATTN_AVX2 inline void FinishRow256(const OnlineBlock& b, int64_t r, int64_t a, int64_t e) {
  float* row = b.s + r * b.kn;
  ZeroAvx2(row, a);
  ZeroAvx2(row + e, b.kn - e);
  RowToBf16(b, r);
}
ATTN_AVX512 inline void FinishRow512(const OnlineBlock& b, int64_t r, int64_t a, int64_t e,
                                     bool to16) {
  if (to16) {
    uint16_t* p = b.p16 + r * b.kn;
    std::fill(p, p + a, uint16_t{0});
    std::fill(p + e, p + b.kn, uint16_t{0});
    return;
  }
  float* row = b.s + r * b.kn;
  Zero512(row, a);
  Zero512(row + e, b.kn - e);
  RowToBf16(b, r);
}

// How far above a row's running max a later block's scores may reach and
// still be exponentiated against it (the lazy step of the AVX2 and
// AVX-512 tiers; the portable one keeps both passes): P then reaches
// e^reach, l and O grow by as much at most, and the max pass, its
// reduction and the rescale of O are skipped. With P in s (float32, in
// place), a block that reaches further stops the pass where it does and
// rescales what it has written by exp(m - m_new): reach 1 keeps that
// within the step's error bound (tests/core/kernels); with P in p16 the
// row is redone from s (the AVX-512 step where Bf16MatrixTier() is set),
// so the reach is wider: bf16 rounds P to 2^-9 anyway.
constexpr float kReachF32 = 1.0f;
constexpr float kReachBf16 = 8.0f;

// A row the lazy step takes: it has seen keys (a finite running max) and
// sees some in this block.
inline bool Lazy(const OnlineBlock& b, int64_t r, int64_t a, int64_t e) {
  return e > a && std::isfinite(b.m[r]);
}

// LazyExp's AVX2 twin, P in s (in place): 16 a step, the tail 8 at a time.
ATTN_AVX2 int64_t LazyExp256(float* x, int64_t n, float scale, float m, float* sum) {
  const __m256 s = _mm256_set1_ps(scale), mv = _mm256_set1_ps(m);
  const __m256 t = _mm256_set1_ps(kReachF32);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 u0 = _mm256_fmsub_ps(_mm256_loadu_ps(x + i), s, mv);
    const __m256 u1 = _mm256_fmsub_ps(_mm256_loadu_ps(x + i + 8), s, mv);
    const __m256 out =
        _mm256_or_ps(_mm256_cmp_ps(u0, t, _CMP_NLE_UQ), _mm256_cmp_ps(u1, t, _CMP_NLE_UQ));
    if (_mm256_movemask_ps(out) != 0) break;
    const __m256 e0 = ExpNonPositive256(u0), e1 = ExpNonPositive256(u1);
    _mm256_storeu_ps(x + i, e0);
    _mm256_storeu_ps(x + i + 8, e1);
    acc = _mm256_add_ps(acc, _mm256_add_ps(e0, e1));
  }
  if (i + 16 > n) {  // no stop above: the tail
    for (; i < n; i += 8) {
      const __m256i k = LaneMask256(n - i);
      const __m256 u = _mm256_fmsub_ps(_mm256_maskload_ps(x + i, k), s, mv);
      const __m256 out = _mm256_and_ps(_mm256_cmp_ps(u, t, _CMP_NLE_UQ), _mm256_castsi256_ps(k));
      if (_mm256_movemask_ps(out) != 0) break;
      const __m256 e = ExpNonPositive256(u);
      _mm256_maskstore_ps(x + i, k, e);
      acc = _mm256_add_ps(acc, _mm256_and_ps(e, _mm256_castsi256_ps(k)));
    }
  }
  *sum += ReduceAdd256(acc);
  return std::min(i, n);
}

}  // namespace

// The portable row kernels (std::exp) through their table: the same
// passes as the per-row path.
void OnlineBlockPortable(const OnlineBlock& b) {
  const SoftmaxKernels& k = *SoftmaxKernelsFor(IsaTier::kPortable);
  for (int64_t r = 0; r < b.rows; ++r) {
    float* row = b.s + r * b.kn;
    int64_t a = 0, e = 0;
    RowRange(b, r, &a, &e);
    const float m_blk = e > a ? k.scaled_max(row + a, e - a, b.scale) : kNegInf;
    float m_new = 0;
    if (!OnlineMax(m_blk, b.m[r], &m_new)) {
      std::fill(row, row + b.kn, 0.0f);
      RowToBf16(b, r);
      continue;
    }
    std::fill(row, row + a, 0.0f);
    std::fill(row + e, row + b.kn, 0.0f);
    const float sum = k.exp_sum(row + a, e - a, b.scale, m_new);
    RowToBf16(b, r);
    const float alpha = OnlineCommit(b, r, m_new, sum);
    float* o = b.o + r * b.dv;
    if (alpha == 0.0f) {
      std::fill(o, o + b.dv, 0.0f);
    } else if (alpha != 1.0f) {
      k.scale(o, b.dv, alpha);
    }
  }
}

// OnlineBlock's step with no call per row: a row with a running max takes
// the lazy step (LazyExp256, against that max) while the block's scores
// stay within its reach; the others a pass for the max and one for the
// exp. Full vectors in the loops, the tail masked (AMD's masked stores
// are slow: the tail's is the only one).
ATTN_AVX2 void OnlineBlockAvx2(const OnlineBlock& b) {
  for (int64_t r = 0; r < b.rows; ++r) {
    float* row = b.s + r * b.kn;
    int64_t a = 0, e = 0;
    RowRange(b, r, &a, &e);
    if (Lazy(b, r, a, e)) {
      float sum = 0;
      const float m = b.m[r];
      const int64_t got = a + LazyExp256(row + a, e - a, b.scale, m, &sum);
      if (got < e) {  // as LazyRowEnd: the rest's max, and the written part rescaled
        const float m_rest = ScaledMaxRow256(row + got, e - got, b.scale);
        const float m_new = std::isnan(m_rest) ? m_rest : std::max(m, m_rest);
        const float rest = ExpSumRow256(row + got, e - got, b.scale, m_new);
        const float alpha = OnlineCommit(b, r, m_new, 0.0f);
        ScaleRow256(row + a, got - a, alpha);
        sum = sum * alpha + rest;
        RescaleO256(b, r, alpha);
      }
      b.l[r] += sum;
      FinishRow256(b, r, a, e);
      continue;
    }
    const float m_blk = e > a ? ScaledMaxRow256(row + a, e - a, b.scale) : kNegInf;
    float m_new = 0;
    if (!OnlineMax(m_blk, b.m[r], &m_new)) {
      ZeroAvx2(row, b.kn);
      RowToBf16(b, r);
      continue;
    }
    const float sum = ExpSumRow256(row + a, e - a, b.scale, m_new);
    FinishRow256(b, r, a, e);
    RescaleO256(b, r, OnlineCommit(b, r, m_new, sum));
  }
}

namespace {

// Scores of 16 lanes that are NaN or reach above t (so far above the
// offset that the lazy step stops).
ATTN_AVX512 inline __mmask16 Beyond(__m512 u, __m512 t) {
  return _mm512_cmp_ps_mask(u, t, _CMP_NLE_UQ);
}

// The lazy exp pass of one row from x[0]: y[i] = exp(x[i] * scale - m)
// while no score reaches past m + reach, 32 a step, the tail 16 at a time.
// Returns how many it wrote; adds their exps to *acc, a 32-score step's
// two vectors summed first, so that a row's sum has the same bits however
// its pass is split (LazyExpPair adds alike).
template <typename Out>
ATTN_AVX512 int64_t LazyExp(const float* x, Out* y, int64_t n, float scale, float m, float reach,
                            __m512* acc) {
  const __m512 s = _mm512_set1_ps(scale), mv = _mm512_set1_ps(m), t = _mm512_set1_ps(reach);
  __m512 sum = *acc;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 u0 = _mm512_fmsub_ps(_mm512_loadu_ps(x + i), s, mv);
    const __m512 u1 = _mm512_fmsub_ps(_mm512_loadu_ps(x + i + 16), s, mv);
    if ((Beyond(u0, t) | Beyond(u1, t)) != 0) break;
    const __m512 e0 = ExpNonPositive512(u0), e1 = ExpNonPositive512(u1);
    StoreExps512(y + i, e0, e1);
    sum = _mm512_add_ps(sum, _mm512_add_ps(e0, e1));
  }
  if (i + 32 > n) {  // no stop above: the tail
    for (; i < n; i += 16) {
      const __mmask16 k = Lanes16(n - i);
      const __m512 u = _mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, x + i), s, mv);
      if (_mm512_mask_cmp_ps_mask(k, u, t, _CMP_NLE_UQ) != 0) break;
      const __m512 e = ExpNonPositive512(u);
      StoreExpsTail512(y + i, e, n - i);
      sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(k, e));
    }
  }
  *acc = sum;
  return std::min(i, n);
}

// LazyExp over two rows of the same range at once (their chains overlap),
// until either stops; returns the scores written in each (a multiple of
// 32), the rest left to LazyExp.
template <typename Out>
ATTN_AVX512 int64_t LazyExpPair(const float* x0, const float* x1, Out* y0, Out* y1, int64_t n,
                                float scale, float m0, float m1, float reach, __m512* acc0,
                                __m512* acc1) {
  const __m512 s = _mm512_set1_ps(scale), t = _mm512_set1_ps(reach);
  const __m512 mv0 = _mm512_set1_ps(m0), mv1 = _mm512_set1_ps(m1);
  __m512 sum0 = *acc0, sum1 = *acc1;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 u0 = _mm512_fmsub_ps(_mm512_loadu_ps(x0 + i), s, mv0);
    const __m512 u1 = _mm512_fmsub_ps(_mm512_loadu_ps(x0 + i + 16), s, mv0);
    const __m512 v0 = _mm512_fmsub_ps(_mm512_loadu_ps(x1 + i), s, mv1);
    const __m512 v1 = _mm512_fmsub_ps(_mm512_loadu_ps(x1 + i + 16), s, mv1);
    if ((Beyond(u0, t) | Beyond(u1, t) | Beyond(v0, t) | Beyond(v1, t)) != 0) break;
    const __m512 e0 = ExpNonPositive512(u0), e1 = ExpNonPositive512(u1);
    const __m512 f0 = ExpNonPositive512(v0), f1 = ExpNonPositive512(v1);
    StoreExps512(y0 + i, e0, e1);
    StoreExps512(y1 + i, f0, f1);
    sum0 = _mm512_add_ps(sum0, _mm512_add_ps(e0, e1));
    sum1 = _mm512_add_ps(sum1, _mm512_add_ps(f0, f1));
  }
  *acc0 = sum0;
  *acc1 = sum1;
  return i;
}

// A row's step with both passes: the block's max, then exp against the
// new running max (a row's first keys, and where the lazy step stops).
ATTN_AVX512 void TwoPassRow512(const OnlineBlock& b, int64_t r, int64_t a, int64_t e, bool to16) {
  float* row = b.s + r * b.kn;
  const float m_blk = e > a ? ScaledMaxRow512(row + a, e - a, b.scale) : kNegInf;
  float m_new = 0;
  if (!OnlineMax(m_blk, b.m[r], &m_new)) {
    Zero512(row, b.kn);
    RowToBf16(b, r);
    return;
  }
  // to16: P straight to bf16 (VCVTNE2PS2BF16), not via s.
  const float sum = to16 ? ExpSumRowTo512(row + a, b.p16 + r * b.kn + a, e - a, b.scale, m_new)
                         : ExpSumRow512(row + a, e - a, b.scale, m_new);
  FinishRow512(b, r, a, e, to16);
  RescaleO512(b, r, OnlineCommit(b, r, m_new, sum));
}

// The lazy step's end for row r, whose [a, done) holds exps against its
// running max (acc: their sum so far): the rest of [a, e) lazily too
// where it can.
// Where a score reaches past the max's reach: with P in p16 the row again
// with both passes; in s, the rest's max m_new, its exps against it, and
// what was written scaled by exp(m - m_new), as a two-pass step would have.
ATTN_AVX512 void LazyRowEnd(const OnlineBlock& b, int64_t r, int64_t a, int64_t e, int64_t done,
                            __m512 acc, bool to16) {
  float* row = b.s + r * b.kn;
  const float m = b.m[r];
  const int64_t got =
      done + (to16 ? LazyExp(row + done, b.p16 + r * b.kn + done, e - done, b.scale, m,
                             kReachBf16, &acc)
                   : LazyExp(row + done, row + done, e - done, b.scale, m, kReachF32, &acc));
  if (got < e && to16) return TwoPassRow512(b, r, a, e, true);
  float sum = _mm512_reduce_add_ps(acc);
  if (got < e) {  // NaN included: the rest's max is NaN, and so is all else
    const float m_rest = ScaledMaxRow512(row + got, e - got, b.scale);
    const float m_new = std::isnan(m_rest) ? m_rest : std::max(m, m_rest);
    const float rest = ExpSumRow512(row + got, e - got, b.scale, m_new);
    const float alpha = OnlineCommit(b, r, m_new, 0.0f);  // l *= alpha, m = m_new
    ScaleRow512(row + a, got - a, alpha);
    sum = sum * alpha + rest;
    RescaleO512(b, r, alpha);
  }
  b.l[r] += sum;
  FinishRow512(b, r, a, e, to16);
}

}  // namespace

// Rows with a running max take the lazy step: exp against that max, two
// rows at a time, no max pass and no rescale of O while the block's scores
// stay within its reach (LazyExp); the others both passes.
ATTN_AVX512 void OnlineBlockAvx512(const OnlineBlock& b) {
  static const bool native_bf16 = Bf16MatrixTier() != Bf16Tier::kNone;
  const bool to16 = b.p16 != nullptr && native_bf16;
  for (int64_t r = 0; r < b.rows;) {
    int64_t a = 0, e = 0;
    RowRange(b, r, &a, &e);
    if (!Lazy(b, r, a, e)) {
      TwoPassRow512(b, r, a, e, to16);
      ++r;
      continue;
    }
    int64_t a1 = 0, e1 = 0;
    if (r + 1 < b.rows) RowRange(b, r + 1, &a1, &e1);
    __m512 sum0 = _mm512_setzero_ps(), sum1 = sum0;
    if (r + 1 < b.rows && a1 == a && e1 == e && Lazy(b, r + 1, a1, e1)) {
      float *x0 = b.s + r * b.kn + a, *x1 = x0 + b.kn;
      const int64_t done =
          a + (to16 ? LazyExpPair(x0, x1, b.p16 + r * b.kn + a, b.p16 + (r + 1) * b.kn + a, e - a,
                                  b.scale, b.m[r], b.m[r + 1], kReachBf16, &sum0, &sum1)
                    : LazyExpPair(x0, x1, x0, x1, e - a, b.scale, b.m[r], b.m[r + 1], kReachF32,
                                  &sum0, &sum1));
      LazyRowEnd(b, r, a, e, done, sum0, to16);
      LazyRowEnd(b, r + 1, a, e, done, sum1, to16);
      r += 2;
    } else {
      LazyRowEnd(b, r, a, e, a, sum0, to16);
      ++r;
    }
  }
}

}  // namespace attn::internal
