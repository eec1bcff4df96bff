// The page formats (kvformats/): each codec's codes against a float64 model
// of its quantizer written here, exactly (int8: round half to even of
// x / (max|x| / 127); fp8 e4m3: the nearest of the 127 finite e4m3
// magnitudes, ties to the even code), and each codec's in-register QK and
// PV against a float64 loop over the widened codes, for every row count
// the unrolled loops split differently (1-9), D and Dv multiples of 8 and
// 16 (the AVX2 and AVX-512 loops and their remainders) and page chunks of 1
// to 64 tokens; on the tier the CPU has and, through ATTN_MAX_ISA, each
// lower one. And the page layout: regions apart, inside the page, as many
// tokens as fit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "attn/cpu_info.h"
#include "attn/half.h"
#include "kv_quant_model.h"
#include "kvformats/formats.h"
#include "kvformats/page_codec.h"

namespace {

using attn::internal::CodecOf;
using attn::internal::PageCodec;
using attn::internal::PageFormat;
using attn_test::E4m3Value;
using attn_test::ModelFp8;
using attn_test::ModelInt8;
using attn_test::Quantized;

// Rows of values a quantizer meets: N(0,1), outliers, exact halves between
// codes, zeros, tiny values.
std::vector<std::vector<float>> QuantizerInputs(std::mt19937& rng, int64_t dim) {
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < 200; ++i) {
    std::vector<float> x(static_cast<size_t>(dim));
    for (float& v : x) v = n01(rng);
    if (i % 4 == 1) x[static_cast<size_t>(i) % x.size()] *= 20.0f;  // an outlier channel
    if (i % 4 == 2) {  // 127 at the largest: code k lies at k, halves in between
      for (size_t j = 0; j < x.size(); ++j) x[j] = static_cast<float>(j % 255) / 2.0f - 63.5f;
      x[0] = 127.0f;
    }
    if (i % 4 == 3) {
      for (float& v : x) v *= 1e-3f;
    }
    rows.push_back(x);
  }
  rows.push_back(std::vector<float>(static_cast<size_t>(dim), 0.0f));
  std::vector<float> tiny(static_cast<size_t>(dim), 0.0f);
  tiny[1] = -1e-30f;
  rows.push_back(tiny);
  return rows;
}

void ExpectCodesAsModelled(PageFormat f, Quantized (*model)(const std::vector<float>&)) {
  const PageCodec& c = CodecOf(f);
  ASSERT_TRUE(c.scaled);
  std::mt19937 rng(11);
  for (int64_t dim : {8, 64, 128}) {
    int row = 0;
    for (const std::vector<float>& x : QuantizerInputs(rng, dim)) {
      SCOPED_TRACE("dim " + std::to_string(dim) + " row " + std::to_string(row++));
      std::vector<uint8_t> codes(static_cast<size_t>(dim));
      const float factor = c.encode(x.data(), dim, codes.data());
      const Quantized want = model(x);
      ASSERT_EQ(factor, want.factor);
      ASSERT_EQ(codes, want.codes);
      std::vector<float> widened(static_cast<size_t>(dim));
      c.widen(codes.data(), 1, dim, widened.data());
      for (int64_t i = 0; i < dim; ++i) ASSERT_EQ(double(widened[i]), want.raw[i]) << i;
    }
  }
}

TEST(PageCodecs, Int8CodesAreTheQuantizersExactly) {
  ExpectCodesAsModelled(PageFormat::kInt8, ModelInt8);
}

TEST(PageCodecs, Fp8CodesAreTheNearestE4m3Exactly) {
  ExpectCodesAsModelled(PageFormat::kFp8E4M3, ModelFp8);
  // Exact ties: with 448 in the row the scale is 1, so each midpoint between
  // two neighbouring e4m3 values must go to the even code, and values past
  // 448 (none here) would saturate.
  const PageCodec& fp8 = CodecOf(PageFormat::kFp8E4M3);
  std::vector<float> ties = {448.0f};
  for (int c = 0; c < 0x7E; ++c) {
    ties.push_back(static_cast<float>((E4m3Value(c) + E4m3Value(c + 1)) / 2));
    ties.push_back(-ties.back());
  }
  // The encoder's thresholds and their float neighbours: 2^-7 (0 or 2^-6
  // below it), 2^-6 (the smallest normal code), 448 (saturation).
  for (float t : {0x1p-7f, 0x1p-6f, 448.0f}) {
    for (float x : {std::nextafter(t, 0.0f), t, std::nextafter(t, 1000.0f)}) {
      if (x > 448.0f) continue;  // 448 is the row's largest
      ties.push_back(x);
      ties.push_back(-x);
    }
  }
  std::vector<uint8_t> tie_codes(ties.size());
  ASSERT_EQ(fp8.encode(ties.data(), static_cast<int64_t>(ties.size()), tie_codes.data()), 256.0f);
  ASSERT_EQ(tie_codes, ModelFp8(ties).codes);
  for (size_t i = 1; i < 1 + 2 * 0x7E; ++i) ASSERT_EQ(tie_codes[i] % 2, 0) << ties[i];
  // Every code widens to its value (times 2^-8): subnormals, 448, both signs.
  const PageCodec& c = CodecOf(PageFormat::kFp8E4M3);
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) == 0x7F) continue;  // e4m3's NaN: never written
    const uint8_t code = static_cast<uint8_t>(b);
    float w;
    c.widen(&code, 1, 1, &w);
    ASSERT_EQ(double(w), E4m3Value(b) / 256.0) << b;
  }
}

