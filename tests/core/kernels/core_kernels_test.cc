// Core's hand-written row kernels, every tier this CPU can run, against a
// float64 reference at one tolerance. The ISA-forced ctest runs cover the
// tiers end to end; this covers each tier's kernels side by side, on lengths
// that hit every vector tail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/simd/small_matmul.h"
#include "kernels/simd/softmax_kernels.h"
#include "kernels/simd/tile_matmul.h"

namespace attn::internal {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const int64_t kLengths[] = {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 1000};

std::vector<const SoftmaxKernels*> AvailableTiers() {
  std::vector<const SoftmaxKernels*> tiers;
  for (IsaTier t : {IsaTier::kPortable, IsaTier::kAvx2, IsaTier::kAvx512}) {
    if (const SoftmaxKernels* k = SoftmaxKernelsFor(t)) tiers.push_back(k);
  }
  return tiers;
}

std::vector<float> Scores(int64_t n, unsigned seed, double masked_share) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 4.0f);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = u(rng) < masked_share ? -kInf : d(rng);
  return x;
}

TEST(Kernels, PortableAlwaysExistsAndTierMatchesCpu) {
  ASSERT_NE(SoftmaxKernelsFor(IsaTier::kPortable), nullptr);
  __builtin_cpu_init();
  EXPECT_EQ(SoftmaxKernelsFor(IsaTier::kAvx512) != nullptr,
            static_cast<bool>(__builtin_cpu_supports("avx512f")));
  EXPECT_EQ(GetSoftmaxKernels().tier, KernelTier());
}

// The bf16 matrix tier follows the CPU's flags in /proc/cpuinfo (amx_bf16,
// avx512_bf16) and ATTN_MAX_ISA's cap; the engine tier names it.
TEST(Kernels, Bf16MatrixTierFollowsTheCpuAndTheCap) {
  std::ifstream f("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) == 0) {
      flags = line + " ";
      break;
    }
  }
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags";
  const bool amx = flags.find(" amx_bf16 ") != std::string::npos;
  const bool avx512_bf16 = flags.find(" avx512_bf16 ") != std::string::npos;
  const char* cap_env = std::getenv("ATTN_MAX_ISA");
  const std::string cap = cap_env == nullptr ? "" : cap_env;
  Bf16Tier want = amx ? Bf16Tier::kAmxBf16 : avx512_bf16 ? Bf16Tier::kAvx512Bf16 : Bf16Tier::kNone;
  if (KernelTier() != IsaTier::kAvx512 || cap == "avx512") want = Bf16Tier::kNone;
  if (cap == "avx512_bf16" && want == Bf16Tier::kAmxBf16) want = Bf16Tier::kAvx512Bf16;
  EXPECT_EQ(Bf16MatrixTier(), want) << Bf16TierName(Bf16MatrixTier());
  const std::string engine = EngineTierName();
  EXPECT_EQ(engine, want == Bf16Tier::kAmxBf16      ? "avx512_amx"
                    : want == Bf16Tier::kAvx512Bf16 ? "avx512_bf16"
                                                    : IsaTierName(KernelTier()));
  // bf16 compute runs on a bf16 matrix tier, or emulated when asked for.
  const char* emulation = std::getenv("ATTN_BF16_EMULATION");
  const bool emulated =
      want == Bf16Tier::kNone && emulation != nullptr && std::string(emulation) == "1";
  EXPECT_EQ(Bf16Emulated(), emulated);
  EXPECT_EQ(Bf16ComputeAvailable(), want != Bf16Tier::kNone || emulated);
  EXPECT_EQ(ParseIsaTier("avx512_amx"), IsaTier::kAvx512);
  EXPECT_EQ(ParseIsaTier("avx512_bf16"), IsaTier::kAvx512);
  EXPECT_EQ(ParseIsaTier("amx"), std::nullopt);
}

