// The attention variants of current LLMs in core's SDPA (issue 23): grouped
// query heads, bottom-right causal alignment, sliding windows, ALiBi,
// softcapping, attention sinks and the log-sum-exp, each alone, every pair,
// and all at once, against a float64 reference written here (plain loops,
// the one definition), on shapes that cross the query and key
// blocks; decode rows, more queries than keys, windows of 0, fully masked
// rows with and without a sink; merging two halves of the keys through the
// lse; and the bad inputs, each named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "attn/attention.h"
#include "status_matchers.h"
#include "variant_options.h"
#include "variants_reference.h"

namespace attn {
namespace {

using attn_test::Case;
using attn_test::Inputs;
using attn_test::MakeInputs;
using attn_test::OptionsFor;
using attn_test::Ref;
using attn_test::Reference;
constexpr double kInf = std::numeric_limits<double>::infinity();

StatusOr<AttentionResult> RunSdpa(const Case& c, const Inputs& in) {
  const TensorView q = TensorView::Dense(in.q.data(), {c.b, c.hq, c.lq, c.d});
  const TensorView k = TensorView::Dense(in.k.data(), {c.b, c.hkv, c.lk, c.d});
  const TensorView v = TensorView::Dense(in.v.data(), {c.b, c.hkv, c.lk, c.dv});
  return ScaledDotProductAttention(q, k, v, OptionsFor(c, in));
}

std::string Describe(const Case& c) {
  std::string s = "B" + std::to_string(c.b) + " Hq" + std::to_string(c.hq) + " Hkv" +
                  std::to_string(c.hkv) + " Lq" + std::to_string(c.lq) + " Lk" +
                  std::to_string(c.lk);
  if (c.causal) s += c.bottom_right ? " causal(bottom-right)" : " causal";
  if (c.wl) s += " wl=" + std::to_string(*c.wl);
  if (c.wr) s += " wr=" + std::to_string(*c.wr);
  if (c.softcap > 0) s += " softcap";
  if (c.alibi) s += " alibi";
  if (c.sink) s += " sink";
  if (c.kpm) s += " kpm";
  if (c.bias) s += " bias";
  if (c.need_weights) s += " weights";
  return s;
}

void ExpectMatches(const Case& c) {
  SCOPED_TRACE(Describe(c));
  const Inputs in = MakeInputs(c);
  const Ref want = Reference(c, in);
  auto got = RunSdpa(c, in);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->output.shape, (Shape{c.b, c.hq, c.lq, c.dv}));
  ASSERT_TRUE(got->lse.has_value());
  ASSERT_EQ(got->lse->shape, (Shape{c.b, c.hq, c.lq}));
  double worst = 0;
  for (size_t i = 0; i < want.out.size(); ++i) {
    ASSERT_FALSE(std::isnan(got->output.data[i])) << "output " << i;
    worst = std::max(worst, std::abs(got->output.data[i] - want.out[i]));
  }
  EXPECT_LT(worst, 2e-5) << "output";
  for (size_t i = 0; i < want.lse.size(); ++i) {
    if (want.lse[i] == -kInf) {
      EXPECT_EQ(got->lse->data[i], -std::numeric_limits<float>::infinity()) << "lse " << i;
    } else {
      EXPECT_NEAR(got->lse->data[i], want.lse[i], 2e-5 * std::max(1.0, std::abs(want.lse[i])))
          << "lse " << i;
    }
  }
  if (c.need_weights) {
    ASSERT_TRUE(got->weights.has_value());
    double w_worst = 0;
    for (size_t i = 0; i < want.weights.size(); ++i) {
      w_worst = std::max(w_worst, std::abs(got->weights->data[i] - want.weights[i]));
    }
    EXPECT_LT(w_worst, 2e-6) << "weights";
  }
}

// The block-crossing shape the option combinations run on: Lq just over one
// query block (256, or its halves), Lk just over one key block (512), four
// query heads (two kv heads with GQA), two batch rows (the second fully
// padded when kpm is on).
Case BlockCrossing() {
  Case c;
  c.b = 2, c.hq = 4, c.hkv = 4, c.lq = 260, c.lk = 520, c.d = 8, c.dv = 4;
  return c;
}

// Each of the seven options alone, every pair, and all at once (29 runs) on
// the block-crossing shape.
TEST(Variants, EachOptionEveryPairAndAllAtOnce) {
  int runs = 0;
  for (uint32_t mask = 1; mask < 128; ++mask) {
    if (__builtin_popcount(mask) > 2 && mask != 127) continue;
    ++runs;
    Case c = BlockCrossing();
    if (mask & 1) c.hkv = 2;                               // GQA
    if (mask & 2) c.causal = true, c.bottom_right = true;  // bottom-right causal
    if (mask & 4) c.wl = 100, c.wr = 37;                   // window
    if (mask & 8) c.alibi = true;
    if (mask & 16) c.softcap = 5.0f;
    if (mask & 32) c.sink = true;
    if (mask & 64) c.kpm = true, c.bias = true;
    c.seed = mask + 1;
    ExpectMatches(c);
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(runs, 7 + 21 + 1);
}

TEST(Variants, WeightsPathMatchesToo) {
  for (uint32_t mask : {0u, 1u, 2u, 4u, 8u, 16u, 32u, 127u}) {
    Case c = BlockCrossing();
    c.lq = 70, c.lk = 90;
    c.need_weights = true;
    if (mask & 1) c.hkv = 1;  // MQA
    if (mask & 2) c.causal = true, c.bottom_right = true;
    if (mask & 4) c.wl = 10, c.wr = 0;
    if (mask & 8) c.alibi = true;
    if (mask & 16) c.softcap = 2.0f;
    if (mask & 32) c.sink = true;
    if (mask & 64) c.kpm = true, c.bias = true;
    ExpectMatches(c);
  }
}

TEST(Variants, DecodeRowsSeeEveryCachedKeyBottomRight) {
  Case c;
  c.b = 1, c.hq = 8, c.hkv = 2, c.lq = 1, c.lk = 700, c.d = 16, c.dv = 16;
  c.causal = true, c.bottom_right = true;
  ExpectMatches(c);
  // Top-left, the same call sees key 0 only: not the decode answer.
  const Inputs in = MakeInputs(c);
  Case tl = c;
  tl.bottom_right = false;
  const Ref br = Reference(c, in), top = Reference(tl, in);
  double diff = 0;
  for (size_t i = 0; i < br.out.size(); ++i)
    diff = std::max(diff, std::abs(br.out[i] - top.out[i]));
  EXPECT_GT(diff, 0.1);
  c.wl = 128, c.sink = true, c.softcap = 30.0f, c.alibi = true;  // Mistral/Gemma-style decode
  ExpectMatches(c);
}

TEST(Variants, MoreQueriesThanKeysBottomRightMasksTheFirstRows) {
  Case c;
  c.lq = 600, c.lk = 300, c.causal = true, c.bottom_right = true;
  ExpectMatches(c);  // rows 0..299 see nothing: zeros, lse -inf
  const Inputs in = MakeInputs(c);
  auto got = RunSdpa(c, in);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->output.data[0], 0.0f);
  EXPECT_EQ(got->lse->data[299], -std::numeric_limits<float>::infinity());
  EXPECT_NE(got->lse->data[300], -std::numeric_limits<float>::infinity());
  c.sink = true;  // with a sink, those rows' lse is the sink's logit
  ExpectMatches(c);
}

// ALiBi's scores rise by hundreds along a row, so a row's running max jumps
// between key blocks by more than exp's range: the rescale of O underflows
// to 0 and must clear O (it once kept the earlier blocks' sums instead).
TEST(Variants, AlibiMaxJumpsAcrossKeyBlocks) {
  Case c;
  c.b = 1, c.hq = 2, c.hkv = 1, c.lq = 1024, c.lk = 2048, c.d = 16, c.dv = 16;
  c.causal = true, c.bottom_right = true, c.alibi = true, c.wl = 512;
  ExpectMatches(c);
}

TEST(Variants, WindowsOfZero) {
  Case c;
  c.lq = 40, c.lk = 40;
  c.wl = 0, c.wr = 0;  // each query sees its own position only
  ExpectMatches(c);
  c.wl.reset();
  c.causal = true;  // causal plus wr = 0: the same as causal
  ExpectMatches(c);
  c.wr.reset();
  c.wl = 0;  // not causal, wl = 0: the keys at and after the query
  c.causal = false;
  ExpectMatches(c);
}

TEST(Variants, FullyMaskedRowsWithAndWithoutASink) {
  Case c;
  c.b = 2, c.kpm = true;  // the second batch row masks every key
  ExpectMatches(c);
  c.sink = true;
  ExpectMatches(c);
  // No keys at all, with a sink: output 0, lse = the sink.
  Case none;
  none.lk = 0, none.sink = true;
  const Inputs in = MakeInputs(none);
  auto got = RunSdpa(none, in);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  for (float x : got->output.data) EXPECT_EQ(x, 0.0f);
  for (int64_t h = 0; h < none.hq; ++h) {
    EXPECT_EQ(got->lse->data[h * none.lq], in.sink[h]);
  }
}

// Attention over keys [0, n) equals the merge of attention over [0, s) and
// [s, n) through their lse: the split a thread team or two servers make.
TEST(Variants, TwoHalvesOfTheKeysMergeThroughLse) {
  Case whole;
  whole.lq = 33, whole.lk = 1100, whole.d = 16, whole.dv = 16, whole.hq = 4, whole.hkv = 2;
  whole.softcap = 10.0f;
  const Inputs in = MakeInputs(whole);
  auto all = RunSdpa(whole, in);
  ASSERT_TRUE(all.ok());
  const int64_t split = 613;
  auto half = [&](int64_t k0, int64_t n) {
    const TensorView q = TensorView::Dense(in.q.data(), {1, whole.hq, whole.lq, whole.d});
    TensorView k = TensorView::Dense(in.k.data(), {1, whole.hkv, whole.lk, whole.d});
    TensorView v = TensorView::Dense(in.v.data(), {1, whole.hkv, whole.lk, whole.dv});
    k.data = in.k.data() + k0 * whole.d, k.shape[2] = n;
    v.data = in.v.data() + k0 * whole.dv, v.shape[2] = n;
    ScaledDotProductAttentionOptions o;
    o.score.softcap = whole.softcap;
    o.score.return_lse = true;
    return ScaledDotProductAttention(q, k, v, o);
  };
  auto a = half(0, split), b = half(split, whole.lk - split);
  ASSERT_TRUE(a.ok() && b.ok());
  double worst = 0, lse_worst = 0;
  for (int64_t r = 0; r < whole.hq * whole.lq; ++r) {
    const double la = a->lse->data[r], lb = b->lse->data[r], m = std::max(la, lb);
    const double wa = std::exp(la - m), wb = std::exp(lb - m);
    lse_worst = std::max(lse_worst, std::abs(m + std::log(wa + wb) - all->lse->data[r]));
    for (int64_t e = 0; e < whole.dv; ++e) {
      const double merged =
          (wa * a->output.data[r * whole.dv + e] + wb * b->output.data[r * whole.dv + e]) /
          (wa + wb);
      worst = std::max(worst, std::abs(merged - all->output.data[r * whole.dv + e]));
    }
  }
  EXPECT_LT(worst, 1e-5);
  EXPECT_LT(lse_worst, 1e-5);
}

TEST(Variants, BadInputsNameTheField) {
  Case c;
  c.hq = 6, c.hkv = 4;  // 4 does not divide 6
  Inputs in = MakeInputs(c);
  auto r = RunSdpa(c, in);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("key: dim 1 (kv heads) must divide query's heads (6), got 4"),
            std::string::npos)
      << r.status().ToString();