// Channel c's code in an int4 row of `dim`: chunks of 32 channels (the
// last one w wide), byte i of a chunk holding channel i in its low nibble
// and channel i + w / 2 in its high one.
uint8_t Nibble(const uint8_t* row, int64_t dim, int64_t c) {
  const int64_t chunk = c / 32 * 32, w = std::min<int64_t>(32, dim - chunk), i = c - chunk;
  return i < w / 2 ? row[chunk / 2 + i] & 0xF : row[chunk / 2 + i - w / 2] >> 4;
}

// Channel c's code of token j in an int4 key block of g tokens: groups of
// 16 tokens (the last m = g mod 16), (dim + 1) / 2 bytes a token; in a
// group, octets of channels m * 4 bytes apart; a token's 4 bytes in a
// whole octet are two little-endian words, word c % 2 holding channel c
// of the octet in bits 4 * ((c % 8) / 2); in an octet of w < 8 channels,
// (w + 1) / 2 bytes a token, two channels a byte, low nibble first.
uint8_t KeyNibble(const uint8_t* block, int64_t g, int64_t dim, int64_t j, int64_t c) {
  const int64_t g0 = j - j % 16, m = std::min<int64_t>(16, g - g0);
  const int64_t o = c - c % 8, w = std::min<int64_t>(8, dim - o);
  const uint8_t* unit = block + g0 * ((dim + 1) / 2) + o / 2 * m;
  if (w < 8) {
    const uint8_t b = unit[(j - g0) * ((w + 1) / 2) + (c - o) / 2];
    return (c - o) % 2 == 0 ? b & 0xF : b >> 4;
  }
  const uint8_t* t = unit + 4 * (j - g0);
  const uint32_t word = t[2 * (c % 2)] | (uint32_t{t[2 * (c % 2) + 1]} << 8);
  return static_cast<uint8_t>((word >> (4 * ((c % 8) / 2))) & 0xF);
}

// int4 values: per token, groups of 64 channels, each with its scale and
// minimum in the row; keys: per channel over a block. Both against
// kv_quant_model.h's int4 group model exactly (codes, scales, minimums and
// the widened values).
TEST(PageCodecs, Int4ValuesAndKeyBlocksAreTheQuantizersExactly) {
  const PageCodec& v4 = CodecOf(PageFormat::kInt4Values);
  const PageCodec& k4 = CodecOf(PageFormat::kInt4Keys);
  ASSERT_TRUE(k4.blocked);
  std::mt19937 rng(13);
  for (int64_t dim : {8, 64, 100, 128}) {
    for (const std::vector<float>& x : QuantizerInputs(rng, dim)) {
      std::vector<uint8_t> row(static_cast<size_t>(v4.row_bytes(dim)));
      v4.encode(x.data(), dim, row.data());
      std::vector<float> widened(static_cast<size_t>(dim));
      v4.widen(row.data(), 1, dim, widened.data());
      const Quantized want = attn_test::ModelInt4Values(x);
      for (int64_t c = 0; c < dim; ++c) {
        const uint8_t code = Nibble(row.data(), dim, c);
        ASSERT_EQ(code, want.codes[c]) << dim << " " << c;
        ASSERT_EQ(widened[c], static_cast<float>(want.value[c])) << dim << " " << c;
      }
    }
    // A block of 37 tokens: each channel over the block.
    const int64_t g = 37;
    std::vector<float> block;
    for (const std::vector<float>& x : QuantizerInputs(rng, dim)) {
      block.insert(block.end(), x.begin(), x.end());
      if (static_cast<int64_t>(block.size()) == g * dim) break;
    }
    block[5 * dim + 1] = 40.0f;  // an outlier channel on one token
    std::vector<uint8_t> rows(static_cast<size_t>(g * k4.row_bytes(dim)));
    std::vector<float> meta(static_cast<size_t>(2 * dim)), back(static_cast<size_t>(g * dim));
    k4.quantize_block(block.data(), g, dim, rows.data(), meta.data());
    k4.widen_block(rows.data(), g, meta.data(), 0, g, dim, back.data());
    // A run inside the block (from mid-group to mid-group) widens the same.
    std::vector<float> run(static_cast<size_t>(20 * dim));
    k4.widen_block(rows.data(), g, meta.data(), 5, 20, dim, run.data());
    ASSERT_TRUE(std::equal(run.begin(), run.end(), back.begin() + 5 * dim));
    std::vector<uint8_t> codes(static_cast<size_t>(g));
    std::vector<float> held(static_cast<size_t>(g));
    for (int64_t c = 0; c < dim; ++c) {
      float scale, lo;
      attn_test::ModelInt4Group(block.data() + c, g, dim, &scale, &lo, codes.data(), held.data());
      ASSERT_EQ(meta[c], scale);
      ASSERT_EQ(meta[dim + c], lo);
      for (int64_t j = 0; j < g; ++j) {
        ASSERT_EQ(KeyNibble(rows.data(), g, dim, j, c), codes[j]) << c << "," << j;
        ASSERT_EQ(back[j * dim + c], held[j]) << c << "," << j;
      }
    }
  }
}

