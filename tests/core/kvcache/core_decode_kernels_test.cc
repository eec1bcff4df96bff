// The decode kernel's page dot products (kvcache/decode_kernels.h) against a
// float64 loop, for every element type, every row count the unrolled loops
// split differently (1-9), D and Dv multiples of 8 and 16 (the AVX2 and
// AVX-512 loops and their remainders) and page chunks of 1 to 64 tokens; on
// the tier the CPU has and, through ATTN_MAX_ISA, each lower one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "attn/cpu_info.h"
#include "attn/half.h"
#include "kvcache/decode_kernels.h"

namespace {

using attn::internal::PageElem;

// A page of `n` floats stored as `e`, and the floats it holds.
struct Page {
  std::vector<uint8_t> bytes;
  std::vector<double> held;
};

Page Store(PageElem e, const std::vector<float>& x) {
  Page p;
  const size_t es = e == PageElem::kFloat32 ? 4 : 2;
  p.bytes.resize(x.size() * es);
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], 4);
    if (e == PageElem::kFloat32) {
      std::memcpy(&p.bytes[i * 4], &x[i], 4);
      p.held.push_back(x[i]);
    } else if (e == PageElem::kBFloat16) {
      const uint16_t h = static_cast<uint16_t>(bits >> 16);  // exact: the test's values fit
      std::memcpy(&p.bytes[i * 2], &h, 2);
      const uint32_t back = static_cast<uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &back, 4);
      p.held.push_back(f);
    } else {
      uint16_t h;
      float back;
      attn::FloatToHalf(attn::HalfType::kFloat16, &x[i], &h, 1);
      attn::HalfToFloat(attn::HalfType::kFloat16, &h, &back, 1);
      std::memcpy(&p.bytes[i * 2], &h, 2);
      p.held.push_back(back);
    }
  }
  return p;
}

// Values with few mantissa bits: exact in bf16 and f16, so the page holds
// exactly what the reference uses.
std::vector<float> Values(size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> u(-16, 16);
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>(u(rng)) / 8.0f;
  return x;
}

class DecodeKernelPages : public ::testing::TestWithParam<PageElem> {};

TEST_P(DecodeKernelPages, QkAndPvEqualFloat64) {
  if (!attn::internal::GetDecodeKernels().in_register) {
    GTEST_SKIP() << "the portable tier reads pages through the portable loops";
  }
  const PageElem e = GetParam();
  std::mt19937 rng(5);
  int cases = 0;
  for (int64_t d : {8, 16, 24, 32, 48, 64, 80, 128, 256}) {
    for (int64_t rows : {1, 2, 3, 4, 5, 8, 9}) {
      for (int64_t c : {1, 2, 3, 5, 16, 63, 64}) {
        SCOPED_TRACE("d " + std::to_string(d) + " rows " + std::to_string(rows) + " c " +
                     std::to_string(c));
        const std::vector<float> q = Values(static_cast<size_t>(rows * d), rng);
        const Page k = Store(e, Values(static_cast<size_t>(c * d), rng));
        const Page v = Store(e, Values(static_cast<size_t>(c * d), rng));
        const Page next = Store(e, Values(static_cast<size_t>(c * d), rng));  // prefetched only
        const int64_t lds = c + 3;
        std::vector<float> s(static_cast<size_t>(rows * lds), -7.0f);
        attn::internal::QkPage(e, q.data(), rows, k.bytes.data(), c, d, s.data(), lds,
                               next.bytes.data());
        // Weights for PV: the scores scaled down, some exactly 0.
        std::vector<float> p(static_cast<size_t>(rows * lds));
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t j = 0; j < c; ++j) {
            double want = 0;
            for (int64_t x = 0; x < d; ++x) want += double(q[r * d + x]) * k.held[j * d + x];
            ASSERT_NEAR(s[r * lds + j], want, 1e-4 * (1 + std::fabs(want))) << r << "," << j;
            p[r * lds + j] = (j % 5 == 3) ? 0.0f : static_cast<float>((r + 1) * (j + 2)) / 64.0f;
          }
          for (int64_t j = c; j < lds; ++j) ASSERT_EQ(s[r * lds + j], -7.0f) << "written past c";
        }
        std::vector<float> o(static_cast<size_t>(rows * d));
        for (size_t i = 0; i < o.size(); ++i) o[i] = static_cast<float>(i % 7) / 4.0f;
        const std::vector<float> o0 = o;
        attn::internal::PvPage(e, p.data(), rows, lds, v.bytes.data(), c, d, o.data(),
                               next.bytes.data());
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t x = 0; x < d; ++x) {
            double want = o0[r * d + x];
            for (int64_t j = 0; j < c; ++j) want += double(p[r * lds + j]) * v.held[j * d + x];
            ASSERT_NEAR(o[r * d + x], want, 1e-4 * (1 + std::fabs(want))) << r << "," << x;
          }
        }
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 9 * 7 * 7);
  std::printf("kernel tier %s\n", attn::IsaTierName(attn::KernelTier()));
}

INSTANTIATE_TEST_SUITE_P(Elems, DecodeKernelPages,
                         ::testing::Values(PageElem::kFloat32, PageElem::kBFloat16,
                                           PageElem::kFloat16));

}  // namespace
