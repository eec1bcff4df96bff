// The bf16 path's own operands inside the blocked kernel: P written as bf16
// by the online softmax's step (OnlineBlock::p16) on every tier this CPU
// runs, and the keys and values rounded once per call (KeyValuesInBf16),
// each against bf16 rounding written here in integer arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/block_operands.h"
#include "kernels/simd/softmax_kernels.h"

namespace attn::internal {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Round to nearest even on the bits; a NaN keeps its sign and top bits,
// made quiet.
uint16_t Bf16Of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  const uint32_t lsb = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7FFFu + lsb) >> 16);
}

// The step with p16 set against the same step without it, on every tier:
// the running max, sum and O are the same bits, and p16 holds the float32
// P rounded to bf16 (0 outside each row's keys; a row that has seen no key
// is all 0). Scores 90-100 below the row's max give subnormal P, which
// AVX512-BF16's conversion (the AVX-512 step where Bf16MatrixTier() is set)
// makes 0, as softmax_kernels.h says. Half the rows have seen nothing yet,
// half have their range's max as their running max, so that both steps
// keep it: where the exp pass writes p16 (native) the step's reach is wider
// than with P in s (the float64 model covers both reaches:
// Kernels.OnlineBlockMatchesFloat64OnEveryTier).
TEST(Bf16Kernels, OnlineBlockWritesItsPAsBf16OnEveryTier) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 6.0f);
  int subnormals = 0;
  for (IsaTier tier : {IsaTier::kPortable, IsaTier::kAvx2, IsaTier::kAvx512}) {
    const SoftmaxKernels* k = SoftmaxKernelsFor(tier);
    if (k == nullptr) continue;
    SCOPED_TRACE(IsaTierName(tier));
    const bool native = tier == IsaTier::kAvx512 && Bf16MatrixTier() != Bf16Tier::kNone;
    for (int64_t kn : {1, 15, 16, 33, 64, 512}) {
      SCOPED_TRACE("kn=" + std::to_string(kn));
      const int64_t k0 = 100, dv = 5;
      std::vector<int64_t> lo, hi;
      std::vector<float> m, l;
      for (int64_t a : {int64_t{-3}, int64_t{0}, int64_t{1}, kn / 2, kn}) {
        for (int64_t e : {a, a + 1, a + 17, kn, kn + 2}) {
          lo.push_back(k0 + a), hi.push_back(k0 + e);
          m.push_back(lo.size() % 2 == 0 ? -kInf : -100.0f);
          l.push_back(lo.size() % 2 == 0 ? 0.0f : 2.0f);
        }
      }
      const int64_t rows = static_cast<int64_t>(lo.size());
      std::vector<float> s(static_cast<size_t>(rows * kn)), o(static_cast<size_t>(rows * dv));
      for (auto& x : s) x = dist(rng);
      // e^-90 .. e^-100 of a row's max (>= 3): subnormal P, or 0.
      for (size_t j = 3; j < s.size(); j += 7) s[j] = -87.0f - static_cast<float>(j % 11);
      for (auto& x : o) x = dist(rng);
      for (int64_t r = 0; r < rows; ++r) {  // the range's max as the running max
        if (m[r] == -kInf) continue;
        for (int64_t j = std::max<int64_t>(0, lo[r] - k0); j < std::min(kn, hi[r] - k0); ++j) {
          m[r] = std::max(m[r], s[r * kn + j]);
        }
      }
      if (rows > 6 && kn > 2) s[static_cast<size_t>(6 * kn + 1)] = std::nanf("");
      std::vector<float> s1 = s, o1 = o, m1 = m, l1 = l;
      std::vector<uint16_t> p16(s.size(), 0xABCD);  // every element must be written
      k->online_block(
          {s.data(), kn, rows, lo.data(), hi.data(), k0, 1.0f, m.data(), l.data(), o.data(), dv});
      OnlineBlock with_p16{s1.data(), kn,        rows,      lo.data(), hi.data(), k0,
                           1.0f,      m1.data(), l1.data(), o1.data(), dv};
      with_p16.p16 = p16.data();
      k->online_block(with_p16);
      for (int64_t r = 0; r < rows; ++r) {
        SCOPED_TRACE("row " + std::to_string(r));
        if (std::isnan(m[r])) {
          EXPECT_TRUE(std::isnan(m1[r]));
          continue;
        }
        ASSERT_EQ(m1[r], m[r]);
        ASSERT_EQ(l1[r], l[r]);
        for (int64_t c = 0; c < dv; ++c) ASSERT_EQ(o1[r * dv + c], o[r * dv + c]);
        for (int64_t j = 0; j < kn; ++j) {
          const float p = s[r * kn + j];
          const bool tiny = p != 0.0f && std::fabs(p) < std::numeric_limits<float>::min();
          subnormals += tiny ? 1 : 0;
          const uint16_t want = native && tiny ? 0 : Bf16Of(p);
          ASSERT_EQ(p16[r * kn + j], want) << "key " << j << ", P " << p;
        }
      }
    }
  }
  EXPECT_GT(subnormals, 0) << "the scores must reach subnormal P";
}

