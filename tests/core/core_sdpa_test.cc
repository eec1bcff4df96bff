// ScaledDotProductAttention against the float64 reference: the seed's worked
// example, a sweep of shapes x ranks x mask combinations, fully masked rows,
// strided inputs, thread counts, cancellation and the error messages.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "attn/attention.h"
#include "attn/cpu_info.h"
#include "attn/threading.h"
#include "float64_reference.h"
#include "status_matchers.h"
#include "tensor_compare.h"

namespace attn {
namespace {

using attn_test::AllClose;
using attn_test::ExpectInvalid;
using attn_test::MaxAbs;
using attn_test::RandomFloats;
using attn_test::ToDouble;

constexpr double kRtol = 1e-5;

// The seed's worked example: X is 5x2, W^Q = W^K = W^V = I, d_k = 2, so the
// self-attention is SDPA(X, X, X) with scale 1/sqrt(2).
TEST(SeedExample, SelfAttentionMatchesFloat64Recomputation) {
  const std::vector<float> x = {1, 0, 0, 1, 1, 1, 1, 1, 0.5f, 1};
  const TensorView xv = TensorView::Dense(x.data(), {5, 2});
  ScaledDotProductAttentionOptions opt;
  opt.need_weights = true;
  auto r = ScaledDotProductAttention(xv, xv, xv, opt);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->output.shape, (Shape{5, 2}));
  EXPECT_EQ(r->weights->shape, (Shape{5, 5}));

  attn_test::RefProblem p;
  p.lq = p.lk = 5, p.d = p.dv = 2;
  p.q = p.k = p.v = ToDouble(x.data(), x.size());
  p.scale = 1.0 / std::sqrt(2.0);
  auto ref = attn_test::ReferenceAttention(p);
  EXPECT_TRUE(AllClose(r->output.data.data(), ref.out, kRtol, 0));
  EXPECT_TRUE(AllClose(r->weights->data.data(), ref.weights, kRtol, 0));

