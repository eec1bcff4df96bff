// MultiHeadAttention with grouped-query projections (num_kv_heads, issue 23):
// k_weight [Hkv * Dh, kdim], v_weight [Hkv * Dvh, vdim], out_weight
// [Eo, H * Dvh]; query head h reads kv head h / (H / Hkv). Against a float64
// reference written here with plain loops (project, attend per head, join
// the heads, project out), with causal bottom-right and the lse; a model
// built from q/k/v_proj_weight with num_kv_heads; and the shape errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "attn/attention.h"
#include "attn/model.h"
#include "status_matchers.h"

namespace attn {
namespace {

struct Gqa {
  int64_t b = 2, lq = 5, lk = 9, e_in = 12, h = 6, hkv = 2, dh = 4, dvh = 3, eo = 10;
  bool causal = true, bottom_right = true;
};

struct Weights {
  std::vector<float> wq, wk, wv, wo, bq, bk, bv, bo, x, mem;
};

std::vector<float> Random(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

Weights Make(const Gqa& g) {
  std::mt19937 rng(11);
  Weights w;
  const float s = 1.0f / std::sqrt(static_cast<float>(g.e_in));
  w.wq = Random(g.h * g.dh * g.e_in, rng, s), w.bq = Random(g.h * g.dh, rng, s);
  w.wk = Random(g.hkv * g.dh * g.e_in, rng, s), w.bk = Random(g.hkv * g.dh, rng, s);
  w.wv = Random(g.hkv * g.dvh * g.e_in, rng, s), w.bv = Random(g.hkv * g.dvh, rng, s);
  w.wo = Random(g.eo * g.h * g.dvh, rng, s), w.bo = Random(g.eo, rng, s);
  w.x = Random(g.b * g.lq * g.e_in, rng), w.mem = Random(g.b * g.lk * g.e_in, rng);
  return w;
}

// y[r, o] = x[r, :] . W[o, :] + b[o], in float64.
std::vector<double> Linear(const std::vector<double>& x, int64_t rows, int64_t in,
                           const std::vector<float>& w, const std::vector<float>& bias,
                           int64_t out) {
  std::vector<double> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = bias[o];
      for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * double{w[o * in + i]};
      y[r * out + o] = acc;
    }
  return y;
}

struct Ref {
  std::vector<double> out, lse;
};

Ref Reference(const Gqa& g, const Weights& w) {
  const std::vector<double> x(w.x.begin(), w.x.end()), mem(w.mem.begin(), w.mem.end());
  const auto q = Linear(x, g.b * g.lq, g.e_in, w.wq, w.bq, g.h * g.dh);
  const auto k = Linear(mem, g.b * g.lk, g.e_in, w.wk, w.bk, g.hkv * g.dh);
  const auto v = Linear(mem, g.b * g.lk, g.e_in, w.wv, w.bv, g.hkv * g.dvh);
  std::vector<double> att(static_cast<size_t>(g.b * g.lq * g.h * g.dvh), 0.0);
  Ref r;
  r.lse.assign(static_cast<size_t>(g.b * g.h * g.lq), -std::numeric_limits<double>::infinity());
  const double scale = 1.0 / std::sqrt(static_cast<double>(g.dh));
  for (int64_t b = 0; b < g.b; ++b)
    for (int64_t h = 0; h < g.h; ++h) {
      const int64_t kvh = h / (g.h / g.hkv);
      for (int64_t i = 0; i < g.lq; ++i) {
        const int64_t pos = i + (g.bottom_right ? g.lk - g.lq : 0);
        std::vector<double> s(static_cast<size_t>(g.lk), 0.0);
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < g.lk; ++j) {
          if (g.causal && j > pos) continue;
          double dot = 0;
          for (int64_t c = 0; c < g.dh; ++c) {
            dot += q[(b * g.lq + i) * g.h * g.dh + h * g.dh + c] *
                   k[(b * g.lk + j) * g.hkv * g.dh + kvh * g.dh + c];
          }
          s[j] = dot * scale;
          m = std::max(m, s[j]);
        }
        if (std::isinf(m)) continue;
        double sum = 0;
        for (int64_t j = 0; j < g.lk; ++j) {
          s[j] = g.causal && j > pos ? 0.0 : std::exp(s[j] - m);
          sum += s[j];
        }
        r.lse[(b * g.h + h) * g.lq + i] = m + std::log(sum);
        for (int64_t j = 0; j < g.lk; ++j)
          for (int64_t c = 0; c < g.dvh; ++c) {
            att[(b * g.lq + i) * g.h * g.dvh + h * g.dvh + c] +=
                s[j] / sum * v[(b * g.lk + j) * g.hkv * g.dvh + kvh * g.dvh + c];
          }
      }
    }
  r.out = Linear(att, g.b * g.lq, g.h * g.dvh, w.wo, w.bo, g.eo);
  return r;
}

ProjectionWeights Views(const Gqa& g, const Weights& w) {
  ProjectionWeights p;
  p.q = {TensorView::Dense(w.wq.data(), {g.h * g.dh, g.e_in}),
         TensorView::Dense(w.bq.data(), {g.h * g.dh})};
  p.k = {TensorView::Dense(w.wk.data(), {g.hkv * g.dh, g.e_in}),
         TensorView::Dense(w.bk.data(), {g.hkv * g.dh})};
  p.v = {TensorView::Dense(w.wv.data(), {g.hkv * g.dvh, g.e_in}),
         TensorView::Dense(w.bv.data(), {g.hkv * g.dvh})};
  p.out = LinearView{TensorView::Dense(w.wo.data(), {g.eo, g.h * g.dvh}),
                     TensorView::Dense(w.bo.data(), {g.eo})};
  return p;
}

void ExpectMatches(const Gqa& g, const StatusOr<AttentionResult>& got, const Ref& want) {
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->output.shape, (Shape{g.b, g.lq, g.eo}));
  for (size_t i = 0; i < want.out.size(); ++i) {
    EXPECT_NEAR(got->output.data[i], want.out[i], 2e-5 * std::max(1.0, std::abs(want.out[i]))) << i;
  }
  ASSERT_TRUE(got->lse.has_value());
  ASSERT_EQ(got->lse->shape, (Shape{g.b, g.h, g.lq}));
  for (size_t i = 0; i < want.lse.size(); ++i) {
    if (std::isinf(want.lse[i])) {
      EXPECT_TRUE(std::isinf(got->lse->data[i])) << i;
    } else {
      EXPECT_NEAR(got->lse->data[i], want.lse[i], 2e-5 * std::max(1.0, std::abs(want.lse[i])));
    }
  }
}