TEST(Kernels, EveryTierMatchesTheFloat64Reference) {
  const float scale = 0.125f;
  for (const SoftmaxKernels* k : AvailableTiers()) {
    SCOPED_TRACE(IsaTierName(k->tier));
    for (int64_t n : kLengths) {
      SCOPED_TRACE("n=" + std::to_string(n));
      std::vector<float> x = Scores(n, static_cast<unsigned>(n) + 1, 0.2);
      double want_max = -INFINITY;
      for (float v : x) want_max = std::fmax(want_max, static_cast<double>(v * scale));
      const float m = k->scaled_max(x.data(), n, scale);
      EXPECT_EQ(m, static_cast<float>(want_max));
      if (m == -kInf) continue;
      std::vector<float> e = x;
      const float sum = k->exp_sum(e.data(), n, scale, m);
      double want_sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double want = std::exp(static_cast<double>(x[i] * scale) - m);
        want_sum += want;
        if (x[i] == -kInf) {
          EXPECT_EQ(e[i], 0.0f) << "a masked score must give exactly 0";
        } else {
          EXPECT_NEAR(e[i], want, 4e-7 * want + 1e-37) << "i=" << i << " x=" << x[i];
        }
      }
      EXPECT_NEAR(sum, want_sum, 2e-6 * want_sum);

      const std::vector<float> finite = Scores(n, 7, 0.0), bias = Scores(n, 99, 0.0);
      std::vector<float> y = finite, y_bias = finite;
      k->scale(y.data(), n, 3.0f);
      k->scale_add(y_bias.data(), n, 0.5f, bias.data());
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(y[i], finite[i] * 3.0f);
        EXPECT_NEAR(y_bias[i], static_cast<double>(finite[i]) * 0.5 + bias[i],
                    1e-6 * (std::fabs(finite[i]) + std::fabs(bias[i])));
      }
    }
  }
}

// The softcap (cap * tanh(x * scale / cap)) and ALiBi row passes on every
// tier against float64: across tanh's series/exp switch, in its saturation,
// at +-inf and NaN; ALiBi on both sides of the query's position, past int32.
TEST(Kernels, SoftcapAndAlibiMatchFloat64OnEveryTier) {
  const float kNan = std::numeric_limits<float>::quiet_NaN();
  for (const SoftmaxKernels* k : AvailableTiers()) {
    SCOPED_TRACE(IsaTierName(k->tier));
    for (int64_t n : kLengths) {
      SCOPED_TRACE("n=" + std::to_string(n));
      std::vector<float> x(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) x[i] = 0.37f * static_cast<float>(i - n / 2);  // +-~0..50
      std::vector<float> y = x;
      const float scale = 0.5f, cap = 7.0f;
      k->softcap(y.data(), n, scale, cap);
      for (int64_t i = 0; i < n; ++i) {
        const double want = cap * std::tanh(static_cast<double>(x[i]) * scale / cap);
        EXPECT_NEAR(y[i], want, 3e-7 * std::max(std::fabs(want), 1e-3)) << "x=" << x[i];
      }
      std::vector<float> z = x;
      const int64_t pos = n / 3 + 5, k0 = 2;
      k->alibi(z.data(), n, 0.25f, pos, k0);
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_EQ(z[j], x[j] - 0.25f * static_cast<float>(std::llabs(pos - (k0 + j)))) << j;
      }
    }
    std::vector<float> edges = {kInf, -kInf, kNan, 0.0f, -0.0f, 1e-30f, 0.2499f, 0.2501f, 9.5f};
    edges.resize(17, 3.0f);
    std::vector<float> e = edges;
    k->softcap(e.data(), static_cast<int64_t>(e.size()), 1.0f, 1.0f);
    EXPECT_EQ(e[0], 1.0f);
    EXPECT_EQ(e[1], -1.0f);
    EXPECT_TRUE(std::isnan(e[2]));
    EXPECT_EQ(e[3], 0.0f);
    EXPECT_EQ(e[5], 1e-30f);
    EXPECT_NEAR(e[6], std::tanh(0.2499), 1e-7);
    EXPECT_NEAR(e[7], std::tanh(0.2501), 1e-7);
    EXPECT_EQ(e[8], 1.0f);
    // Positions past int32: distances still exact to float's rounding.
    std::vector<float> far(20, 0.0f);
    const int64_t big = int64_t{3} << 32;
    k->alibi(far.data(), 20, 1.0f, big, 7);
    for (int64_t j = 0; j < 20; ++j) {
      EXPECT_EQ(far[j], -static_cast<float>(std::llabs(big - (7 + j))));
    }
  }
}