  // The exact values quoted in shared/seeds/README.md (the seed's own
  // printed numbers are rounded and partly wrong).
  EXPECT_NEAR(r->output.data[0], 0.7988, 1e-4);
  EXPECT_NEAR(r->output.data[1], 0.7616, 1e-4);
  const double w0[5] = {0.2384, 0.1175, 0.2384, 0.2384, 0.1674};
  for (int j = 0; j < 5; ++j) EXPECT_NEAR(r->weights->data[j], w0[j], 1e-4) << j;
  for (int i = 0; i < 5; ++i) {
    double row = 0;
    for (int j = 0; j < 5; ++j) row += r->weights->data[i * 5 + j];
    EXPECT_NEAR(row, 1.0, 1e-6) << "weights row " << i << " must sum to 1";
  }
}

enum MaskBits { kCausal = 1, kPadding = 2, kBias = 4 };

struct Case {
  int rank;  // 2, 3 or 4
  int64_t b, h, lq, lk, d, dv;
  int masks;
  int bias_rank;  // 2, 3 or 4 when kBias
  bool weights;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string s = "r" + std::to_string(c.rank) + "_b" + std::to_string(c.b) + "h" +
                  std::to_string(c.h) + "_q" + std::to_string(c.lq) + "k" + std::to_string(c.lk) +
                  "_d" + std::to_string(c.d) + "v" + std::to_string(c.dv);
  if (c.masks & kCausal) s += "_causal";
  if (c.masks & kPadding) s += "_kpm";
  if (c.masks & kBias) s += "_bias" + std::to_string(c.bias_rank);
  if (c.weights) s += "_w";
  return s;
}

class SdpaSweep : public ::testing::TestWithParam<Case> {};

TEST_P(SdpaSweep, MatchesFloat64Reference) {
  const Case c = GetParam();
  const int64_t b = c.rank >= 3 ? c.b : 1, h = c.rank == 4 ? c.h : 1;
  std::mt19937 rng(static_cast<unsigned>(c.lq * 131 + c.lk * 7 + c.d + c.masks * 1000));
  auto q = RandomFloats(b * h * c.lq * c.d, rng);
  auto k = RandomFloats(b * h * c.lk * c.d, rng);
  auto v = RandomFloats(b * h * c.lk * c.dv, rng);
  Shape lead;
  if (c.rank >= 3) lead.push_back(b);
  if (c.rank == 4) lead.push_back(h);
  auto shape = [&](int64_t l, int64_t d) {
    Shape s = lead;
    s.push_back(l), s.push_back(d);
    return s;
  };

  attn_test::RefProblem p;
  p.b = b, p.h = h, p.lq = c.lq, p.lk = c.lk, p.d = c.d, p.dv = c.dv;
  p.q = ToDouble(q.data(), q.size());
  p.k = ToDouble(k.data(), k.size());
  p.v = ToDouble(v.data(), v.size());
  p.scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  p.causal = (c.masks & kCausal) != 0;

  ScaledDotProductAttentionOptions opt;
  opt.need_weights = c.weights;
  opt.masks.causal = p.causal;
  std::vector<uint8_t> kpm;
  if (c.masks & kPadding) {
    kpm.resize(b * c.lk);
    std::bernoulli_distribution pad(0.3);
    for (auto& m : kpm) m = pad(rng);
    kpm[0] = 1;  // pad key 0: with causal, query 0 is fully masked in batch 0
    if (b > 1) std::fill(kpm.begin() + c.lk, kpm.begin() + 2 * c.lk, 1);  // a fully padded batch
    p.kpm = kpm;
    opt.masks.key_padding_mask = TensorView::DenseBool(kpm.data(), {b, c.lk});
  }
  std::vector<float> bias;
  if (c.masks & kBias) {
    // Broadcast from [Lq, Lk], [B, Lq, Lk] or [B, H, Lq, Lk].
    const int64_t bb = c.bias_rank >= 3 ? b : 1, bh = c.bias_rank == 4 ? h : 1;
    bias = RandomFloats(bb * bh * c.lq * c.lk, rng, 2.0f);
    bias[bias.size() / 2] = -std::numeric_limits<float>::infinity();  // a masked key
    Shape bs = {c.lq, c.lk};
    if (c.bias_rank == 4) bs.insert(bs.begin(), bh);
    if (c.bias_rank >= 3) bs.insert(bs.begin(), bb);
    opt.masks.attn_bias = TensorView::Dense(bias.data(), bs);
    p.bias.resize(b * h * c.lq * c.lk);
    for (int64_t ib = 0; ib < b; ++ib)
      for (int64_t ih = 0; ih < h; ++ih)
        for (int64_t i = 0; i < c.lq * c.lk; ++i)
          p.bias[(ib * h + ih) * c.lq * c.lk + i] =
              bias[((bb > 1 ? ib : 0) * bh + (bh > 1 ? ih : 0)) * c.lq * c.lk + i];
  }

  auto r = ScaledDotProductAttention(TensorView::Dense(q.data(), shape(c.lq, c.d)),
                                     TensorView::Dense(k.data(), shape(c.lk, c.d)),
                                     TensorView::Dense(v.data(), shape(c.lk, c.dv)), opt);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->output.shape, shape(c.lq, c.dv));
  const auto ref = attn_test::ReferenceAttention(p);
  EXPECT_TRUE(AllClose(r->output.data.data(), ref.out, kRtol, MaxAbs(p.v)));
  for (float x : r->output.data) ASSERT_FALSE(std::isnan(x));
  if (c.weights) {
    ASSERT_TRUE(r->weights.has_value());
    EXPECT_EQ(r->weights->shape, shape(c.lq, c.lk));
    EXPECT_TRUE(AllClose(r->weights->data.data(), ref.weights, kRtol, 1e-6));
  } else {
    EXPECT_FALSE(r->weights.has_value());
  }
}