// ---- the in-register loops --------------------------------------------------

// A page of `n` codes of format f, and the values they widen to.
struct Page {
  std::vector<uint8_t> bytes;
  std::vector<double> held;
};

Page Store(PageFormat f, int64_t n, std::mt19937& rng) {
  Page p;
  std::uniform_int_distribution<int> u(-16, 16);
  if (f == PageFormat::kInt8 || f == PageFormat::kFp8E4M3) {
    std::uniform_int_distribution<int> b(0, 255);
    for (int64_t i = 0; i < n; ++i) {
      int code = b(rng);
      if (f == PageFormat::kInt8) {
        code = code == 128 ? 0 : code;  // -128: never written
        p.held.push_back(static_cast<int8_t>(code));
      } else {
        if ((code & 0x7F) == 0x7F) code = 0x7E;     // NaN: never written
        if ((code & 0x78) == 0) code &= 0x80;       // subnormals: never written
        p.held.push_back(E4m3Value(code) / 256.0);  // as the loops widen it
      }
      p.bytes.push_back(static_cast<uint8_t>(code));
    }
    return p;
  }
  // Values with few mantissa bits: exact in bf16 and f16.
  const size_t es = f == PageFormat::kFloat32 ? 4 : 2;
  p.bytes.resize(static_cast<size_t>(n) * es);
  for (int64_t i = 0; i < n; ++i) {
    const float x = static_cast<float>(u(rng)) / 8.0f;
    if (f == PageFormat::kFloat32) {
      std::memcpy(&p.bytes[i * 4], &x, 4);
    } else {
      uint16_t h;
      attn::FloatToHalf(
          f == PageFormat::kBFloat16 ? attn::HalfType::kBFloat16 : attn::HalfType::kFloat16, &x, &h,
          1);
      std::memcpy(&p.bytes[i * 2], &h, 2);
    }
    p.held.push_back(x);
  }
  return p;
}

std::vector<float> Values(size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> u(-16, 16);
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>(u(rng)) / 8.0f;
  return x;
}

class PageLoops : public ::testing::TestWithParam<PageFormat> {};

// fp8's loops on a CPU with a bf16 unit (Fp8Bf16Dots) round the query
// rows and the weights to bf16 (8 significant bits): at most 2^-8 of each
// product off.
bool Fp8Bf16Dots(int64_t d) {
  return attn::KernelTier() == attn::IsaTier::kAvx512 && d % 32 == 0 &&
         attn::Bf16MatrixTier() != attn::Bf16Tier::kNone;
}

