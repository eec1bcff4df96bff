// float16 and bfloat16 conversions (attn/half.h) on every tier this CPU can
// run, against references computed in double from the formats' definitions:
// widening over all 65,536 bit patterns, narrowing round-to-nearest-even on
// every half value, every midpoint and its neighbours, the specials and
// random float bit patterns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "attn/half.h"
#include "support/half_kernels.h"

namespace attn {
namespace {

using internal::HalfKernels;

struct Format {
  HalfType type;
  int exp_bits, man_bits;  // float16: 5, 10; bfloat16: 8, 7
};
const Format kF16{HalfType::kFloat16, 5, 10};
const Format kBf16{HalfType::kBFloat16, 8, 7};

// The value of half bits `h`, from the format's definition.
double Decode(const Format& f, uint16_t h) {
  const int bias = (1 << (f.exp_bits - 1)) - 1;
  const int e = (h >> f.man_bits) & ((1 << f.exp_bits) - 1);
  const int m = h & ((1 << f.man_bits) - 1);
  const double sign = (h >> 15) ? -1.0 : 1.0;
  if (e == (1 << f.exp_bits) - 1) {
    return m ? std::numeric_limits<double>::quiet_NaN()
             : sign * std::numeric_limits<double>::infinity();
  }
  if (e == 0) return sign * std::ldexp(m, 1 - bias - f.man_bits);
  return sign * std::ldexp((1 << f.man_bits) + m, e - bias - f.man_bits);
}

// Round-to-nearest-even of x (not NaN) to the format, from a sorted table of
// its non-negative finite values; beyond the largest, 2^(emax+1) stands in
// for Inf with an even mantissa.
uint16_t Encode(const Format& f, double x) {
  static std::vector<std::pair<double, uint16_t>> tables[2];
  auto& table = tables[f.type == HalfType::kFloat16 ? 0 : 1];
  if (table.empty()) {
    for (uint32_t h = 0; h < 0x8000; ++h) {
      const double v = Decode(f, static_cast<uint16_t>(h));
      if (std::isfinite(v)) table.emplace_back(v, static_cast<uint16_t>(h));
    }
    std::sort(table.begin(), table.end());
    const int bias = (1 << (f.exp_bits - 1)) - 1;
    const uint16_t inf = static_cast<uint16_t>(((1 << f.exp_bits) - 1) << f.man_bits);
    table.emplace_back(std::ldexp(1.0, bias + 1), inf);
  }
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (std::isinf(a) || a >= table.back().first) return sign | table.back().second;
  auto hi = std::lower_bound(table.begin(), table.end(), std::make_pair(a, uint16_t{0}));
  if (hi->first == a) return sign | hi->second;
  auto lo = hi - 1;
  const double dlo = a - lo->first, dhi = hi->first - a;
  if (dlo < dhi) return sign | lo->second;
  if (dhi < dlo) return sign | hi->second;
  return sign | ((lo->second & 1) == 0 ? lo->second : hi->second);  // tie: even
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<const HalfKernels*> Tiers() {
  std::vector<const HalfKernels*> tiers;
  for (IsaTier t : {IsaTier::kPortable, IsaTier::kAvx2, IsaTier::kAvx512}) {
    if (const HalfKernels* k = internal::HalfKernelsFor(t)) tiers.push_back(k);
  }
  return tiers;
}

void Widen(const HalfKernels& k, const Format& f, const uint16_t* s, float* d, int64_t n) {
  (f.type == HalfType::kFloat16 ? k.f16_to_f32 : k.bf16_to_f32)(s, d, n);
}
void Narrow(const HalfKernels& k, const Format& f, const float* s, uint16_t* d, int64_t n) {
  (f.type == HalfType::kFloat16 ? k.f32_to_f16 : k.f32_to_bf16)(s, d, n);
}

class HalfTest : public ::testing::TestWithParam<Format> {};

TEST_P(HalfTest, WideningIsExactForEveryBitPattern) {
  const Format f = GetParam();
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  for (const HalfKernels* k : Tiers()) {
    SCOPED_TRACE(IsaTierName(k->tier));
    std::vector<float> out(65536);
    Widen(*k, f, all.data(), out.data(), 65536);
    for (uint32_t h = 0; h < 65536; ++h) {
      const double want = Decode(f, static_cast<uint16_t>(h));
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(out[h])) << std::hex << h;
        ASSERT_EQ(std::signbit(out[h]), (h >> 15) != 0) << std::hex << h;
      } else {
        ASSERT_EQ(static_cast<double>(out[h]), want) << std::hex << h;
        ASSERT_EQ(std::signbit(out[h]), std::signbit(want)) << std::hex << h;  // -0
      }
    }
  }
}

// Every half value, the midpoints between neighbours and the floats on either
// side of each midpoint, the specials, and random float bit patterns.
std::vector<float> NarrowingInputs(const Format& f) {
  std::vector<float> in;
  std::vector<double> values;
  for (uint32_t h = 0; h < 0x7C00 || (f.type == HalfType::kBFloat16 && h < 0x7F80); ++h) {
    values.push_back(Decode(f, static_cast<uint16_t>(h)));
  }
  for (size_t i = 0; i < values.size(); ++i) {
    for (double sign : {1.0, -1.0}) {
      in.push_back(static_cast<float>(sign * values[i]));
      if (i + 1 < values.size()) {
        const float mid = static_cast<float>(sign * (values[i] + values[i + 1]) / 2);
        in.push_back(mid);
        in.push_back(std::nextafter(mid, 0.0f));
        in.push_back(std::nextafter(mid, sign * INFINITY));
      }
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
                  65504.0f, 65519.996f, 65520.0f, 65536.0f, 1e10f, 5.9604645e-8f, 2.9802322e-8f,
                  2.9802326e-8f, 1e-30f, -1e-30f}) {
    in.push_back(x);
    in.push_back(-x);
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) in.push_back(FromBits(static_cast<uint32_t>(rng())));
  return in;
}

TEST_P(HalfTest, NarrowingRoundsToNearestEvenWithInfNanAndSubnormals) {
  const Format f = GetParam();
  const std::vector<float> in = NarrowingInputs(f);
  for (const HalfKernels* k : Tiers()) {
    SCOPED_TRACE(IsaTierName(k->tier));
    std::vector<uint16_t> out(in.size());
    Narrow(*k, f, in.data(), out.data(), static_cast<int64_t>(in.size()));
    for (size_t i = 0; i < in.size(); ++i) {
      const uint32_t bits = [&] {
        uint32_t u;
        std::memcpy(&u, &in[i], 4);
        return u;
      }();
      if (std::isnan(in[i])) {
        ASSERT_TRUE(std::isnan(Decode(f, out[i]))) << std::hex << bits;
        ASSERT_EQ(out[i] >> 15, bits >> 31) << std::hex << bits;
        continue;
      }
      ASSERT_EQ(out[i], Encode(f, in[i])) << "input " << in[i] << " bits " << std::hex << bits;
    }
  }
}

TEST_P(HalfTest, EveryLengthWritesExactlyItsElements) {
  const Format f = GetParam();
  for (const HalfKernels* k : Tiers()) {
    SCOPED_TRACE(IsaTierName(k->tier));
    for (int64_t n = 0; n <= 70; ++n) {
      std::vector<float> src(n + 4), back(n + 4, -7.0f);
      for (int64_t i = 0; i < n; ++i) src[i] = 0.5f * static_cast<float>(i) - 3.25f;
      std::vector<uint16_t> half(n + 4, 0xBEEF);
      Narrow(*k, f, src.data(), half.data(), n);
      Widen(*k, f, half.data(), back.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(back[i], src[i]) << n << " " << i;
      for (int64_t i = n; i < n + 4; ++i) {
        ASSERT_EQ(half[i], 0xBEEF) << "wrote past " << n;
        ASSERT_EQ(back[i], -7.0f) << "wrote past " << n;
      }
    }
  }
}

TEST_P(HalfTest, PublicFunctionsUseTheEnginesTier) {
  const Format f = GetParam();
  const std::vector<float> src = {1.0f, -2.5f, 65519.0f, 1e-7f, 3.14159f, 1e5f, -0.0f, 7.0f, 9.5f};
  std::vector<uint16_t> a(src.size()), b(src.size());
  FloatToHalf(f.type, src.data(), a.data(), static_cast<int64_t>(src.size()));
  for (size_t i = 0; i < src.size(); ++i) b[i] = Encode(f, src[i]);
  EXPECT_EQ(a, b);
  std::vector<float> w(src.size());
  HalfToFloat(f.type, a.data(), w.data(), static_cast<int64_t>(a.size()));
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(static_cast<double>(w[i]), Decode(f, a[i]));
  EXPECT_EQ(internal::GetHalfKernels().tier, KernelTier());
}

INSTANTIATE_TEST_SUITE_P(Formats, HalfTest, ::testing::Values(kF16, kBf16),
                         [](const auto& info) { return HalfTypeName(info.param.type); });

}  // namespace
}  // namespace attn
