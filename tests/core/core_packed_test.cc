// Packed variable-length batches in core's SDPA (issue 23; FlashAttention's
// varlen layout): the query [total_q, Hq, D], key and value [total_k, Hkv,
// *], offsets cu_seqlens_q/k. Each sequence must equal the float64
// reference of that sequence alone (tests/variants_reference.h), with the
// options per sequence: alignment, windows, ALiBi [B, H]; with empty
// sequences, a sequence of one, sequences that cross the query and key
// blocks, GQA; and every malformed offset list, named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "attn/attention.h"
#include "status_matchers.h"
#include "variants_reference.h"

namespace attn {
namespace {

using attn_test::Case;
using attn_test::Inputs;
using attn_test::MakeInputs;
using attn_test::Pack;
using attn_test::Packed;
using attn_test::Ref;
using attn_test::Reference;

struct Views {
  TensorView q, k, v;
};
Views ViewsOf(const Packed& p) {
  return {TensorView::Dense(p.q.data(), {p.cu_q.back(), p.hq, p.d}),
          TensorView::Dense(p.k.data(), {p.cu_k.back(), p.hkv, p.d}),
          TensorView::Dense(p.v.data(), {p.cu_k.back(), p.hkv, p.dv})};
}

ScaledDotProductAttentionOptions OptionsOf(const Packed& p, const Case& c) {
  ScaledDotProductAttentionOptions o;
  o.cu_seqlens_q = p.cu_q, o.cu_seqlens_k = p.cu_k;
  o.masks.causal = c.causal;
  o.masks.causal_alignment =
      c.bottom_right ? CausalAlignment::kBottomRight : CausalAlignment::kTopLeft;
  o.masks.window_left = c.wl, o.masks.window_right = c.wr;
  if (c.softcap > 0) o.score.softcap = c.softcap;
  const int64_t nseq = static_cast<int64_t>(p.cases.size());
  if (c.alibi) o.score.alibi_slopes = TensorView::Dense(p.alibi.data(), {nseq, p.hq});
  if (c.sink) o.score.sink_logits = TensorView::Dense(p.sink.data(), {p.hq});
  o.score.return_lse = true;
  return o;
}

void ExpectPackedMatches(const Case& shape,
                         const std::vector<std::pair<int64_t, int64_t>>& lengths) {
  const Packed p = Pack(shape, lengths);
  const Views in = ViewsOf(p);
  auto got = ScaledDotProductAttention(in.q, in.k, in.v, OptionsOf(p, shape));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const int64_t tq = p.cu_q.back();
  ASSERT_EQ(got->output.shape, (Shape{tq, p.hq, p.dv}));
  ASSERT_TRUE(got->lse.has_value());
  ASSERT_EQ(got->lse->shape, (Shape{p.hq, tq}));
  for (size_t s = 0; s < p.cases.size(); ++s) {
    const Case& c = p.cases[s];
    SCOPED_TRACE("sequence " + std::to_string(s) + " (Lq " + std::to_string(c.lq) + ", Lk " +
                 std::to_string(c.lk) + ")");
    const Ref want = Reference(c, p.inputs[s]);
    double worst = 0;
    for (int64_t h = 0; h < c.hq; ++h) {
      for (int64_t i = 0; i < c.lq; ++i) {
        const int64_t row = p.cu_q[s] + i;
        for (int64_t e = 0; e < c.dv; ++e) {
          const float x = got->output.data[(row * p.hq + h) * p.dv + e];
          ASSERT_FALSE(std::isnan(x));
          worst = std::max(worst, std::abs(x - want.out[(h * c.lq + i) * c.dv + e]));
        }
        const double want_lse = want.lse[h * c.lq + i];
        const float got_lse = got->lse->data[h * tq + row];
        if (std::isinf(want_lse)) {
          EXPECT_EQ(got_lse, -std::numeric_limits<float>::infinity()) << "h " << h << " i " << i;
        } else {
          EXPECT_NEAR(got_lse, want_lse, 2e-5 * std::max(1.0, std::abs(want_lse)));
        }
      }
    }
    EXPECT_LT(worst, 2e-5);
  }
}

// Empty sequences (no queries, no keys, or neither), a sequence of one,
// a decode-shaped one, one across the query and key blocks (260 x 520),
// more queries than keys.
const std::vector<std::pair<int64_t, int64_t>> kMixed = {
    {5, 7}, {0, 0}, {1, 1}, {0, 9}, {3, 0}, {260, 520}, {1, 40}, {12, 4}, {33, 33}};

TEST(Packed, PlainSequencesEachEqualTheirOwnReference) {
  Case c;
  c.hq = 4, c.hkv = 4, c.d = 8, c.dv = 4;
  ExpectPackedMatches(c, kMixed);
}

TEST(Packed, GqaCausalBothAlignments) {
  for (bool bottom_right : {false, true}) {
    Case c;
    c.hq = 6, c.hkv = 2, c.d = 16, c.dv = 8, c.causal = true, c.bottom_right = bottom_right;
    ExpectPackedMatches(c, kMixed);
  }
}

TEST(Packed, WindowsAlibiSoftcapSinksPerSequence) {
  Case c;
  c.hq = 4, c.hkv = 1, c.d = 8, c.dv = 8;
  c.causal = true, c.bottom_right = true, c.wl = 17, c.wr = 0;
  c.alibi = true, c.softcap = 5.0f, c.sink = true;
  ExpectPackedMatches(c, kMixed);
  c.causal = false, c.wl = 0, c.wr = 3, c.sink = false;  // a window without causal
  ExpectPackedMatches(c, kMixed);
}

TEST(Packed, EightSequencesAcrossBlocksWithGqa) {
  // Eight sequences of 1..300 queries, several spanning more than one
  // query block once the blocks shrink to keep both threads busy.
  Case c;
  c.hq = 8, c.hkv = 2, c.d = 32, c.dv = 32, c.causal = true, c.bottom_right = true;
  const std::vector<std::pair<int64_t, int64_t>> lengths = {
      {16, 16}, {300, 300}, {64, 200}, {128, 128}, {1, 256}, {40, 80}, {256, 256}, {17, 33}};
  ExpectPackedMatches(c, lengths);
}

TEST(Packed, BadOffsetsAndShapesNameTheField) {
  Case c;
  c.hq = 2, c.hkv = 2, c.d = 4, c.dv = 4;
  Packed p = Pack(c, {{3, 4}, {2, 2}});
  const Views in = ViewsOf(p);
  auto run = [&](auto&& edit) {
    ScaledDotProductAttentionOptions o = OptionsOf(p, c);
    o.score.return_lse = false;
    edit(o);
    return ScaledDotProductAttention(in.q, in.k, in.v, o).status();
  };
  using attn_test::ExpectStatus;
  const StatusCode kInvalid = StatusCode::kInvalidArgument;
  ExpectStatus(run([](auto& o) {
                 o.cu_seqlens_q = {1, 3, 5};
               }),
               kInvalid, ("cu_seqlens_q[0]: must be 0, got 1"));
  ExpectStatus(run([](auto& o) {
                 o.cu_seqlens_q = {0, 4, 3, 5}, o.cu_seqlens_k = {0, 1, 2, 6};
               }),
               kInvalid, ("cu_seqlens_q: offsets must not fall, got [1] = 4 then [2] = 3"));
  ExpectStatus(run([](auto& o) {
                 o.cu_seqlens_q = {0, 3, 4};
               }),
               kInvalid,
               ("cu_seqlens_q: the last offset must equal query's dim 0 "
                "(total_q) (5), got 4"));
  ExpectStatus(run([](auto& o) {
                 o.cu_seqlens_k = {0, 4, 7};
               }),
               kInvalid,
               ("cu_seqlens_k: the last offset must equal key's dim 0 "
                "(total_k) (6), got 7"));
  ExpectStatus(run([](auto& o) { o.cu_seqlens_k.clear(); }), kInvalid,
               ("cu_seqlens_k: required with cu_seqlens_q"));
  ExpectStatus(run([](auto& o) { o.cu_seqlens_q.clear(); }), kInvalid,
               ("cu_seqlens_q: required with cu_seqlens_k"));
  ExpectStatus(run([](auto& o) {
                 o.cu_seqlens_k = {0, 6};
               }),
               kInvalid, ("cu_seqlens_k: expected 3 offsets (as many as cu_seqlens_q), got 2"));
  ExpectStatus(run([](auto& o) { o.need_weights = true; }), kInvalid,
               ("return_weights: not available with packed inputs"));
  std::vector<uint8_t> kpm(6, 0);
  ExpectStatus(run([&](auto& o) {
                 o.masks.key_padding_mask = TensorView::DenseBool(kpm.data(), {2, 3});
               }),
               kInvalid, ("key_padding_mask: not available with packed inputs"));
  std::vector<float> slopes(3, 0.1f);
  ExpectStatus(run([&](auto& o) { o.score.alibi_slopes = TensorView::Dense(slopes.data(), {3}); }),
               kInvalid, ("alibi_slopes: expected shape [2] or [2, 2], got [3]"));
  // Ranks: packed inputs are [total, H, D].
  const TensorView q4 = TensorView::Dense(p.q.data(), {1, 5, 2, 4});
  ScaledDotProductAttentionOptions o = OptionsOf(p, c);
  ExpectStatus(ScaledDotProductAttention(q4, in.k, in.v, o).status(), kInvalid,
               ("query: rank must be 3 [total_q, H, D] with cu_seqlens, got 4"));
  const TensorView k3 = TensorView::Dense(p.k.data(), {6, 3, 1});
  ExpectStatus(EstimateScaledDotProductAttention(in.q, k3, in.v, o).status(), kInvalid,
               ("key: dim 1 (kv heads) must divide query's heads (2), got 3"));
  o.cu_seqlens_q.assign(70000, 0), o.cu_seqlens_k.assign(70000, 0);
  o.cu_seqlens_q.back() = 5, o.cu_seqlens_k.back() = 6;
  EXPECT_EQ(ScaledDotProductAttention(in.q, in.k, in.v, o).status().code(),
            StatusCode::kResourceExhausted);
}

TEST(Packed, EstimateCountsEachSequenceAlone) {
  Case c;
  c.hq = 2, c.hkv = 2, c.d = 4, c.dv = 4;
  Packed p = Pack(c, {{3, 4}, {0, 5}, {2, 2}});
  const Views in = ViewsOf(p);
  auto cost = EstimateScaledDotProductAttention(in.q, in.k, in.v, OptionsOf(p, c));
  ASSERT_TRUE(cost.ok()) << cost.status().ToString();
  // (3*4 + 0*5 + 2*2) pairs per head, 2 heads, D = 4.
  EXPECT_DOUBLE_EQ(cost->work, 2.0 * (12 + 0 + 4) * 4);
}

}  // namespace
}  // namespace attn