std::vector<Case> SweepCases() {
  std::vector<Case> cases;
  // Shapes around the 256 x 512 blocking, SIMD tails, D != Dv, Lq != Lk.
  const std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>> shapes = {
      {1, 1, 1, 1, 1, 1},     {2, 3, 7, 5, 4, 3},       {2, 2, 17, 33, 16, 16},
      {1, 2, 64, 64, 64, 64}, {2, 1, 300, 600, 32, 48}, {1, 2, 600, 300, 64, 32},
      {1, 1, 513, 1030, 8, 8}};
  for (const auto& [b, h, lq, lk, d, dv] : shapes) {
    for (int rank : {2, 3, 4}) {
      for (int masks = 0; masks < 8; ++masks) {
        for (bool w : {false, true}) {
          if (rank != 4 && masks != 0 && masks != 7 && w) continue;  // keep the sweep quick
          const int bias_rank = 2 + (masks + rank + static_cast<int>(lq)) % 3;
          cases.push_back({rank, b, h, lq, lk, d, dv, masks, (masks & kBias) ? bias_rank : 0, w});
        }
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, SdpaSweep, ::testing::ValuesIn(SweepCases()), CaseName);

TEST(Sdpa, FullyMaskedRowsGiveZerosNotNaN) {
  std::mt19937 rng(1);
  auto q = RandomFloats(2 * 4 * 8, rng), k = RandomFloats(2 * 6 * 8, rng),
       v = RandomFloats(2 * 6 * 8, rng);
  std::vector<uint8_t> kpm(2 * 6, 0);
  std::fill(kpm.begin(), kpm.begin() + 6, 1);  // every key of batch 0 padded
  std::vector<float> bias(4 * 6, 0.0f);
  for (int j = 0; j < 6; ++j) bias[2 * 6 + j] = -INFINITY;  // query 2 sees nothing
  ScaledDotProductAttentionOptions opt;
  opt.need_weights = true;
  opt.masks.key_padding_mask = TensorView::DenseBool(kpm.data(), {2, 6});
  opt.masks.attn_bias = TensorView::Dense(bias.data(), {4, 6});
  auto r = ScaledDotProductAttention(TensorView::Dense(q.data(), {2, 4, 8}),
                                     TensorView::Dense(k.data(), {2, 6, 8}),
                                     TensorView::Dense(v.data(), {2, 6, 8}), opt);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (int i = 0; i < 4 * 8; ++i) EXPECT_EQ(r->output.data[i], 0.0f);            // batch 0
  for (int c = 0; c < 8; ++c) EXPECT_EQ(r->output.data[(4 + 2) * 8 + c], 0.0f);  // b1 q2
  for (int j = 0; j < 6; ++j) EXPECT_EQ(r->weights->data[(4 + 2) * 6 + j], 0.0f);
  double row = 0;
  for (int j = 0; j < 6; ++j) row += r->weights->data[(4 + 1) * 6 + j];
  EXPECT_NEAR(row, 1.0, 1e-6);
}

// NaN and Inf in the inputs are answered under IEEE rules (docs/api.md, "NaN and
// Inf in the inputs"), on both paths (online softmax, and exact with weights).
TEST(Sdpa, NanAndInfInInputsFollowIeee) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = INFINITY;
  for (bool weights : {false, true}) {
    SCOPED_TRACE(weights ? "with weights" : "without weights");
    std::mt19937 rng(7);
    const auto q0 = RandomFloats(3 * 4, rng), k0 = RandomFloats(4 * 4, rng),
               v0 = RandomFloats(4 * 4, rng);
    auto run = [&](std::vector<float> q, std::vector<float> k, std::vector<float> v,
                   const std::vector<float>* bias) {
      ScaledDotProductAttentionOptions opt;
      opt.need_weights = weights;
      if (bias) opt.masks.attn_bias = TensorView::Dense(bias->data(), {3, 4});
      auto r = ScaledDotProductAttention(TensorView::Dense(q.data(), {3, 4}),
                                         TensorView::Dense(k.data(), {4, 4}),
                                         TensorView::Dense(v.data(), {4, 4}), opt);
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      return r.ok() ? std::vector<float>(r->output.data.begin(), r->output.data.end())
                    : std::vector<float>(12, 0.0f);
    };
    auto row_is = [](const std::vector<float>& out, int row, auto pred) {
      for (int c = 0; c < 4; ++c) {
        if (!pred(out[row * 4 + c])) return false;
      }
      return true;
    };
    auto is_nan = [](float x) { return std::isnan(x); };
    auto finite = [](float x) { return std::isfinite(x); };
    // A NaN in query row 0: that row is NaN, the others are untouched.
    auto q = q0;
    q[1] = nan;
    auto out = run(q, k0, v0, nullptr);
    const auto clean = run(q0, k0, v0, nullptr);
    EXPECT_TRUE(row_is(out, 0, is_nan));
    for (int i = 4; i < 12; ++i) EXPECT_EQ(out[i], clean[i]);
    // A NaN in a key: every row attends to it, every row is NaN.
    auto k = k0;
    k[1 * 4 + 2] = nan;
    out = run(q0, k, v0, nullptr);
    for (int row = 0; row < 3; ++row) EXPECT_TRUE(row_is(out, row, is_nan)) << row;
    // +Inf in a value: that column is +Inf in every row, the rest finite.
    auto v = v0;
    v[2 * 4 + 3] = inf;
    out = run(q0, k0, v, nullptr);
    for (int row = 0; row < 3; ++row) {
      EXPECT_EQ(out[row * 4 + 3], inf) << row;
      for (int c = 0; c < 3; ++c) EXPECT_TRUE(std::isfinite(out[row * 4 + c])) << row;
    }
    // -Inf bias masks a key; +Inf bias makes its row NaN (exp(inf - inf)).
    std::vector<float> bias(12, 0.0f);
    bias[0 * 4 + 1] = -inf;
    bias[2 * 4 + 0] = inf;
    out = run(q0, k0, v0, &bias);
    EXPECT_TRUE(row_is(out, 0, finite));
    EXPECT_TRUE(row_is(out, 1, finite));
    EXPECT_TRUE(row_is(out, 2, is_nan));
    // Row 0 equals attention over keys {0, 2, 3} alone.
    std::vector<float> k3, v3;
    for (int j : {0, 2, 3}) {
      k3.insert(k3.end(), k0.begin() + j * 4, k0.begin() + j * 4 + 4);
      v3.insert(v3.end(), v0.begin() + j * 4, v0.begin() + j * 4 + 4);
    }
    auto ref = ScaledDotProductAttention(TensorView::Dense(q0.data(), {1, 4}),
                                         TensorView::Dense(k3.data(), {3, 4}),
                                         TensorView::Dense(v3.data(), {3, 4}), {});
    ASSERT_TRUE(ref.ok());
    for (int c = 0; c < 4; ++c) EXPECT_NEAR(out[c], ref->output.data[c], 1e-6);
  }
}

TEST(Sdpa, StridedHeadsReadWithoutCopyMatchDense) {
  // Memory laid out [B, L, H, D] (what a projection produces), read as [B, H, L, D].
  const int64_t b = 2, l = 70, h = 3, d = 16;
  std::mt19937 rng(7);
  auto blhd = RandomFloats(b * l * h * d, rng);
  std::vector<float> bhld(blhd.size());
  for (int64_t ib = 0; ib < b; ++ib)
    for (int64_t il = 0; il < l; ++il)
      for (int64_t ih = 0; ih < h; ++ih)
        for (int64_t c = 0; c < d; ++c)
          bhld[((ib * h + ih) * l + il) * d + c] = blhd[((ib * l + il) * h + ih) * d + c];
  TensorView strided;
  strided.data = blhd.data();
  strided.shape = {b, h, l, d};
  strided.strides = {l * h * d, d, h * d, 1};
  ScaledDotProductAttentionOptions opt;
  opt.masks.causal = true;
  auto a = ScaledDotProductAttention(strided, strided, strided, opt);
  const TensorView dense = TensorView::Dense(bhld.data(), {b, h, l, d});
  auto e = ScaledDotProductAttention(dense, dense, dense, opt);
  ASSERT_TRUE(a.ok() && e.ok());
  EXPECT_EQ(a->output.data, e->output.data);
}

TEST(Sdpa, NonUnitInnerStrideIsSupported) {
  // A transposed view: element (l, c) of K at k[c * L + l].
  const int64_t l = 9, d = 5;
  std::mt19937 rng(3);
  auto q = RandomFloats(l * d, rng), kt = RandomFloats(l * d, rng);
  std::vector<float> k(l * d);
  for (int64_t i = 0; i < l; ++i)
    for (int64_t c = 0; c < d; ++c) k[i * d + c] = kt[c * l + i];
  TensorView kview{DataType::kFloat32, kt.data(), {l, d}, {1, l}};
  auto a = ScaledDotProductAttention(TensorView::Dense(q.data(), {l, d}), kview, kview);
  auto e = ScaledDotProductAttention(TensorView::Dense(q.data(), {l, d}),
                                     TensorView::Dense(k.data(), {l, d}),
                                     TensorView::Dense(k.data(), {l, d}));
  ASSERT_TRUE(a.ok() && e.ok());
  EXPECT_EQ(a->output.data, e->output.data);
}

TEST(Sdpa, ThreadCountDoesNotChangeResults) {
  std::mt19937 rng(5);
  const int64_t b = 1, h = 2, l = 700, d = 32;
  auto q = RandomFloats(b * h * l * d, rng), k = RandomFloats(b * h * l * d, rng),
       v = RandomFloats(b * h * l * d, rng);
  const TensorView qv = TensorView::Dense(q.data(), {b, h, l, d}),
                   kv = TensorView::Dense(k.data(), {b, h, l, d}),
                   vv = TensorView::Dense(v.data(), {b, h, l, d});
  SetComputeThreads(1);
  auto one = ScaledDotProductAttention(qv, kv, vv);
  SetComputeThreads(2);
  auto two = ScaledDotProductAttention(qv, kv, vv);
  SetComputeThreads(0);
  ASSERT_TRUE(one.ok() && two.ok());
  std::vector<double> want(one->output.data.begin(), one->output.data.end());
  EXPECT_TRUE(AllClose(two->output.data.data(), want, 1e-6, 1.0));
}

TEST(Sdpa, OutputAllocatorReceivesTheOutput) {
  std::mt19937 rng(6);
  const int64_t b = 2, h = 3, lq = 9, lk = 11, d = 8, dv = 5;
  auto q = RandomFloats(b * h * lq * d, rng), k = RandomFloats(b * h * lk * d, rng),
       v = RandomFloats(b * h * lk * dv, rng);
  const TensorView qv = TensorView::Dense(q.data(), {b, h, lq, d}),
                   kv = TensorView::Dense(k.data(), {b, h, lk, d}),
                   vv = TensorView::Dense(v.data(), {b, h, lk, dv});
  ScaledDotProductAttentionOptions opt;
  opt.masks.causal = true;
  opt.need_weights = true;
  auto owned = ScaledDotProductAttention(qv, kv, vv, opt);
  ASSERT_TRUE(owned.ok());
  std::vector<float> buffer(static_cast<size_t>(b * h * lq * dv), std::nanf(""));
  Shape asked;
  opt.output_allocator = [&](const Shape& shape) {
    asked = shape;
    return buffer.data();
  };
  auto r = ScaledDotProductAttention(qv, kv, vv, opt);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(asked, (Shape{b, h, lq, dv}));
  EXPECT_EQ(r->output.shape, asked);
  EXPECT_TRUE(r->output.data.empty());
  EXPECT_EQ(buffer, std::vector<float>(owned->output.data.begin(), owned->output.data.end()));
  EXPECT_EQ(r->weights->data, owned->weights->data);  // the weights stay core's
}

TEST(Sdpa, CustomScaleAndLargeScoresStayStable) {
  // Scores in the hundreds: a naive exp overflows; the running max keeps it finite.
  std::mt19937 rng(11);
  const int64_t l = 40, d = 8;
  auto q = RandomFloats(l * d, rng, 10.0f), k = RandomFloats(l * d, rng, 10.0f),
       v = RandomFloats(l * d, rng);
  ScaledDotProductAttentionOptions opt;
  opt.scale = 2.0f;
  auto r = ScaledDotProductAttention(TensorView::Dense(q.data(), {l, d}),
                                     TensorView::Dense(k.data(), {l, d}),
                                     TensorView::Dense(v.data(), {l, d}), opt);
  ASSERT_TRUE(r.ok());
  attn_test::RefProblem p;
  p.lq = p.lk = l, p.d = p.dv = d, p.scale = 2.0;
  p.q = ToDouble(q.data(), q.size()), p.k = ToDouble(k.data(), k.size());
  p.v = ToDouble(v.data(), v.size());
  // Scores ~1e3 carry float32 rounding of ~1e-4 into the exponent.
  EXPECT_TRUE(
      AllClose(r->output.data.data(), attn_test::ReferenceAttention(p).out, 1e-3, MaxAbs(p.v)));
}

// Every query's largest scores sit in later key blocks, mid-block: three
// 512-key blocks, key 1000 (the second block's 489th) about 12 above the
// first block's scores, key 1300 about 7 above that. The online softmax's
// lazy step (online_block.cc) then stops mid-row and rescales what it
// wrote (float32: reach 1), or keeps its running max with weights up to
// e^7 (bf16: reach 8). Float32 within 1e-5 of float64, bf16 within its
// 3e-2 contract, the lse too.
TEST(Sdpa, LaterBlocksPastTheRunningMaxMatchFloat64) {
  std::mt19937 rng(17);
  const int64_t h = 2, lq = 64, lk = 1536, d = 64, dv = 32;
  auto q = RandomFloats(h * lq * d, rng), k = RandomFloats(h * lk * d, rng),
       v = RandomFloats(h * lk * dv, rng);
  for (auto& x : q) x = 0.2f + 0.5f * std::fabs(x);  // positive: a key of all 3s scores high
  for (int64_t hh = 0; hh < h; ++hh) {
    std::fill_n(k.begin() + (hh * lk + 1000) * d, d, 3.0f);
    std::fill_n(k.begin() + (hh * lk + 1300) * d, d, 4.5f);
  }
  attn_test::RefProblem p;
  p.h = h, p.lq = lq, p.lk = lk, p.d = d, p.dv = dv, p.scale = 1.0 / std::sqrt(64.0);
  p.q = ToDouble(q.data(), q.size()), p.k = ToDouble(k.data(), k.size());
  p.v = ToDouble(v.data(), v.size());
  const auto ref = attn_test::ReferenceAttention(p);
  std::vector<double> ref_lse(static_cast<size_t>(h * lq));
  for (int64_t r = 0; r < h * lq; ++r) {  // log sum exp of the row's scores
    const int64_t hh = r / lq;
    std::vector<double> sc(static_cast<size_t>(lk));
    double m = -INFINITY;
    for (int64_t j = 0; j < lk; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < d; ++c) dot += p.q[r * d + c] * p.k[(hh * lk + j) * d + c];
      sc[j] = dot * p.scale;
      m = std::max(m, sc[j]);
    }
    double sum = 0;
    for (double x : sc) sum += std::exp(x - m);
    ref_lse[r] = m + std::log(sum);
  }
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "float32");
    ScaledDotProductAttentionOptions opt;
    opt.score.return_lse = true;
    opt.compute_precision = bf16 ? ComputePrecision::kBFloat16 : ComputePrecision::kFloat32;
    auto r = ScaledDotProductAttention(TensorView::Dense(q.data(), {h, lq, d}),
                                       TensorView::Dense(k.data(), {h, lk, d}),
                                       TensorView::Dense(v.data(), {h, lk, dv}), opt);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r->lse.has_value());
    if (bf16 && r->compute_precision != ComputePrecision::kBFloat16) continue;  // no bf16 tier
    const double tol = bf16 ? 3e-2 : kRtol;
    EXPECT_TRUE(AllClose(r->output.data.data(), ref.out, tol, bf16 ? 1.0 : MaxAbs(p.v)));
    EXPECT_TRUE(AllClose(r->lse->data.data(), ref_lse, tol, 1.0));
  }
}