TEST(Kernels, ExpEdgesOnEveryTier) {
  // Arguments around exp's float range: where the result is normal the
  // relative error stays at float precision; deep underflow gives 0 or a
  // subnormal, never garbage; 0 gives exactly 1.
  const std::vector<float> args = {0.0f,   -1e-30f, -0.5f,   -1.0f, -10.0f, -50.0f, -80.0f, -87.0f,
                                   -87.3f, -87.4f,  -100.0f, -1e4f, -kInf,  10.0f,  80.0f};
  for (const SoftmaxKernels* k : AvailableTiers()) {
    SCOPED_TRACE(IsaTierName(k->tier));
    std::vector<float> e = args;
    k->exp_sum(e.data(), static_cast<int64_t>(e.size()), 1.0f, 0.0f);
    for (size_t i = 0; i < args.size(); ++i) {
      const double want = std::exp(static_cast<double>(args[i]));
      if (want >= std::numeric_limits<float>::min()) {
        EXPECT_NEAR(e[i], want, 4e-7 * want) << args[i];
      } else {
        EXPECT_GE(e[i], 0.0f) << args[i];
        EXPECT_LE(e[i], std::numeric_limits<float>::min()) << args[i];
      }
    }
    EXPECT_EQ(e[0], 1.0f);
    EXPECT_EQ(e[12], 0.0f);  // -inf
  }
}

TEST(Kernels, NanPropagatesOnEveryTier) {
  for (const SoftmaxKernels* k : AvailableTiers()) {
    SCOPED_TRACE(IsaTierName(k->tier));
    for (int64_t n : {1, 5, 8, 13, 16, 40}) {
      for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
        std::vector<float> x(static_cast<size_t>(n), 1.0f);
        x[static_cast<size_t>(at)] = std::numeric_limits<float>::quiet_NaN();
        EXPECT_TRUE(std::isnan(k->scaled_max(x.data(), n, 1.0f))) << "n=" << n << " at=" << at;
        EXPECT_TRUE(std::isnan(k->exp_sum(x.data(), n, 1.0f, 1.0f))) << "n=" << n;
        EXPECT_TRUE(std::isnan(x[static_cast<size_t>(at)]));
      }
    }
  }
}

TEST(Kernels, ExpSumLeavesElementsPastNAlone) {
  // The masked tail loads and stores must not touch x[n..].
  for (const SoftmaxKernels* k : AvailableTiers()) {
    SCOPED_TRACE(IsaTierName(k->tier));
    for (int64_t n = 1; n < 24; ++n) {
      std::vector<float> x(static_cast<size_t>(n) + 16, 7.0f);
      k->exp_sum(x.data(), n, 1.0f, 0.0f);
      k->scale(x.data(), n, 2.0f);
      for (size_t i = static_cast<size_t>(n); i < x.size(); ++i) ASSERT_EQ(x[i], 7.0f) << n;
    }
  }
}

