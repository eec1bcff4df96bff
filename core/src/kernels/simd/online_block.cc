// The online softmax's step over one score block (online_block.h): each
// row's max over its keys, then exp, sum and the running state, and its
// output row rescaled, with no call per row.
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

// ExpSumRow512's exps written to y as bf16 instead of back to x, rounded by
// AVX512-BF16's VCVTNE2PS2BF16 (32 an instruction): nearest even as
// F32ToBf16 rounds, except that values below FLT_MIN (weights under e^-87
// of the row's largest) become 0. Returns the sum of the float32 exps.
// Only where Bf16MatrixTier() is set: such CPUs have AVX512-BF16.
__attribute__((target("avx512f,avx512bf16"))) float ExpSumRowBf16(const float* x, uint16_t* y,
                                                                  int64_t n, float scale, float m) {
  const __m512 s = _mm512_set1_ps(scale);
  const __m512 mv = _mm512_set1_ps(m);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 e0 = Exp512(_mm512_fmsub_ps(_mm512_loadu_ps(x + i), s, mv));
    const __m512 e1 = Exp512(_mm512_fmsub_ps(_mm512_loadu_ps(x + i + 16), s, mv));
    _mm512_storeu_si512(y + i, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(e1, e0)));
    acc0 = _mm512_add_ps(acc0, e0);
    acc1 = _mm512_add_ps(acc1, e1);
  }
  for (; i < n; i += 16) {
    const __mmask16 k = Lanes16(n - i);
    const __m512 e = Exp512(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, x + i), s, mv));
    acc0 = _mm512_add_ps(acc0, _mm512_maskz_mov_ps(k, e));
    alignas(32) uint16_t bits[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(bits),
                       reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(e)));
    std::copy(bits, bits + std::min<int64_t>(16, n - i), y + i);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// A bf16 step's P where the exp pass cannot write it (the AVX2 and portable
// tiers, bf16 emulation): row r, computed in s, rounded while it is still
// in L1.
inline void RowToBf16(const OnlineBlock& b, int64_t r) {
  if (b.p16 != nullptr) GetHalfKernels().f32_to_bf16(b.s + r * b.kn, b.p16 + r * b.kn, b.kn);
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

// OnlineBlock's step with no call per row: a pass for the max and one for
// the exp. Full vectors in the loops, the tail masked (AMD's masked stores
// are slow: the tail's is the only one).
ATTN_AVX2 void OnlineBlockAvx2(const OnlineBlock& b) {
  for (int64_t r = 0; r < b.rows; ++r) {
    float* row = b.s + r * b.kn;
    int64_t a = 0, e = 0;
    RowRange(b, r, &a, &e);
    const float m_blk = e > a ? ScaledMaxRow256(row + a, e - a, b.scale) : kNegInf;
    float m_new = 0;
    if (!OnlineMax(m_blk, b.m[r], &m_new)) {
      ZeroAvx2(row, b.kn);
      RowToBf16(b, r);
      continue;
    }
    ZeroAvx2(row, a);
    ZeroAvx2(row + e, b.kn - e);
    const float sum = ExpSumRow256(row + a, e - a, b.scale, m_new);
    RowToBf16(b, r);
    const float alpha = OnlineCommit(b, r, m_new, sum);
    float* o = b.o + r * b.dv;
    if (alpha == 0.0f) {
      ZeroAvx2(o, b.dv);
    } else if (alpha != 1.0f) {
      ScaleRow256(o, b.dv, alpha);
    }
  }
}

ATTN_AVX512 void OnlineBlockAvx512(const OnlineBlock& b) {
  for (int64_t r = 0; r < b.rows; ++r) {
    float* row = b.s + r * b.kn;
    int64_t a = 0, e = 0;
    RowRange(b, r, &a, &e);
    const float m_blk = e > a ? ScaledMaxRow512(row + a, e - a, b.scale) : kNegInf;
    float m_new = 0;
    if (!OnlineMax(m_blk, b.m[r], &m_new)) {
      Zero512(row, b.kn);
      RowToBf16(b, r);
      continue;
    }
    float sum = 0;
    static const bool native_bf16 = Bf16MatrixTier() != Bf16Tier::kNone;
    if (b.p16 != nullptr && native_bf16) {  // P straight to bf16, not via s
      uint16_t* p = b.p16 + r * b.kn;
      std::fill(p, p + a, uint16_t{0});
      std::fill(p + e, p + b.kn, uint16_t{0});
      sum = ExpSumRowBf16(row + a, p + a, e - a, b.scale, m_new);
    } else {
      Zero512(row, a);
      Zero512(row + e, b.kn - e);
      sum = ExpSumRow512(row + a, e - a, b.scale, m_new);
      RowToBf16(b, r);
    }
    const float alpha = OnlineCommit(b, r, m_new, sum);
    float* o = b.o + r * b.dv;
    if (alpha == 0.0f) {
      Zero512(o, b.dv);
    } else if (alpha != 1.0f) {
      ScaleRow512(o, b.dv, alpha);
    }
  }
}

}  // namespace attn::internal