TEST_P(PageLoops, QkAndPvEqualFloat64) {
  if (!attn::internal::InRegisterTier()) {
    GTEST_SKIP() << "the portable tier reads pages through the portable loops";
  }
  const PageCodec& codec = CodecOf(GetParam());
  int64_t d = 0;
  // int8 rounds the query rows or the weights to int16 against their
  // largest: at most max / 65534 off an element, times the codes' sum (l1).
  auto Rounding = [&](double max, double l1, double abs) {
    if (GetParam() == PageFormat::kInt8) return max / 65534 * l1;
    if (GetParam() == PageFormat::kFp8E4M3 && Fp8Bf16Dots(d)) return abs / 256;
    return 0.0;
  };
  std::mt19937 rng(5);
  int cases = 0;
  // 96 and 160: the int8 and fp8 PV loops' 64-column passes, then one of 32.
  for (int64_t dd : {8, 16, 24, 32, 48, 64, 80, 96, 128, 160, 256}) {
    d = dd;
    // 6 and 7: four rows, then two or three (fp8's AVX2 loops take each).
    for (int64_t rows : {1, 2, 3, 4, 5, 6, 7, 8, 9}) {
      // 300: int8's PV in integer units takes 256 tokens at a time.
      for (int64_t c : {1, 2, 3, 5, 16, 63, 64, 300}) {
        SCOPED_TRACE("d " + std::to_string(d) + " rows " + std::to_string(rows) + " c " +
                     std::to_string(c));
        const std::vector<float> q = Values(static_cast<size_t>(rows * d), rng);
        const Page k = Store(GetParam(), c * d, rng);
        const Page v = Store(GetParam(), c * d, rng);
        const Page next = Store(GetParam(), c * d, rng);  // prefetched only
        const int64_t lds = c + 3;
        std::vector<float> s(static_cast<size_t>(rows * lds), -7.0f);
        codec.qk(q.data(), rows, k.bytes.data(), c, d, s.data(), lds, next.bytes.data());
        // Weights for PV: the scores scaled down, some exactly 0.
        std::vector<float> p(static_cast<size_t>(rows * lds));
        for (int64_t r = 0; r < rows; ++r) {
          double qmax = 0;
          for (int64_t x = 0; x < d; ++x) qmax = std::max(qmax, std::fabs(double(q[r * d + x])));
          for (int64_t j = 0; j < c; ++j) {
            double want = 0, l1 = 0, abs = 0;
            for (int64_t x = 0; x < d; ++x) {
              want += double(q[r * d + x]) * k.held[j * d + x];
              l1 += std::fabs(k.held[j * d + x]);
              abs += std::fabs(double(q[r * d + x]) * k.held[j * d + x]);
            }
            const double rounding = Rounding(qmax, l1, abs);
            ASSERT_NEAR(s[r * lds + j], want, 1e-4 * (1 + std::fabs(want)) + rounding)
                << r << "," << j;
            p[r * lds + j] = (j % 5 == 3) ? 0.0f : static_cast<float>((r + 1) * (j + 2)) / 64.0f;
          }
          for (int64_t j = c; j < lds; ++j) ASSERT_EQ(s[r * lds + j], -7.0f) << "written past c";
        }
        std::vector<float> o(static_cast<size_t>(rows * d));
        for (size_t i = 0; i < o.size(); ++i) o[i] = static_cast<float>(i % 7) / 4.0f;
        const std::vector<float> o0 = o;
        codec.pv(p.data(), rows, lds, v.bytes.data(), c, d, o.data(), next.bytes.data());
        for (int64_t r = 0; r < rows; ++r) {
          double pmax = 0;
          for (int64_t j = 0; j < c; ++j) pmax = std::max(pmax, double(p[r * lds + j]));
          for (int64_t x = 0; x < d; ++x) {
            double want = o0[r * d + x], l1 = 0, abs = 0;
            for (int64_t j = 0; j < c; ++j) {
              want += double(p[r * lds + j]) * v.held[j * d + x];
              l1 += std::fabs(v.held[j * d + x]);
              abs += std::fabs(double(p[r * lds + j]) * v.held[j * d + x]);
            }
            const double rounding = Rounding(pmax, l1, abs);
            ASSERT_NEAR(o[r * d + x], want, 1e-4 * (1 + std::fabs(want)) + rounding)
                << r << "," << x;
          }
        }
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 11 * 9 * 8);
  std::printf("%s, kernel tier %s\n", codec.name, attn::IsaTierName(attn::KernelTier()));
}

INSTANTIATE_TEST_SUITE_P(Formats, PageLoops,
                         ::testing::Values(PageFormat::kFloat32, PageFormat::kBFloat16,
                                           PageFormat::kFloat16, PageFormat::kInt8,
                                           PageFormat::kFp8E4M3));

// Whether got is sum_i a[i * sa] * b[i * sb] over n terms in float64,
// within rel of the sum of the products' magnitudes plus floor.
bool NearDot(float got, const float* a, int64_t sa, const double* b, int64_t sb, int64_t n,
             double rel, double floor) {
  double want = 0, abs = 0;
  for (int64_t i = 0; i < n; ++i) {
    want += double(a[i * sa]) * b[i * sb];
    abs += std::fabs(double(a[i * sa]) * b[i * sb]);
  }
  return std::fabs(got - want) <= abs * rel + floor;
}

// int8 and fp8 prepare a block of query rows once a kv head (rounded,
// scaled per row) and find it again by its address and content: the same
// 256 floats at the same address as 4 rows of 64 and then as 2 rows of 128
// (rows of different scales) must each be prepared for their own shape.
TEST(PageLoops, PreparedQueryRowsFollowTheirShape) {
  if (!attn::internal::InRegisterTier()) GTEST_SKIP() << "no in-register loops on this tier";
  std::mt19937 rng(17);
  std::vector<float> q = Values(256, rng);
  for (size_t i = 0; i < q.size(); ++i) q[i] *= float(1 + i / 64);  // row scales 1-4
  for (PageFormat f : {PageFormat::kInt8, PageFormat::kFp8E4M3}) {
    const PageCodec& codec = CodecOf(f);
    const int64_t c = 8;
    for (int64_t d : {64, 128, 64}) {
      SCOPED_TRACE(std::string(codec.name) + " d " + std::to_string(d));
      const int64_t rows = 256 / d;
      const Page k = Store(f, c * d, rng);
      std::vector<float> s(static_cast<size_t>(rows * c));
      codec.qk(q.data(), rows, k.bytes.data(), c, d, s.data(), c, nullptr);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < c; ++j) {
          ASSERT_TRUE(NearDot(s[r * c + j], &q[r * d], 1, &k.held[j * d], 1, d, 1.0 / 200, 1e-6))
              << r << "," << j;
        }
      }
    }
  }
}