TEST(Sdpa, NaNInInputsPropagatesToItsRowOnly) {
  std::vector<float> q = {1, 0, std::nanf(""), 1, 0.5f, 0.5f};
  std::vector<float> k = {1, 0, 0, 1, 1, 1};
  auto r = ScaledDotProductAttention(TensorView::Dense(q.data(), {3, 2}),
                                     TensorView::Dense(k.data(), {3, 2}),
                                     TensorView::Dense(k.data(), {3, 2}));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(std::isnan(r->output.data[2]) && std::isnan(r->output.data[3]));
  for (int i : {0, 1, 4, 5}) EXPECT_TRUE(std::isfinite(r->output.data[i])) << i;
}

TEST(Sdpa, EmptyKeysGiveZeros) {
  std::vector<float> q = {1, 2, 3, 4};
  auto r = ScaledDotProductAttention(TensorView::Dense(q.data(), {2, 2}),
                                     TensorView::Dense(nullptr, {0, 2}),
                                     TensorView::Dense(nullptr, {0, 3}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->output.shape, (Shape{2, 3}));
  for (float x : r->output.data) EXPECT_EQ(x, 0.0f);
}

TEST(Sdpa, CancelledCallReturnsCancelled) {
  std::vector<float> x(64 * 8, 1.0f);
  std::atomic<bool> cancelled{true};
  ScaledDotProductAttentionOptions opt;
  opt.cancelled = &cancelled;
  const TensorView v = TensorView::Dense(x.data(), {64, 8});
  auto r = ScaledDotProductAttention(v, v, v, opt);
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled);
}

