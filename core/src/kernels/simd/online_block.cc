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
  static const bool native_bf16 = Bf16MatrixTier() != Bf16Tier::kNone;
  const bool exp_to_bf16 = b.p16 != nullptr && native_bf16;
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
    if (exp_to_bf16) {  // P straight to bf16, not via s
      uint16_t* p = b.p16 + r * b.kn;
      std::fill(p, p + a, uint16_t{0});
      std::fill(p + e, p + b.kn, uint16_t{0});
      sum = ExpSumRowTo512(row + a, p + a, e - a, b.scale, m_new);  // VCVTNE2PS2BF16
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