// The decode kernel's fused passes on every tier and every tail. times_max
// against the separate passes it replaces (the keys' factors, the scale, the
// max): the same bits in x and the same max. exp_sum_times: each exp within
// 4e-7 of float64's (above FLT_MIN), the values' factors applied exactly
// (the same exps times f), the sum within float rounding of float64's.
// x[n..] untouched; NaN through.
TEST(Kernels, FusedDecodePassesMatchTheSeparatePassesAndFloat64) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uf(0.0f, 0.05f);
  for (const SoftmaxKernels* k : AvailableTiers()) {
    SCOPED_TRACE(IsaTierName(k->tier));
    for (int64_t n : kLengths) {
      for (bool factors : {false, true}) {
        SCOPED_TRACE("n=" + std::to_string(n) + (factors ? " with factors" : ""));
        const size_t un = static_cast<size_t>(n);
        const std::vector<float> raw = Scores(n, static_cast<unsigned>(n) + 11, 0.0);
        std::vector<float> f(un);
        for (auto& v : f) v = uf(rng);
        if (n > 2) f[1] = 0.0f;  // an all-zero token's factor
        const float* fp = factors ? f.data() : nullptr;
        std::vector<float> want = raw, got = raw;
        got.resize(un + 16, 7.0f);
        if (factors) {
          for (size_t i = 0; i < un; ++i) want[i] *= f[i];
        }
        k->scale(want.data(), n, 0.088f);
        const float want_max = k->scaled_max(want.data(), n, 1.0f);
        ASSERT_EQ(k->times_max(got.data(), n, 0.088f, fp), want_max);
        for (size_t i = 0; i < un; ++i) ASSERT_EQ(got[i], want[i]) << i;
        if (n == 0) continue;
        std::vector<float> bare = want;
        const float sum = k->exp_sum_times(got.data(), n, want_max, fp);
        const float bare_sum = k->exp_sum_times(bare.data(), n, want_max, nullptr);
        double sum64 = 0.0;
        for (size_t i = 0; i < un; ++i) {
          const double e = std::exp(double{want[i]} - want_max);
          sum64 += e;
          if (e >= std::numeric_limits<float>::min()) {
            ASSERT_NEAR(bare[i], e, 4e-7 * e) << i;
          } else {
            ASSERT_LE(bare[i], std::numeric_limits<float>::min()) << i;
          }
          ASSERT_EQ(got[i], factors ? bare[i] * f[i] : bare[i]) << i;
        }
        EXPECT_EQ(sum, bare_sum);
        EXPECT_NEAR(sum, sum64, 1e-6 * sum64);
        for (size_t i = un; i < got.size(); ++i) ASSERT_EQ(got[i], 7.0f) << i;
      }
    }
    for (int64_t n : {1, 5, 8, 13, 16, 40}) {
      std::vector<float> x(static_cast<size_t>(n), 1.0f), f(static_cast<size_t>(n), 0.5f);
      x[static_cast<size_t>(n / 2)] = std::numeric_limits<float>::quiet_NaN();
      EXPECT_TRUE(std::isnan(k->times_max(x.data(), n, 1.0f, f.data()))) << n;
      EXPECT_TRUE(std::isnan(k->exp_sum_times(x.data(), n, 1.0f, f.data()))) << n;
    }
    std::vector<float> edges = {0.0f, -1e-30f, -0.5f, -10.0f, -87.0f, -87.4f, -100.0f, -kInf};
    k->exp_sum_times(edges.data(), static_cast<int64_t>(edges.size()), 0.0f, nullptr);
    EXPECT_EQ(edges[0], 1.0f);
    EXPECT_EQ(edges[7], 0.0f);
    for (float e : edges) EXPECT_TRUE(e >= 0.0f && e <= 1.0f) << e;
  }
}

// The online softmax's block step (online_block) on every tier, against a
// float64 model of the same update, with P in s and (p16) in bf16: rows
// whose key ranges cut the block at every offset around the vector widths,
// rows with no key in the block, rows seeing their first keys (alpha 0: O
// cleared), a running max that rises (O rescaled) or stays, rows that have
// seen nothing yet, and NaN. The AVX2 and AVX-512 steps may keep a running
// max that the block's scores pass by at most its reach (softmax_kernels.h:
// 1 with P in s, 8 with P written in bf16 by the exp pass), exponentiating
// against it; the model then
// takes the step's max. States 3 and 4 are such rows: the block's max 0.5
// above the running max (kept), and a spike at the range's last key 3
// above it with the rest at most 0.9 above (kept in bf16; in s the pass
// stops at the spike and rescales what it wrote).
constexpr float kReachS = 1.0f, kReachP16 = 8.0f;