// A decode task pins its query rows (PinQueryRows): int8 and fp8 then trust
// rows they prepared at the same address under the same pin without
// comparing them again. A new pin, no pin, or other rows taking the
// thread's cache slot (17 row sets through its 16 slots) must each be seen.
TEST(PageLoops, PinnedQueryRowsAreTrustedOnlyUnderTheirPin) {
  if (!attn::internal::InRegisterTier()) GTEST_SKIP() << "no in-register loops on this tier";
  std::mt19937 rng(23);
  const int64_t d = 64, rows = 4, c = 8, sets = 17, n = rows * d;
  for (PageFormat f : {PageFormat::kInt8, PageFormat::kFp8E4M3}) {
    const PageCodec& codec = CodecOf(f);
    SCOPED_TRACE(codec.name);
    std::vector<float> q = Values(static_cast<size_t>(sets * n), rng);
    const Page k = Store(f, c * d, rng);
    auto expect_scores = [&](int64_t set, const char* when) {
      const float* qs = q.data() + set * n;
      std::vector<float> s(static_cast<size_t>(rows * c));
      codec.qk(qs, rows, k.bytes.data(), c, d, s.data(), c, nullptr);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < c; ++j) {
          ASSERT_TRUE(NearDot(s[r * c + j], &qs[r * d], 1, &k.held[j * d], 1, d, 1.0 / 200, 1e-6))
              << when << ": set " << set << " row " << r << " key " << j;
        }
      }
    };
    attn::internal::PinQueryRows(q.data(), sets * n);
    for (int64_t set = 0; set < sets; ++set) expect_scores(set, "first pin");
    expect_scores(0, "back to a slot other rows took");
    for (int64_t x = 0; x < n; ++x) q[x] = -2.0f * q[x];
    attn::internal::PinQueryRows(q.data(), sets * n);
    expect_scores(0, "a new pin");
    attn::internal::UnpinQueryRows();
    for (int64_t x = 0; x < n; ++x) q[x] = 0.5f * q[x + n];
    expect_scores(0, "no pin");
  }
}