TEST(Sdpa, KernelTierFollowsCpuAndAttnMaxIsa) {
  __builtin_cpu_init();
  IsaTier want = IsaTier::kPortable;
  if (__builtin_cpu_supports("avx512f")) {
    want = IsaTier::kAvx512;
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    want = IsaTier::kAvx2;
  }
  if (const char* cap = std::getenv("ATTN_MAX_ISA")) {
    ASSERT_TRUE(ParseIsaTier(cap).has_value()) << cap;
    want = std::min(want, *ParseIsaTier(cap));
  }
  EXPECT_EQ(KernelTier(), want) << IsaTierName(KernelTier());
  // Below AVX-512 our switch caps oneDNN too (unless ONEDNN_MAX_CPU_ISA is set).
  const std::string onednn = OneDnnIsaName();
  if (want != IsaTier::kAvx512 && std::getenv("ONEDNN_MAX_CPU_ISA") == nullptr) {
    EXPECT_EQ(onednn.find("avx512"), std::string::npos) << onednn;
  }
}

TEST(Sdpa, IsaTierNamesParseBack) {
  for (IsaTier t : {IsaTier::kPortable, IsaTier::kAvx2, IsaTier::kAvx512}) {
    EXPECT_EQ(ParseIsaTier(IsaTierName(t)), t);
  }
  EXPECT_FALSE(ParseIsaTier("avx").has_value());
  EXPECT_FALSE(ParseIsaTier("").has_value());
}