// KeyValuesInBf16: a float32 GQA problem's K (read through a transposed,
// strided view) and V (dense) as dense bf16 copies, every element rounded
// as Bf16Of; the problem itself where nothing is gained.
TEST(Bf16Kernels, KeyValuesAreRoundedOncePerCall) {
  const int64_t b = 2, hq = 4, hkv = 2, lk = 37, d = 24, dv = 8;
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> k(static_cast<size_t>(b * hkv * d * lk)),
      v(static_cast<size_t>(b * hkv * lk * dv));
  for (auto& x : k) x = dist(rng);
  for (auto& x : v) x = dist(rng);
  AttentionProblem p;
  p.batch = b, p.heads = hq, p.kv_group = hq / hkv, p.lq = 300, p.lk = lk, p.d = d, p.dv = dv;
  p.bf16 = true;
  // K stored [B, Hkv, D, Lk]: element (b, h, j, c) at ((b * hkv + h) * d + c) * lk + j.
  p.k.data = k.data();
  p.k.stride[0] = hkv * d * lk, p.k.stride[1] = d * lk, p.k.stride[2] = 1, p.k.stride[3] = lk;
  p.v.data = v.data();
  p.v.stride[0] = hkv * lk * dv, p.v.stride[1] = lk * dv, p.v.stride[2] = dv, p.v.stride[3] = 1;
  Bf16KeyValues kv;
  const AttentionProblem& r = KeyValuesInBf16(p, /*query_blocks=*/2, /*threads=*/2, &kv);
  ASSERT_EQ(&r, &kv.problem);
  ASSERT_NE(r.k.data16, nullptr);
  ASSERT_NE(r.v.data16, nullptr);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t h = 0; h < hkv; ++h) {
      for (int64_t j = 0; j < lk; ++j) {
        for (int64_t c = 0; c < d; ++c) {
          const uint16_t got = r.k.data16[bi * r.k.stride[0] + h * r.k.stride[1] +
                                          j * r.k.stride[2] + c * r.k.stride[3]];
          ASSERT_EQ(got, Bf16Of(k[static_cast<size_t>(((bi * hkv + h) * d + c) * lk + j)]));
        }
        for (int64_t c = 0; c < dv; ++c) {
          const uint16_t got = r.v.data16[bi * r.v.stride[0] + h * r.v.stride[1] +
                                          j * r.v.stride[2] + c * r.v.stride[3]];
          ASSERT_EQ(got, Bf16Of(v[static_cast<size_t>(((bi * hkv + h) * lk + j) * dv + c)]));
        }
      }
    }
  }
  EXPECT_EQ(r.q.data, p.q.data);  // the rest of the problem unchanged
  EXPECT_EQ(r.lq, p.lq);
  // Nothing to gain: one task reads each head's keys, or float32 compute.
  EXPECT_EQ(&KeyValuesInBf16(p, 1, 2, &kv), &p);
  AttentionProblem f32 = p;
  f32.bf16 = false;
  EXPECT_EQ(&KeyValuesInBf16(f32, 4, 2, &kv), &f32);
}

}  // namespace
}  // namespace attn::internal