MultiHeadAttentionOptions Options(const Gqa& g) {
  MultiHeadAttentionOptions o;
  o.num_heads = g.h, o.num_kv_heads = g.hkv;
  o.masks.causal = g.causal;
  o.masks.causal_alignment =
      g.bottom_right ? CausalAlignment::kBottomRight : CausalAlignment::kTopLeft;
  o.score.return_lse = true;
  return o;
}

TEST(MhaGqa, GroupedProjectionsMatchTheFloat64Reference) {
  for (int64_t hkv : {1, 2, 3, 6}) {  // MQA, GQA 3:1 and 2:1, plain MHA
    Gqa g;
    g.hkv = hkv;
    SCOPED_TRACE("kv heads " + std::to_string(hkv));
    const Weights w = Make(g);
    const ProjectionWeights p = Views(g, w);
    auto got = MultiHeadAttention(p, TensorView::Dense(w.x.data(), {g.b, g.lq, g.e_in}),
                                  TensorView::Dense(w.mem.data(), {g.b, g.lk, g.e_in}),
                                  TensorView::Dense(w.mem.data(), {g.b, g.lk, g.e_in}), Options(g));
    ExpectMatches(g, got, Reference(g, w));
  }
}

TEST(MhaGqa, ModelFromGroupedProjWeights) {
  Gqa g;
  g.lk = g.lq, g.causal = true, g.bottom_right = false, g.e_in = 12, g.dh = 2, g.dvh = 2;
  g.h = 6, g.hkv = 2, g.eo = 12;  // q_proj [12, 12]: E = H * Dh
  const Weights w = Make(g);
  auto tensor = [](const std::vector<float>& v, Shape shape) {
    Tensor t(std::move(shape));
    std::copy(v.begin(), v.end(), t.data.begin());
    return t;
  };
  std::map<std::string, Tensor> t;
  t.emplace("q_proj_weight", tensor(w.wq, {12, 12}));
  t.emplace("k_proj_weight", tensor(w.wk, {4, 12}));
  t.emplace("v_proj_weight", tensor(w.wv, {4, 12}));
  std::vector<float> bias = w.bq;
  bias.insert(bias.end(), w.bk.begin(), w.bk.end());
  bias.insert(bias.end(), w.bv.begin(), w.bv.end());
  t.emplace("in_proj_bias", tensor(bias, {20}));
  t.emplace("out_proj.weight", tensor(w.wo, {12, 12}));
  t.emplace("out_proj.bias", tensor(w.bo, {12}));
  auto m = AttentionModel::FromTensors("gqa", ModelKind::kMultiHeadAttention, 6, t, 2);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->info().num_kv_heads, 2);
  EXPECT_EQ(m->info().num_heads, 6);
  // Self-attention on x.
  Weights self = w;
  self.mem = w.x;
  const TensorView x = TensorView::Dense(w.x.data(), {g.b, g.lq, g.e_in});
  ExpectMatches(g, MultiHeadAttention(m->projections(), x, x, x, Options(g)), Reference(g, self));
  // Without num_kv_heads the k projection's 4 rows do not fit 6 heads of 2.
  auto plain = AttentionModel::FromTensors("gqa", ModelKind::kMultiHeadAttention, 6, std::move(t));
  attn_test::ExpectInvalid(plain,
                           "tensor 'k_proj_weight' must have 12 rows (embed_dim), got shape [4, "
                           "12] (fewer kv heads: set num_kv_heads)");
}