void CheckOnlineBlock(const SoftmaxKernels* k, int64_t kn, bool with_p16, int* kept) {
  const float scale = 0.125f;
  std::mt19937 rng(21);
  std::normal_distribution<float> dist(0.0f, 8.0f);
  const int64_t k0 = 1000, dv = 19;
  std::vector<int64_t> lo, hi;
  std::vector<int> state;
  // Ranges: every start and end around the block (some wholly outside).
  for (int64_t a = -2; a <= std::min<int64_t>(kn + 1, 40); a += 3) {
    for (int64_t e : {a - 1, a, a + 1, a + 8, a + 17, kn, kn + 3}) {
      for (int st = 0; st < 5; ++st) lo.push_back(k0 + a), hi.push_back(k0 + e), state.push_back(st);
    }
  }
  const int64_t rows = static_cast<int64_t>(lo.size());
  std::vector<float> s(static_cast<size_t>(rows * kn)), o(static_cast<size_t>(rows * dv));
  std::vector<float> m(static_cast<size_t>(rows)), l(static_cast<size_t>(rows));
  for (auto& x : s) x = dist(rng);
  for (auto& x : o) x = dist(rng);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t a = std::clamp<int64_t>(lo[r] - k0, 0, kn);
    const int64_t e = std::clamp<int64_t>(hi[r] - k0, a, kn);
    float* row = s.data() + r * kn;
    float top = -kInf;  // the range's scaled max
    if (state[r] == 4 && e > a) {  // the rest within 0.9 of the row's max, then the spike
      for (int64_t j = a; j < e; ++j) row[j] = std::fmod(std::fabs(row[j]), 7.2f);
      row[e - 1] = 7.2f + 24.0f;
    }
    for (int64_t j = a; j < e; ++j) top = std::max(top, row[j] * scale);
    // 0: nothing seen yet; 1: a running max far below; 2: far above; 3, 4: above.
    const float m0[] = {-kInf, -40.0f, 40.0f, top - 0.5f, top - 3.0f};
    m[r] = e > a || state[r] < 3 ? m0[state[r]] : 1.0f;
    l[r] = state[r] == 0 ? 0.0f : 3.5f;
  }
  if (rows > 4 && kn > 3) s[static_cast<size_t>(4 * kn + 2)] = std::nanf("");  // row 4
  const std::vector<float> s0 = s, o0 = o, m0 = m, l0 = l;
  std::vector<uint16_t> p16(with_p16 ? s.size() : 0, 0xABCD);  // every element written
  OnlineBlock blk{s.data(), kn, rows, lo.data(), hi.data(), k0, scale, m.data(), l.data(), o.data(), dv};
  blk.p16 = with_p16 ? p16.data() : nullptr;
  k->online_block(blk);
  const bool lazy_tier = k->tier == IsaTier::kAvx512 || k->tier == IsaTier::kAvx2;
  const bool exp_to_p16 =
      with_p16 && k->tier == IsaTier::kAvx512 && Bf16MatrixTier() != Bf16Tier::kNone;
  const float reach = exp_to_p16 ? kReachP16 : kReachS;
  for (int64_t r = 0; r < rows; ++r) {
    SCOPED_TRACE("row " + std::to_string(r) + " state " + std::to_string(state[r]) + " keys [" +
                 std::to_string(lo[r] - k0) + ", " + std::to_string(hi[r] - k0) + ")");
    const int64_t a = std::clamp<int64_t>(lo[r] - k0, 0, kn);
    const int64_t e = std::clamp<int64_t>(hi[r] - k0, a, kn);
    double blk_max = -INFINITY;
    bool nan = false;
    for (int64_t j = a; j < e; ++j) {
      const double v = static_cast<double>(s0[r * kn + j]) * scale;
      nan |= std::isnan(v);
      blk_max = std::fmax(blk_max, v);
    }
    if (nan) {
      EXPECT_TRUE(std::isnan(m[r])) << "a NaN score must make the row NaN";
      continue;
    }
    const double m_max = std::fmax(m0[r], blk_max);
    auto p_at = [&](int64_t j) -> double {
      if (!with_p16) return s[r * kn + j];
      const uint32_t bits = static_cast<uint32_t>(p16[r * kn + j]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    };
    if (m_max == -INFINITY) {  // nothing seen yet: P = 0, the state and O unchanged
      for (int64_t j = 0; j < kn; ++j) ASSERT_EQ(p_at(j), 0.0) << j;
      EXPECT_EQ(m[r], -kInf);
      EXPECT_EQ(l[r], 0.0f);
      for (int64_t c = 0; c < dv; ++c) ASSERT_EQ(o[r * dv + c], o0[r * dv + c]);
      continue;
    }
    // The max, or (the vector tiers) the running max kept within its reach.
    const bool keeps = lazy_tier && e > a && m0[r] != -kInf &&
                       blk_max <= static_cast<double>(m0[r]) + reach;
    ASSERT_EQ(m[r], keeps ? m0[r] : static_cast<float>(m_max));
    if (keeps && blk_max > m0[r]) ++*kept;
    const double m_new = m[r];
    double sum = 0;
    for (int64_t j = 0; j < kn; ++j) {
      if (j < a || j >= e) {
        ASSERT_EQ(p_at(j), 0.0) << "key " << j << " is outside the row's range";
        continue;
      }
      const double arg = static_cast<double>(s0[r * kn + j]) * scale - m_new;
      const double want = std::exp(arg);
      sum += want;
      if (with_p16) {  // bf16's rounding; below FLT_MIN, 0 is allowed too
        const double got = p_at(j);
        if (want < std::numeric_limits<float>::min() && got == 0.0) continue;
        ASSERT_NEAR(got, want, 0.00391 * want + 1e-37) << j;
        continue;
      }
      // The float argument's rounding (half an ulp of |arg|) on top of exp's 4e-7.
      ASSERT_NEAR(p_at(j), want, (4e-7 + 1.2e-7 * std::fabs(arg)) * want + 1e-37) << j;
    }
    const double shift = m0[r] == -kInf ? 0.0 : static_cast<double>(m0[r]) - m_new;
    const double alpha = m0[r] == -kInf ? 0.0 : std::exp(shift);
    const double alpha_tol = 4e-7 + 1.2e-7 * std::fabs(shift);  // as for P above
    EXPECT_NEAR(l[r], l0[r] * alpha + sum, (2e-6 + alpha_tol) * (l0[r] * alpha + sum));
    for (int64_t c = 0; c < dv; ++c) {
      const double want = o0[r * dv + c] * alpha;
      ASSERT_NEAR(o[r * dv + c], want, (1e-6 + alpha_tol) * std::fabs(want)) << "O col " << c;
    }
  }
}