// ---- Errors: the exact code and a message naming the input and the mismatch.

struct ErrorCase {
  std::string name;
  Shape q, k, v;
  std::string message;
};

TEST(SdpaErrors, ShapeMismatchesNameTheInput) {
  std::vector<float> buf(4096, 0.5f);
  const std::vector<ErrorCase> cases = {
      {"key dim",
       {2, 4, 64},
       {2, 4, 32},
       {2, 4, 64},
       "key: last dim must equal query's (64), got 32"},
      {"value len",
       {2, 4, 8},
       {2, 4, 8},
       {2, 5, 8},
       "value: dim -2 (Lk) must equal key's (4), got 5"},
      {"rank", {2, 4, 8}, {4, 8}, {4, 8}, "key: rank must equal query's (3), got 2"},
      {"batch",
       {2, 4, 8},
       {3, 4, 8},
       {3, 4, 8},
       "key: dim 0 (batch) must equal query's (2), got 3"},
      // Fewer kv heads than query heads is grouped-query attention
      // (core_variants_test); a count that does not divide them is refused.
      {"heads",
       {1, 2, 4, 8},
       {1, 3, 4, 8},
       {1, 3, 4, 8},
       "key: dim 1 (kv heads) must divide query's heads (2), got 3"},
      {"value heads",
       {1, 4, 4, 8},
       {1, 2, 4, 8},
       {1, 4, 4, 8},
       "value: dim 1 (kv heads) must equal key's (2), got 4"},
      {"rank 1", {8}, {8}, {8}, "query: rank must be 2 to 4, got 1"},
      {"rank 5",
       {1, 1, 1, 2, 2},
       {1, 1, 1, 2, 2},
       {1, 1, 1, 2, 2},
       "query: rank must be 2 to 4, got 5"},
      {"negative", {2, -4}, {2, 4}, {2, 4}, "query: dims must be non-negative"},
      {"zero D", {2, 0}, {2, 0}, {2, 4}, "query: last dim (D) must be positive"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    ExpectInvalid(ScaledDotProductAttention(TensorView::Dense(buf.data(), c.q),
                                            TensorView::Dense(buf.data(), c.k),
                                            TensorView::Dense(buf.data(), c.v)),
                  c.message);
  }
}

TEST(SdpaCost, EstimateValidatesAndCounts) {
  std::vector<float> buf(2 * 3 * 7 * 8, 0.5f);
  const TensorView q = TensorView::Dense(buf.data(), {2, 3, 5, 8});
  const TensorView k = TensorView::Dense(buf.data(), {2, 3, 7, 8});
  const TensorView v = TensorView::Dense(buf.data(), {2, 3, 7, 4});
  ScaledDotProductAttentionOptions opt;
  opt.need_weights = true;
  auto c = EstimateScaledDotProductAttention(q, k, v, opt);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->work, 2 * 3 * 5 * 7 * 8);                              // B*H*Lq*Lk*D
  EXPECT_EQ(c->flops, 2.0 * 2 * 3 * 5 * 7 * (8 + 4));                 // QK^T and PV
  EXPECT_EQ(c->result_bytes, 4.0 * (2 * 3 * 5 * 4 + 2 * 3 * 5 * 7));  // output + weights
  // The same validation as the call itself.
  ExpectInvalid(EstimateScaledDotProductAttention(q, v, v),
                "key: last dim must equal query's (8), got 4");
}