  Case ok;
  in = MakeInputs(ok);
  const TensorView q = TensorView::Dense(in.q.data(), {1, ok.hq, ok.lq, ok.d});
  const TensorView k = TensorView::Dense(in.k.data(), {1, ok.hkv, ok.lk, ok.d});
  const TensorView v = TensorView::Dense(in.v.data(), {1, ok.hkv, ok.lk, ok.dv});
  auto expect_invalid = [&](const ScaledDotProductAttentionOptions& o, const std::string& words) {
    auto res = ScaledDotProductAttention(q, k, v, o);
    EXPECT_EQ(res.status().code(), StatusCode::kInvalidArgument) << words;
    EXPECT_NE(res.status().message().find(words), std::string::npos) << res.status().ToString();
    // Estimate validates exactly as the call does.
    EXPECT_EQ(EstimateScaledDotProductAttention(q, k, v, o).status().code(),
              StatusCode::kInvalidArgument);
  };
  ScaledDotProductAttentionOptions o;
  o.masks.window_left = -1;
  expect_invalid(o, "window_left: must be >= 0 (unset: unbounded), got -1");
  o = {};
  o.masks.window_right = -5;
  expect_invalid(o, "window_right: must be >= 0");
  for (float bad : {0.0f, -1.0f, std::nanf(""), std::numeric_limits<float>::infinity()}) {
    o = {};
    o.score.softcap = bad;
    expect_invalid(o, "softcap: must be > 0 and finite");
  }
  std::vector<float> three(3, 0.5f), four(4, 0.5f), nan4(4, 0.5f);
  nan4[2] = std::nanf("");
  o = {};
  o.score.alibi_slopes = TensorView::Dense(three.data(), {3});
  expect_invalid(o, "alibi_slopes: expected shape [4] or [1, 4], got [3]");
  o.score.alibi_slopes = TensorView::Dense(nan4.data(), {4});
  expect_invalid(o, "alibi_slopes: values must be finite");
  o = {};
  o.score.sink_logits = TensorView::Dense(four.data(), {1, 4});
  expect_invalid(o, "sink_logits: expected shape [4], got [1, 4]");
  o.score.sink_logits = TensorView::Dense(nan4.data(), {4});
  expect_invalid(o, "sink_logits: values must be finite");
  TensorView int_view = TensorView::Dense(four.data(), {4});
  int_view.dtype = DataType::kBool;
  o = {};
  o.score.sink_logits = int_view;
  expect_invalid(o, "sink_logits: dtype must be float32");
}

}  // namespace
}  // namespace attn