// fp8's bf16 loops scale each query row and each row of weights by a power
// of two before rounding them to bf16, so that no product of theirs with a
// code (the code's value times 2^-120 in bf16's places) falls into float32's
// subnormals, which VDPBF16PS flushes to 0. The AVX2 tier's channel-pair
// loops (pair_loops.h) meet the same codes as float32s and scale the same
// way. Rows from 2^-110 to 2^60 keep the bf16 rounding's relative
// precision; the float loops meet it anyway.
TEST(PageLoops, Fp8RowsFarFromOneKeepTheirPrecision) {
  if (!attn::internal::InRegisterTier()) GTEST_SKIP() << "no in-register loops on this tier";
  const PageCodec& codec = CodecOf(PageFormat::kFp8E4M3);
  std::mt19937 rng(21);
  const int64_t d = 64, rows = 5, c = 37;
  const double powers[rows] = {0x1p-110, 0x1p60, 1.0, 0x1p-20, 0x1p-90};
  std::vector<float> q = Values(static_cast<size_t>(rows * d), rng);
  std::vector<float> p(static_cast<size_t>(rows * c));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t x = 0; x < d; ++x) q[r * d + x] = float(q[r * d + x] * powers[r]);
    for (int64_t j = 0; j < c; ++j) p[r * c + j] = float((j + 1) * powers[(r + 2) % rows]);
  }
  const Page k = Store(PageFormat::kFp8E4M3, c * d, rng);
  const Page v = Store(PageFormat::kFp8E4M3, c * d, rng);
  std::vector<float> s(static_cast<size_t>(rows * c));
  codec.qk(q.data(), rows, k.bytes.data(), c, d, s.data(), c, nullptr);
  std::vector<float> o(static_cast<size_t>(rows * d), 0.0f);
  codec.pv(p.data(), rows, c, v.bytes.data(), c, d, o.data(), nullptr);
  // Within 2^-8 of the sum of the products' magnitudes (and float32's
  // accumulation).
  const double rel = 1.0 / 256 + 1e-5;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < c; ++j) {
      ASSERT_TRUE(NearDot(s[r * c + j], &q[r * d], 1, &k.held[j * d], 1, d, rel, 0))
          << r << "," << j;
    }
    for (int64_t x = 0; x < d; ++x) {
      ASSERT_TRUE(NearDot(o[r * d + x], &p[r * c], 1, &v.held[x], d, c, rel, 0)) << r << "," << x;
    }
  }
}