TEST(Kernels, OnlineBlockMatchesFloat64OnEveryTier) {
  for (const SoftmaxKernels* k : AvailableTiers()) {
    SCOPED_TRACE(IsaTierName(k->tier));
    int kept = 0;
    for (bool with_p16 : {false, true}) {
      SCOPED_TRACE(with_p16 ? "P in bf16" : "P in s");
      for (int64_t kn : {1, 7, 8, 16, 17, 33, 64, 100, 512}) {
        SCOPED_TRACE("kn=" + std::to_string(kn));
        CheckOnlineBlock(k, kn, with_p16, &kept);
      }
    }
    // The vector steps keep a running max that the block passes by little.
    if (k->tier != IsaTier::kPortable) {
      EXPECT_GT(kept, 100);
    }
  }
}

// A row's step does not depend on the rows beside it: the AVX-512 step
// takes two rows at a time until either stops (a score past its reach),
// so row 0's pass splits where row 1 stops; its max, sum, P and O are the
// same bits beside a row that stops early, late or never, with P in s and
// in bf16, on every tier.
TEST(Kernels, OnlineBlockRowIsTheSameBesideAnyRow) {
  const int64_t kn = 512, dv = 8, k0 = 0;
  std::mt19937 rng(8);
  std::normal_distribution<float> dist(0.0f, 4.0f);
  std::vector<float> row0(kn), row1(kn);
  for (auto& x : row0) x = dist(rng);
  for (auto& x : row1) x = dist(rng);
  const float scale = 0.125f;
  float top0 = -kInf, top1 = -kInf;
  for (int64_t j = 0; j < kn; ++j) {
    top0 = std::max(top0, row0[j] * scale), top1 = std::max(top1, row1[j] * scale);
  }
  for (const SoftmaxKernels* k : AvailableTiers()) {
    SCOPED_TRACE(IsaTierName(k->tier));
    for (bool with_p16 : {false, true}) {
      SCOPED_TRACE(with_p16 ? "P in bf16" : "P in s");
      std::vector<float> want_s, want_o;
      std::vector<uint16_t> want_p;
      float want_m = 0, want_l = 0;
      // Row 1: a spike at key 0, 100, 300 or none (it stops there, or not).
      for (int64_t spike : {int64_t{-1}, int64_t{0}, int64_t{100}, int64_t{300}}) {
        SCOPED_TRACE("spike at " + std::to_string(spike));
        std::vector<float> s(row0);
        s.insert(s.end(), row1.begin(), row1.end());
        if (spike >= 0) s[static_cast<size_t>(kn + spike)] = (top1 + 20.0f) / scale;
        std::vector<int64_t> lo(2, 0), hi(2, kn);
        std::vector<float> m = {top0 - 0.5f, top1 - 0.5f}, l = {2.0f, 2.0f};
        std::vector<float> o(2 * dv, 1.5f);
        std::vector<uint16_t> p16(with_p16 ? s.size() : 0);
        OnlineBlock blk{s.data(), kn, 2, lo.data(), hi.data(), k0, scale, m.data(), l.data(), o.data(), dv};
        blk.p16 = with_p16 ? p16.data() : nullptr;
        k->online_block(blk);
        std::vector<float> s0(s.begin(), s.begin() + kn), o0(o.begin(), o.begin() + dv);
        std::vector<uint16_t> p0(p16.begin(), p16.begin() + (with_p16 ? kn : 0));
        if (spike < 0) {
          want_s = s0, want_o = o0, want_p = p0, want_m = m[0], want_l = l[0];
          continue;
        }
        EXPECT_EQ(m[0], want_m);
        EXPECT_EQ(l[0], want_l);
        EXPECT_EQ(o0, want_o);
        if (with_p16) {
          EXPECT_EQ(p0, want_p);
        } else {
          EXPECT_EQ(s0, want_s);
        }
      }
    }
  }
}