TEST(MhaGqa, ShapeErrorsNameTheField) {
  Gqa g;
  const Weights w = Make(g);
  const ProjectionWeights p = Views(g, w);
  const TensorView x = TensorView::Dense(w.x.data(), {g.b, g.lq, g.e_in});
  const TensorView mem = TensorView::Dense(w.mem.data(), {g.b, g.lk, g.e_in});
  MultiHeadAttentionOptions o = Options(g);
  o.num_kv_heads = 4;  // does not divide 6
  attn_test::ExpectInvalid(MultiHeadAttention(p, x, mem, mem, o),
                           "num_kv_heads: must be positive and divide num_heads (6), got 4");
  o.num_kv_heads = 3;  // divides, but k_weight has 2 * 4 rows
  attn_test::ExpectInvalid(MultiHeadAttention(p, x, mem, mem, o),
                           "k_weight: out_features must be num_kv_heads * head_dim (3 * 4 = 12), "
                           "got 8");
  o.num_kv_heads = 0;  // = num_heads: k_weight must then match q_weight
  attn_test::ExpectInvalid(MultiHeadAttention(p, x, mem, mem, o),
                           "k_weight: out_features must equal q_weight's (24), got 8");
  o.num_kv_heads = 1;  // v divides, k does not fit one head
  attn_test::ExpectInvalid(MultiHeadAttention(p, x, mem, mem, o),
                           "k_weight: out_features must be num_kv_heads * head_dim (1 * 4 = 4), "
                           "got 8");
}

}  // namespace
}  // namespace attn