// int4's integer loops (int4_loops.cc) against float64 over the values the
// codes stand for (min + code * scale, in float64). QK rounds the query
// times the block's scales to int16 against its largest (at most 1/65534
// of it off an element, times the codes' sum); PV rounds each row's
// weights times the tokens' scales to bytes against the row's largest
// weight times the group's largest scale (at most 1/510 of that off a
// token, times the sum of |code - 8|). Widths that are not a multiple of 128 read a partial
// segment; on a tier without the loops QK is not offered and PV widens.
TEST(PageLoops, Int4KeyBlocksAndValuesEqualFloat64) {
  if (!attn::internal::InRegisterTier()) {
    GTEST_SKIP() << "the portable tier reads pages through the portable loops";
  }
  const PageCodec& k4 = CodecOf(PageFormat::kInt4Keys);
  const PageCodec& v4 = CodecOf(PageFormat::kInt4Values);
  std::mt19937 rng(17);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  int cases = 0;
  for (int64_t d : {32, 64, 96, 128, 160, 256}) {
    for (int64_t rows : {1, 3, 4, 5, 8}) {
      for (int64_t c : {1, 3, 4, 5, 63, 106, 212}) {
        SCOPED_TRACE("d " + std::to_string(d) + " rows " + std::to_string(rows) + " c " +
                     std::to_string(c));
        std::vector<float> x(static_cast<size_t>(c * d)), q(static_cast<size_t>(rows * d));
        for (float& v : x) v = n01(rng);
        for (int64_t j = 0; j < c; ++j) x[j * d + 3] = 15.0f + 5.0f * x[j * d + 3];  // outliers
        for (float& v : q) v = n01(rng);
        const int64_t kb = k4.row_bytes(d), vb = v4.row_bytes(d);
        std::vector<uint8_t> keys(static_cast<size_t>(c * kb)), values(static_cast<size_t>(c * vb));
        std::vector<float> meta(static_cast<size_t>(2 * d));
        k4.quantize_block(x.data(), c, d, keys.data(), meta.data());
        for (int64_t j = 0; j < c; ++j) v4.encode(x.data() + j * d, d, values.data() + j * vb);
        const int64_t lds = c + 3;
        std::vector<float> s(static_cast<size_t>(rows * lds), -7.0f);
        if (attn::internal::Int4Loops(d)) {
          attn::internal::QkInt4Block(q.data(), rows, keys.data(), c, meta.data(), 0, c, d,
                                      s.data(), lds, keys.data());
          // A run from mid-group to mid-group scores its keys the same, and
          // writes nothing outside them.
          const int64_t j0 = c / 3, n = std::max<int64_t>(1, c - j0 - 1), lr = n + 2;
          std::vector<float> part(static_cast<size_t>(rows * lr), -5.0f);
          attn::internal::QkInt4Block(q.data(), rows, keys.data(), c, meta.data(), j0, n, d,
                                      part.data(), lr, nullptr);
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t t = 0; t < lr; ++t) {
              ASSERT_EQ(part[r * lr + t], t < n ? s[r * lds + j0 + t] : -5.0f) << r << "," << t;
            }
          }
          for (int64_t r = 0; r < rows; ++r) {
            double qmax = 0;  // the largest of q times the block's scales
            for (int64_t i = 0; i < d; ++i)
              qmax = std::max(qmax, std::fabs(double(q[r * d + i]) * meta[i]));
            for (int64_t j = 0; j < c; ++j) {
              double want = 0, mag = 0, codes = 0;
              for (int64_t i = 0; i < d; ++i) {
                const int code = KeyNibble(keys.data(), c, d, j, i);
                const double held = double(meta[d + i]) + code * double(meta[i]);
                want += double(q[r * d + i]) * held;
                mag += std::fabs(double(q[r * d + i]) * held) +
                       std::fabs(double(q[r * d + i]) * meta[d + i]);
                codes += code;
              }
              ASSERT_NEAR(s[r * lds + j], want, qmax / 65534 * codes * 1.001 + 1e-5 * mag + 1e-6)
                  << r << "," << j;
            }
            for (int64_t j = c; j < lds; ++j) ASSERT_EQ(s[r * lds + j], -7.0f) << "written past c";
          }
        }
        // Weights in [0, 1] (a softmax's), some 0, one row all 0.
        std::vector<float> p(static_cast<size_t>(rows * lds));
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t j = 0; j < c; ++j) {
            p[r * lds + j] = (r == 2 || j % 5 == 3) ? 0.0f : std::exp(-std::fabs(n01(rng)));
          }
        }
        std::vector<float> o(static_cast<size_t>(rows * d));
        for (size_t i = 0; i < o.size(); ++i) o[i] = static_cast<float>(i % 7) / 4.0f;
        const std::vector<float> o0 = o;
        v4.pv(p.data(), rows, lds, values.data(), c, d, o.data(), values.data());
        for (int64_t r = 0; r < rows; ++r) {
          double pmax = 0;
          for (int64_t j = 0; j < c; ++j) pmax = std::max(pmax, double(p[r * lds + j]));
          for (int64_t i = 0; i < d; ++i) {
            const int64_t g = i / 64;
            double want = o0[r * d + i], mag = std::fabs(want), smax = 0, codes = 0;
            for (int64_t j = 0; j < c; ++j) {
              const uint8_t* row = values.data() + j * vb;
              float gm[2];
              std::memcpy(gm, row + d / 2 + 8 * g, 8);
              const int code = Nibble(row, d, i);
              const double held = double(gm[1]) + code * double(gm[0]);
              want += double(p[r * lds + j]) * held;
              mag += std::fabs(double(p[r * lds + j]) * held) +
                     std::fabs(double(p[r * lds + j])) * (std::fabs(gm[1]) + 8 * gm[0]);
              smax = std::max(smax, double(gm[0]));
              codes += std::abs(code - 8);  // the loops take codes less 8
            }
            const double rounding =
                attn::internal::Int4Loops(d) ? pmax * smax / 510 * codes * 1.001 : 0.0;
            ASSERT_NEAR(o[r * d + i], want, rounding + 1e-5 * mag + 1e-6) << r << "," << i;
          }
        }
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 6 * 5 * 7);
  // Every tier with in-register loops reads int4 in integer units (the
  // AVX2 tier used to widen each page to float32 first).
  EXPECT_TRUE(attn::internal::Int4Loops(128));
  std::printf("int4 loops %s, kernel tier %s\n", attn::internal::Int4Loops(128) ? "on" : "off",
              attn::IsaTierName(attn::KernelTier()));
}

// Values at their groups' extremes under equal, largest weights: every
// product is 255 times a code less 8 of -8 or 7, the most a partial sum in
// a narrow type can hold (the AVX2 loops add eight token pairs in int16,
// at most 8 * 2 * 255 * 8 = 32640). The sums match float64 over pages of
// 1 to 212 tokens, as far as the weights' rounding allows.
TEST(PageLoops, Int4ValuesAtTheirExtremesDoNotOverflow) {
  if (!attn::internal::InRegisterTier()) GTEST_SKIP() << "no in-register loops on this tier";
  const PageCodec& v4 = CodecOf(PageFormat::kInt4Values);
  for (int64_t d : {32, 128, 160}) {
    const int64_t vb = v4.row_bytes(d);
    for (int64_t c : {1, 15, 16, 17, 33, 106, 212}) {
      SCOPED_TRACE("d " + std::to_string(d) + " c " + std::to_string(c));
      std::vector<float> x(static_cast<size_t>(d));
      for (int64_t i = 0; i < d; ++i) x[i] = i % 2 == 0 ? -10.0f : 10.0f;  // codes 0 and 15
      std::vector<uint8_t> values(static_cast<size_t>(c * vb));
      for (int64_t j = 0; j < c; ++j) v4.encode(x.data(), d, values.data() + j * vb);
      const int64_t rows = 5;
      std::vector<float> p(static_cast<size_t>(rows * c), 1.0f), o(static_cast<size_t>(rows * d));
      v4.pv(p.data(), rows, c, values.data(), c, d, o.data(), nullptr);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < d; ++i) {
          const double want = double(c) * (i % 2 == 0 ? -10.0 : 10.0);
          ASSERT_NEAR(o[r * d + i], want, 1e-4 * std::fabs(want)) << r << "," << i;
        }
      }
    }
  }
}