TEST(Kernels, SmallMatmulOnlyOnTheAvx2Tier) {
  EXPECT_EQ(SmallMatmulFor(IsaTier::kPortable), nullptr);
  EXPECT_EQ(SmallMatmulFor(IsaTier::kAvx512), nullptr);  // the batched brgemm is faster there
  __builtin_cpu_init();
  EXPECT_EQ(SmallMatmulFor(IsaTier::kAvx2) != nullptr,
            __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
}

// Checks C = init + A B (float64) on [m, n] and that the guard value
// stands in every column past n of C's rows (ldc wide): the one reference
// of the matmul kernels' tests. init(i, j) is C's value before the product.
template <typename Init>
void ExpectMatmul(int64_t m, int64_t n, int64_t k, const std::vector<float>& a, int64_t lda,
                  const std::vector<float>& b, int64_t ldb, const std::vector<float>& c,
                  int64_t ldc, float guard, Init init) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const float got = c[static_cast<size_t>(i * ldc + j)];
      if (j >= n) {
        ASSERT_EQ(got, guard) << "wrote past column n at " << i << "," << j;
        continue;
      }
      double want = init(i, j);
      double mag = std::fabs(want);
      for (int64_t p = 0; p < k; ++p) {
        const double term = static_cast<double>(a[static_cast<size_t>(i * lda + p)]) *
                            b[static_cast<size_t>(p * ldb + j)];
        want += term;
        mag += std::fabs(term);
      }
      ASSERT_NEAR(got, want, 1e-6 * mag + 1e-30) << i << "," << j;
    }
  }
}

TEST(Kernels, SmallMatmulMatchesFloat64WithAndWithoutBiasAndStaysInItsRows) {
  const SmallMatmulFn mm = SmallMatmulFor(IsaTier::kAvx2);
  if (mm == nullptr) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  constexpr float kGuard = 12345.0f;
  for (int64_t m : {1, 2, 3, 4, 5, 7, 16, 17}) {
    for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 33}) {
      for (int64_t k : {1, 3, 16, 64}) {
        for (bool with_bias : {false, true}) {
          SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
                       (with_bias ? " + bias" : ""));
          // Leading dims wider than the rows, as the strided heads of MHA are.
          const int64_t lda = k + 3, ldb = n + 5, ldc = n + 2;
          std::vector<float> a(static_cast<size_t>(m * lda)), b(static_cast<size_t>(k * ldb));
          for (auto& x : a) x = dist(rng);
          for (auto& x : b) x = dist(rng);
          std::vector<float> bias(static_cast<size_t>(n));
          for (auto& x : bias) x = dist(rng);
          std::vector<float> c(static_cast<size_t>(m * ldc), kGuard);
          mm(m, n, k, a.data(), lda, b.data(), ldb, with_bias ? bias.data() : nullptr, c.data(),
             ldc);
          ExpectMatmul(m, n, k, a, lda, b, ldb, c, ldc, kGuard, [&](int64_t, int64_t j) {
            return with_bias ? static_cast<double>(bias[static_cast<size_t>(j)]) : 0.0;
          });
        }
      }
    }
  }
}