TEST(SdpaErrors, OverflowingShapeIsRefusedBeforeAllocating) {
  std::vector<float> buf(16, 0.5f);
  const int64_t huge = int64_t{1} << 40;
  ExpectInvalid(ScaledDotProductAttention(TensorView::Dense(buf.data(), {huge, huge, 2}),
                                          TensorView::Dense(buf.data(), {huge, 2, 2}),
                                          TensorView::Dense(buf.data(), {huge, 2, 2})),
                "query: element count of [1099511627776, 1099511627776, 2] overflows int64");
}

TEST(SdpaErrors, EmptyTensorWithOverflowingDimsIsRefused) {
  // Found by fuzzing the server under UBSan: no elements, but Lq * Dv
  // overflowed in the output strides.
  const int64_t huge = int64_t{1} << 40;
  ExpectInvalid(ScaledDotProductAttention(TensorView::Dense(nullptr, {0, huge, huge}),
                                          TensorView::Dense(nullptr, {0, 2, huge}),
                                          TensorView::Dense(nullptr, {0, 2, huge})),
                "query: element count of [0, 1099511627776, 1099511627776] overflows int64");
  // Zero-size tensors whose other dims are sane are fine (an empty result).
  auto r = ScaledDotProductAttention(TensorView::Dense(nullptr, {0, 3, 4}),
                                     TensorView::Dense(nullptr, {0, 2, 4}),
                                     TensorView::Dense(nullptr, {0, 2, 5}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->output.shape, (Shape{0, 3, 5}));
}

TEST(SdpaErrors, MasksAndScale) {
  std::vector<float> x(2 * 4 * 8, 0.5f);
  std::vector<uint8_t> kpm(16, 0);
  const TensorView v = TensorView::Dense(x.data(), {2, 4, 8});
  auto run = [&](const ScaledDotProductAttentionOptions& o) {
    return ScaledDotProductAttention(v, v, v, o);
  };
  ScaledDotProductAttentionOptions o;
  o.masks.key_padding_mask = TensorView::DenseBool(kpm.data(), {2, 5});
  ExpectInvalid(run(o), "key_padding_mask: expected shape [2, 4], got [2, 5]");
  o.masks.key_padding_mask = TensorView::Dense(x.data(), {2, 4});
  ExpectInvalid(run(o), "key_padding_mask: dtype must be bool, got float32");
  o = {};
  o.masks.attn_bias = TensorView::Dense(x.data(), {3, 4});
  ExpectInvalid(run(o), "attn_bias: expected a shape that broadcasts to [2, 1, 4, 4]");
  o.masks.attn_bias = TensorView::Dense(x.data(), {4, 1});
  ExpectInvalid(run(o), "got [4, 1]");
  o.masks.attn_bias = TensorView::DenseBool(kpm.data(), {4, 4});
  ExpectInvalid(run(o), "attn_bias: dtype must be float32, got bool");
  o = {};
  o.scale = std::nanf("");
  ExpectInvalid(run(o), "scale: must be finite");
  o.scale = INFINITY;
  ExpectInvalid(run(o), "scale: must be finite");
  // A broadcastable bias is accepted: [1, Lq, Lk] over B, and [B, 1, Lq, Lk].
  o = {};
  o.masks.attn_bias = TensorView::Dense(x.data(), {1, 4, 4});
  EXPECT_TRUE(run(o).ok());
}

TEST(SdpaErrors, QueryMustBeFloat) {
  std::vector<uint8_t> b(16, 1);
  const TensorView bv = TensorView::DenseBool(b.data(), {4, 4});
  ExpectInvalid(ScaledDotProductAttention(bv, bv, bv),
                "query: dtype must be float32 or bfloat16, got bool");
}

}  // namespace
}  // namespace attn