// ---- the page's layout ------------------------------------------------------

TEST(PageLayout, RegionsApartInsideThePageAndAsManyTokensAsFit) {
  const PageFormat all[] = {PageFormat::kFloat32, PageFormat::kBFloat16, PageFormat::kFloat16,
                            PageFormat::kInt8, PageFormat::kFp8E4M3};
  for (PageFormat kf : all) {
    for (PageFormat vf : all) {
      for (int64_t d : {8, 64, 128, 200}) {
        const int64_t page = 32 << 10;
        const auto l = attn::internal::MakePageLayout(kf, vf, d, d, page);
        const int64_t T = l.tokens_per_page;
        SCOPED_TRACE(std::string(CodecOf(kf).name) + "/" + CodecOf(vf).name + " d " +
                     std::to_string(d));
        ASSERT_GE(T, 1);
        // [start, end) of each region, in page order.
        std::vector<std::pair<int64_t, int64_t>> regions = {
            {l.key.offset, l.key.offset + T * l.key.row_bytes}};
        // factor_bytes (what the decode prefetches of a page ahead): a
        // float a token for a scaled side, none for another.
        EXPECT_EQ(l.key.factor_bytes, l.key.codec->scaled ? 4 * T : 0);
        EXPECT_EQ(l.value.factor_bytes, l.value.codec->scaled ? 4 * T : 0);
        if (l.key.codec->scaled) regions.push_back({l.key.factors, l.key.factors + 4 * T});
        regions.push_back({l.value.offset, l.value.offset + T * l.value.row_bytes});
        if (l.value.codec->scaled) regions.push_back({l.value.factors, l.value.factors + 4 * T});
        for (size_t i = 0; i < regions.size(); ++i) {
          ASSERT_EQ(regions[i].first % 64, 0);
          if (i > 0) {
            ASSERT_GE(regions[i].first, regions[i - 1].second);
          }
        }
        ASSERT_LE(regions.back().second, page);
        // One token more would not fit even unaligned (or the alignment
        // cost it: at most a cache line a region).
        ASSERT_GT((T + 1) * l.token_bytes + 64 * static_cast<int64_t>(regions.size()), page);
      }
    }
  }
  // int8 keys and values of D = 128: 128 + 4 bytes a side, 0.52 of bf16's.
  const auto i8 =
      attn::internal::MakePageLayout(PageFormat::kInt8, PageFormat::kInt8, 128, 128, 32 << 10);
  EXPECT_EQ(i8.token_bytes, 264);
  EXPECT_EQ(i8.tokens_per_page, 124);  // 32768 / 264, each region aligned
  EXPECT_EQ(i8.key.factor_bytes, 124 * 4);
  EXPECT_EQ(i8.value.factor_bytes, 124 * 4);
  // int4 keys and values of D = 128, a bf16 staging page: 64 + 80 bytes a
  // token (values' scales and minimums per 64 channels), two blocks of 106
  // (each block's 1 KiB of meta; a block being filled fits one page):
  // 0.30 of bf16's bytes a token.
  const auto i4 = attn::internal::MakePageLayout(PageFormat::kInt4Keys, PageFormat::kInt4Values,
                                                 128, 128, 32 << 10, PageFormat::kBFloat16);
  EXPECT_EQ(i4.tokens_per_page, 212);
  EXPECT_EQ(i4.block_tokens, 106);
  EXPECT_LE(64.0 / i4.tokens_per_page, 0.31);
  EXPECT_LE(i4.block_tokens * 256, 32 << 10);
  // The keys' meta: a (scale, min) float pair a channel a block, ending
  // before the values; the values keep theirs in their rows.
  EXPECT_EQ(i4.key.factor_bytes, 2 * 2 * 128 * 4);
  EXPECT_LE(i4.key.factors + i4.key.factor_bytes, i4.value.offset);
  EXPECT_EQ(i4.value.factor_bytes, 0);
}

}  // namespace