TEST(Kernels, TileKernelsOnTheVectorTiersOnly) {
  EXPECT_EQ(TileKernelsFor(IsaTier::kPortable), nullptr);  // oneDNN does those blocks
  __builtin_cpu_init();
  EXPECT_EQ(TileKernelsFor(IsaTier::kAvx2) != nullptr,
            __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
  EXPECT_EQ(TileKernelsFor(IsaTier::kAvx512) != nullptr,
            static_cast<bool>(__builtin_cpu_supports("avx512f")));
  for (IsaTier t : {IsaTier::kAvx2, IsaTier::kAvx512}) {
    if (const TileKernels* k = TileKernelsFor(t)) {
      EXPECT_EQ(k->tier, t);
    }
  }
}

// Every row count around the 6-row tiles, every column count around the
// 16-lane vectors and the 64-column panels, set and accumulate, against
// float64; nothing outside C's [m, n] is written.
TEST(Kernels, TileMatmulMatchesFloat64AndStaysInItsRows) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  constexpr float kGuard = 12345.0f;
  int tiers = 0;
  for (IsaTier t : {IsaTier::kAvx2, IsaTier::kAvx512}) {
    const TileKernels* kern = TileKernelsFor(t);
    if (kern == nullptr) continue;
    ++tiers;
    for (int64_t m : {1, 2, 5, 6, 7, 12, 13, 64, 97}) {
      for (int64_t n : {1, 8, 15, 16, 17, 33, 48, 63, 64, 65, 128, 130}) {
        for (int64_t k : {1, 7, 64}) {
          for (bool acc : {false, true}) {
            SCOPED_TRACE("tier " + std::to_string(static_cast<int>(t)) + " " + std::to_string(m) +
                         "x" + std::to_string(n) + "x" + std::to_string(k) +
                         (acc ? " accumulate" : ""));
            const int64_t lda = k + 3, ldb = n + 5, ldc = n + 2;
            std::vector<float> a(static_cast<size_t>(m * lda)), b(static_cast<size_t>(k * ldb));
            for (auto& x : a) x = dist(rng);
            for (auto& x : b) x = dist(rng);
            std::vector<float> c(static_cast<size_t>(m * ldc), kGuard);
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < n; ++j) c[static_cast<size_t>(i * ldc + j)] = dist(rng);
            }
            const std::vector<float> c0 = c;
            kern->matmul(m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc, acc);
            ExpectMatmul(m, n, k, a, lda, b, ldb, c, ldc, kGuard, [&](int64_t i, int64_t j) {
              return acc ? static_cast<double>(c0[static_cast<size_t>(i * ldc + j)]) : 0.0;
            });
          }
        }
      }
    }
  }
  if (tiers == 0) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
}

// Transposes of every size around the 8x8 and 16x16 register blocks are
// exact, and write only dst's [cols, rows].
TEST(Kernels, TileTransposeIsExactAtEverySize) {
  int tiers = 0;
  for (IsaTier t : {IsaTier::kAvx2, IsaTier::kAvx512}) {
    const TileKernels* kern = TileKernelsFor(t);
    if (kern == nullptr) continue;
    ++tiers;
    for (int64_t rows : {1, 7, 8, 9, 16, 17, 31, 64, 70}) {
      for (int64_t cols : {1, 8, 15, 16, 17, 48, 64, 80, 128}) {
        SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
        const int64_t lds = cols + 3, ldd = rows + 2;
        std::vector<float> src(static_cast<size_t>(rows * lds));
        for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) * 0.5f - 7.0f;
        std::vector<float> dst(static_cast<size_t>(cols * ldd), -1.0e30f);
        kern->transpose(src.data(), rows, cols, lds, dst.data(), ldd);
        for (int64_t c = 0; c < cols; ++c) {
          for (int64_t r = 0; r < ldd; ++r) {
            const float got = dst[static_cast<size_t>(c * ldd + r)];
            if (r >= rows) {
              ASSERT_EQ(got, -1.0e30f) << "wrote past row " << rows;
            } else {
              ASSERT_EQ(got, src[static_cast<size_t>(r * lds + c)]) << r << "," << c;
            }
          }
        }
      }
    }
  }
  if (tiers == 0) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
}

}  // namespace
}  // namespace attn::internal
