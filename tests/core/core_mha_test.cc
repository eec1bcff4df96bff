// MultiHeadAttention against a float64 reference built from ReferenceLinear
// and ReferenceAttention, plus its argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "attn/attention.h"
#include "float64_reference.h"
#include "status_matchers.h"
#include "tensor_compare.h"

namespace attn {
namespace {

using attn_test::ExpectInvalid;
using attn_test::RandomFloats;
using attn_test::ToDouble;

struct MhaConfig {
  int64_t b, lq, lk, eq, ek, ev_in, e, ev, eo, heads;
  bool bias, out, packed, causal, kpm, bias_mask, weights, average;
};

// Weights and inputs for one configuration, with float64 copies.
struct MhaFixture {
  MhaConfig c;
  std::vector<float> wq, wk, wv, wo, bq, bk, bv, bo, packed, x, key, value;
  std::vector<uint8_t> kpm;
  std::vector<float> bias_mask;
  ProjectionWeights pw;

  explicit MhaFixture(const MhaConfig& cfg) : c(cfg) {
    std::mt19937 rng(static_cast<unsigned>(c.e * 31 + c.lq * 7 + c.heads + c.packed));
    const float ws = 1.0f / std::sqrt(static_cast<float>(c.eq));
    if (c.packed) {  // nn.MultiheadAttention's in_proj_weight [3E, E]
      packed = RandomFloats(3 * c.e * c.eq, rng, ws);
      wq.assign(packed.begin(), packed.begin() + c.e * c.eq);
      wk.assign(packed.begin() + c.e * c.eq, packed.begin() + 2 * c.e * c.eq);
      wv.assign(packed.begin() + 2 * c.e * c.eq, packed.end());
    } else {
      wq = RandomFloats(c.e * c.eq, rng, ws);
      wk = RandomFloats(c.e * c.ek, rng, ws);
      wv = RandomFloats(c.ev * c.ev_in, rng, ws);
    }
    wo = RandomFloats(c.eo * c.ev, rng, ws);
    if (c.bias) {
      bq = RandomFloats(3 * c.e, rng, 0.5f);  // packed bias [3E]; q, k, v slices
      bk.assign(bq.begin() + c.e, bq.begin() + 2 * c.e);
      bv.assign(bq.begin() + 2 * c.e, bq.end());
      bo = RandomFloats(c.eo, rng, 0.5f);
    }
    x = RandomFloats(c.b * c.lq * c.eq, rng);
    if (!c.packed) {
      key = RandomFloats(c.b * c.lk * c.ek, rng);
      value = RandomFloats(c.b * c.lk * c.ev_in, rng);
    }
    if (c.kpm) {
      kpm.assign(c.b * c.lk, 0);
      for (int64_t i = 0; i < c.b; ++i) kpm[i * c.lk + (i % c.lk)] = 1;
    }
    if (c.bias_mask) bias_mask = RandomFloats(c.b * c.heads * c.lq * c.lk, rng);

    auto lin = [&](const std::vector<float>& w, const float* b, int64_t out, int64_t in) {
      LinearView l{TensorView::Dense(w.data(), {out, in}), std::nullopt};
      if (c.bias) l.bias = TensorView::Dense(b, {out});
      return l;
    };
    if (c.packed) {
      pw.q = lin(packed, c.bias ? bq.data() : nullptr, c.e, c.eq);
      pw.k = {TensorView::Dense(packed.data() + c.e * c.eq, {c.e, c.eq}), std::nullopt};
      pw.v = {TensorView::Dense(packed.data() + 2 * c.e * c.eq, {c.e, c.eq}), std::nullopt};
      if (c.bias) {
        pw.k.bias = TensorView::Dense(bq.data() + c.e, {c.e});
        pw.v.bias = TensorView::Dense(bq.data() + 2 * c.e, {c.e});
      }
    } else {
      pw.q = lin(wq, c.bias ? bq.data() : nullptr, c.e, c.eq);
      pw.k = lin(wk, c.bias ? bk.data() : nullptr, c.e, c.ek);
      pw.v = lin(wv, c.bias ? bv.data() : nullptr, c.ev, c.ev_in);
    }
    if (c.out) pw.out = lin(wo, c.bias ? bo.data() : nullptr, c.eo, c.ev);
  }

  StatusOr<AttentionResult> Run(OutputAllocator output_allocator = {}) const {
    MultiHeadAttentionOptions opt;
    opt.output_allocator = std::move(output_allocator);
    opt.num_heads = c.heads;
    opt.masks.causal = c.causal;
    if (c.kpm) opt.masks.key_padding_mask = TensorView::DenseBool(kpm.data(), {c.b, c.lk});
    if (c.bias_mask) {
      opt.masks.attn_bias = TensorView::Dense(bias_mask.data(), {c.b, c.heads, c.lq, c.lk});
    }
    opt.need_weights = c.weights;
    opt.average_weights = c.average;
    const TensorView xv = TensorView::Dense(x.data(), {c.b, c.lq, c.eq});
    if (c.packed) return MultiHeadAttention(pw, xv, xv, xv, opt);
    return MultiHeadAttention(pw, xv, TensorView::Dense(key.data(), {c.b, c.lk, c.ek}),
                              TensorView::Dense(value.data(), {c.b, c.lk, c.ev_in}), opt);
  }

  // Float64: project, split heads, attend, merge heads, project out.
  attn_test::RefResult Reference() const {
    const int64_t lk = c.packed ? c.lq : c.lk;
    auto d = [](const std::vector<float>& v) { return ToDouble(v.data(), v.size()); };
    auto bias_of = [&](const std::vector<float>& b, int64_t off, int64_t n) {
      return c.bias ? std::vector<double>(b.begin() + off, b.begin() + off + n)
                    : std::vector<double>();
    };
    const auto& kin = c.packed ? x : key;
    const auto& vin = c.packed ? x : value;
    auto q = attn_test::ReferenceLinear(d(x), c.b * c.lq, c.eq, d(wq), c.e, bias_of(bq, 0, c.e));
    auto k = attn_test::ReferenceLinear(d(kin), c.b * lk, c.packed ? c.eq : c.ek, d(wk), c.e,
                                        bias_of(bq, c.e, c.e));
    auto v = attn_test::ReferenceLinear(d(vin), c.b * lk, c.packed ? c.eq : c.ev_in, d(wv), c.ev,
                                        bias_of(bq, 2 * c.e, c.ev));
    const int64_t dh = c.e / c.heads, dvh = c.ev / c.heads;
    attn_test::RefProblem p;
    p.b = c.b, p.h = c.heads, p.lq = c.lq, p.lk = lk, p.d = dh, p.dv = dvh;
    p.scale = 1.0 / std::sqrt(static_cast<double>(dh));
    p.causal = c.causal;
    if (c.kpm) p.kpm = kpm;
    if (c.bias_mask) p.bias = d(bias_mask);
    auto split = [&](const std::vector<double>& y, int64_t l, int64_t width, int64_t hd) {
      std::vector<double> r(c.b * c.heads * l * hd);
      for (int64_t b = 0; b < c.b; ++b)
        for (int64_t h = 0; h < c.heads; ++h)
          for (int64_t i = 0; i < l; ++i)
            for (int64_t j = 0; j < hd; ++j)
              r[((b * c.heads + h) * l + i) * hd + j] = y[(b * l + i) * width + h * hd + j];
      return r;
    };
    p.q = split(q, c.lq, c.e, dh), p.k = split(k, lk, c.e, dh), p.v = split(v, lk, c.ev, dvh);
    auto att = attn_test::ReferenceAttention(p);
    std::vector<double> merged(c.b * c.lq * c.ev);
    for (int64_t b = 0; b < c.b; ++b)
      for (int64_t h = 0; h < c.heads; ++h)
        for (int64_t i = 0; i < c.lq; ++i)
          for (int64_t j = 0; j < dvh; ++j)
            merged[(b * c.lq + i) * c.ev + h * dvh + j] =
                att.out[((b * c.heads + h) * c.lq + i) * dvh + j];
    attn_test::RefResult r;
    r.out = c.out ? attn_test::ReferenceLinear(merged, c.b * c.lq, c.ev, d(wo), c.eo,
                                               c.bias ? d(bo) : std::vector<double>())
                  : merged;
    if (c.average) {
      r.weights.assign(c.b * c.lq * lk, 0.0);
      for (int64_t b = 0; b < c.b; ++b)
        for (int64_t h = 0; h < c.heads; ++h)
          for (int64_t i = 0; i < c.lq * lk; ++i)
            r.weights[b * c.lq * lk + i] +=
                att.weights[(b * c.heads + h) * c.lq * lk + i] / c.heads;
    } else {
      r.weights = att.weights;
    }
    return r;
  }
};

class MhaSweep : public ::testing::TestWithParam<MhaConfig> {};

TEST_P(MhaSweep, MatchesFloat64Reference) {
  MhaFixture f(GetParam());
  auto r = f.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto ref = f.Reference();
  EXPECT_EQ(r->output.numel(), static_cast<int64_t>(ref.out.size()));
  EXPECT_TRUE(
      attn_test::AllClose(r->output.data.data(), ref.out, 1e-5, attn_test::MaxAbs(ref.out)));
  if (f.c.weights) {
    ASSERT_TRUE(r->weights.has_value());
    EXPECT_EQ(r->weights->numel(), static_cast<int64_t>(ref.weights.size()));
    EXPECT_TRUE(attn_test::AllClose(r->weights->data.data(), ref.weights, 1e-5, 1e-6));
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, MhaSweep,
                         ::testing::Values(
                             // b, lq, lk, eq, ek, ev_in, e, ev, eo, heads, bias, out, packed,
                             // causal, kpm, bias_mask, weights, average
                             MhaConfig{2, 5, 5, 16, 16, 16, 16, 16, 16, 4, true, true, true, false,
                                       false, false, true, true},
                             MhaConfig{2, 5, 5, 16, 16, 16, 16, 16, 16, 4, true, true, false, false,
                                       false, false, true, true},
                             MhaConfig{2, 9, 9, 32, 32, 32, 32, 32, 32, 8, true, true, true, true,
                                       true, false, true, false},
                             MhaConfig{3, 4, 7, 16, 12, 20, 16, 16, 16, 2, true, true, false, false,
                                       true, true, true, true},
                             MhaConfig{1, 6, 6, 8, 8, 8, 8, 8, 8, 1, true, false, false, false,
                                       false, false, true, true},
                             MhaConfig{2, 7, 3, 10, 6, 5, 12, 9, 7, 3, false, true, false, true,
                                       false, true, true, false},
                             MhaConfig{1, 300, 300, 64, 64, 64, 64, 64, 64, 4, true, true, true,
                                       true, true, false, false, true},
                             MhaConfig{2, 130, 520, 24, 24, 24, 24, 24, 24, 2, true, true, false,
                                       false, true, true, true, true}));

TEST(Mha, UnbatchedMatchesBatchOfOne) {
  MhaFixture f(
      {1, 6, 8, 16, 12, 10, 16, 16, 16, 4, true, true, false, true, true, false, true, true});
  auto batched = f.Run();
  MultiHeadAttentionOptions opt;
  opt.num_heads = 4;
  opt.masks.causal = true;
  opt.masks.key_padding_mask = TensorView::DenseBool(f.kpm.data(), {8});
  opt.need_weights = true;
  auto r = MultiHeadAttention(f.pw, TensorView::Dense(f.x.data(), {6, 16}),
                              TensorView::Dense(f.key.data(), {8, 12}),
                              TensorView::Dense(f.value.data(), {8, 10}), opt);
  ASSERT_TRUE(batched.ok() && r.ok()) << r.status().ToString();
  EXPECT_EQ(r->output.shape, (Shape{6, 16}));
  EXPECT_EQ(r->weights->shape, (Shape{6, 8}));
  EXPECT_EQ(r->output.data, batched->output.data);
  EXPECT_EQ(r->weights->data, batched->weights->data);
}

TEST(Mha, OutputAllocatorReceivesTheOutput) {
  // b, lq, lk, eq, ek, ev_in, e, ev, eo, heads; with and without out_proj, small
  // (all heads batched) and large enough for the blocked kernel.
  for (const MhaConfig& c : {MhaConfig{2, 5, 7, 16, 12, 10, 16, 16, 8, 4, true, true, false, true,
                                       true, false, true, true},
                             MhaConfig{2, 5, 7, 16, 12, 10, 16, 16, 16, 4, true, false, false,
                                       false, false, false, false, false},
                             MhaConfig{1, 300, 300, 64, 64, 64, 64, 64, 64, 2, false, false, true,
                                       false, false, false, false, false}}) {
    MhaFixture f(c);
    auto owned = f.Run();
    ASSERT_TRUE(owned.ok()) << owned.status().ToString();
    std::vector<float> buffer;
    Shape asked;
    int calls = 0;
    auto r = f.Run([&](const Shape& shape) {
      ++calls;
      asked = shape;
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      buffer.assign(static_cast<size_t>(n), std::nanf(""));
      return buffer.data();
    });
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(asked, owned->output.shape);
    EXPECT_EQ(r->output.shape, owned->output.shape);
    EXPECT_TRUE(r->output.data.empty());  // the values are in `buffer`
    EXPECT_EQ(std::vector<float>(owned->output.data.begin(), owned->output.data.end()), buffer);
    if (c.weights) {
      EXPECT_EQ(r->weights->data, owned->weights->data);
    }

    auto fallback = f.Run([](const Shape&) -> float* { return nullptr; });  // core allocates
    ASSERT_TRUE(fallback.ok());
    EXPECT_EQ(fallback->output.data, owned->output.data);
  }
}

TEST(MhaCost, EstimateCountsProjectionsAttentionAndBuffers) {
  // b, lq, lk, eq, ek, ev_in, e, ev, eo, heads
  MhaFixture f(
      {2, 5, 7, 16, 12, 10, 16, 8, 6, 4, true, true, false, false, false, false, true, true});
  MultiHeadAttentionOptions opt;
  opt.num_heads = 4;
  opt.need_weights = true;
  const TensorView x = TensorView::Dense(f.x.data(), {2, 5, 16});
  const TensorView k = TensorView::Dense(f.key.data(), {2, 7, 12});
  const TensorView v = TensorView::Dense(f.value.data(), {2, 7, 10});
  auto c = EstimateMultiHeadAttention(f.pw, x, k, v, opt);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->work, 2.0 * 4 * 5 * 7 * 4);  // B*H*Lq*Lk*Dh, Dh = 16/4
  const double proj = 2.0 * 2 * (5 * 16 * 16 + 7 * 12 * 16 + 7 * 10 * 8 + 5 * 8 * 6);
  const double att = 2.0 * 2 * 4 * 5 * 7 * (4 + 2);
  EXPECT_EQ(c->flops, proj + att);
  EXPECT_EQ(c->result_bytes, 4.0 * (2 * 5 * 6 + 2 * 5 * 7));  // output + averaged weights
  opt.num_heads = 3;
  ExpectInvalid(EstimateMultiHeadAttention(f.pw, x, k, v, opt), "num_heads: must divide");
}

TEST(MhaErrors, MessagesNameTheField) {
  MhaFixture f(
      {2, 5, 5, 16, 12, 10, 16, 16, 16, 4, true, true, false, false, false, false, false, true});
  const TensorView x = TensorView::Dense(f.x.data(), {2, 5, 16});
  const TensorView k = TensorView::Dense(f.key.data(), {2, 5, 12});
  const TensorView v = TensorView::Dense(f.value.data(), {2, 5, 10});
  MultiHeadAttentionOptions opt;
  opt.num_heads = 4;
  ExpectInvalid(MultiHeadAttention(f.pw, x, x, v, opt),
                "key: last dim must equal k_weight's in_features (12), got 16");
  ExpectInvalid(MultiHeadAttention(f.pw, TensorView::Dense(f.x.data(), {2, 5, 8}), k, v, opt),
                "query: last dim must equal q_weight's in_features (16), got 8");
  ExpectInvalid(MultiHeadAttention(f.pw, x, TensorView::Dense(f.key.data(), {1, 5, 12}), v, opt),
                "key: dim 0 (batch) must equal query's (2), got 1");
  ExpectInvalid(MultiHeadAttention(f.pw, x, k, TensorView::Dense(f.value.data(), {2, 4, 10}), opt),
                "value: dim -2 (Lk) must equal key's (5), got 4");
  ExpectInvalid(MultiHeadAttention(f.pw, TensorView::Dense(f.x.data(), {2, 5, 2, 8}), k, v, opt),
                "query: rank must be 2 to 3, got 4");
  opt.num_heads = 3;
  ExpectInvalid(MultiHeadAttention(f.pw, x, k, v, opt),
                "num_heads: must divide the projection widths (q 16, v 16), got 3");
  opt.num_heads = 0;
  ExpectInvalid(MultiHeadAttention(f.pw, x, k, v, opt), "num_heads: must be positive, got 0");
  opt.num_heads = 4;
  ProjectionWeights bad = f.pw;
  bad.k.weight.shape = {8, 12};
  bad.k.bias.reset();
  ExpectInvalid(MultiHeadAttention(bad, x, k, v, opt),
                "k_weight: out_features must equal q_weight's (16), got 8");
  bad = f.pw;
  bad.q.bias->shape = {15};
  ExpectInvalid(MultiHeadAttention(bad, x, k, v, opt),
                "q_bias: expected shape [16] (q_weight's out_features), got [15]");
  bad = f.pw;
  bad.out->weight.shape = {16, 8};
  bad.out->weight.strides = {8, 1};
  ExpectInvalid(MultiHeadAttention(bad, x, k, v, opt),
                "out_weight: in_features must equal v_weight's out_features (16), got 8");
  // A caller's W^T (LinearView::weight_t) must be W's shape transposed.
  bad = f.pw;
  bad.k.weight_t = TensorView::Dense(f.key.data(), {16, 12});
  ExpectInvalid(MultiHeadAttention(bad, x, k, v, opt),
                "k_weight_t: must be row-major [in, out] = [12, 16], got shape [16, 12]");
  opt.scale = NAN;
  ExpectInvalid(MultiHeadAttention(f.pw, x, k, v, opt), "scale: must be finite");
}

}  // namespace
}  // namespace attn
