// bfloat16 compute (ComputePrecision::kBFloat16, issue 24) against float64:
// the accuracy contract (3e-2 absolute with unit-scale N(0, 1) Q, K and V) at
// L = 64 ... 8192 and D = 64 and 128, with and without masks, GQA and every
// score term at once, packed batches and MultiHeadAttention's projections.
// Each case also checks that the bf16 path really ran: its output differs
// from the float32 call's by more than float32 rounding would.
//
// ctest runs this with ATTN_BF16_EMULATION=1, so on a CPU without a bf16
// matrix tier the bf16 kernel runs with widened operands (attn/cpu_info.h);
// on AMX or AVX512-BF16 the real oneDNN bf16 matmuls run, and the tier runs
// force the lower tiers. The error table (max, p99) printed here is the one
// in docs/precision.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "attn/attention.h"
#include "attn/cpu_info.h"
#include "attn/half.h"
#include "float64_reference.h"
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

constexpr double kBf16Tolerance = 3e-2;
// float32 compute is within ~1e-5 of float64; bf16 operands move outputs by
// ~1e-3 at least over these shapes.
constexpr double kVisiblyBf16 = 2e-4;

class Bf16Compute : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Bf16ComputeAvailable())
        << "no bf16 matrix tier and no emulation: run with ATTN_BF16_EMULATION=1 (ctest does)";
  }
};

struct Errors {
  double max = 0, p99 = 0, max_lse = 0, max_vs_f32 = 0;
};

double P99(std::vector<double> e) {
  if (e.empty()) return 0;
  const size_t k =
      std::min(e.size() - 1, static_cast<size_t>(0.99 * static_cast<double>(e.size())));
  std::nth_element(e.begin(), e.begin() + static_cast<std::ptrdiff_t>(k), e.end());
  return e[k];
}

// Runs the case in bf16 and float32; errors over the reference's rows.
Errors Measure(const Case& c, int64_t row_step) {
  const Inputs in = MakeInputs(c);
  const Ref want = Reference(c, in, row_step);
  const TensorView q = TensorView::Dense(in.q.data(), {c.b, c.hq, c.lq, c.d});
  const TensorView k = TensorView::Dense(in.k.data(), {c.b, c.hkv, c.lk, c.d});
  const TensorView v = TensorView::Dense(in.v.data(), {c.b, c.hkv, c.lk, c.dv});
  ScaledDotProductAttentionOptions opt = OptionsFor(c, in);
  auto f32 = ScaledDotProductAttention(q, k, v, opt);
  opt.compute_precision = ComputePrecision::kBFloat16;
  auto bf16 = ScaledDotProductAttention(q, k, v, opt);
  Errors e;
  EXPECT_TRUE(f32.ok() && bf16.ok());
  if (!f32.ok() || !bf16.ok()) return e;
  EXPECT_EQ(f32->compute_precision, ComputePrecision::kFloat32);
  EXPECT_EQ(bf16->compute_precision, ComputePrecision::kBFloat16);
  std::vector<double> errs;
  for (int64_t row = 0; row < c.b * c.hq * c.lq; ++row) {
    const int64_t i = row % c.lq;
    if (i % row_step != 0 && i != c.lq - 1) continue;
    for (int64_t x = 0; x < c.dv; ++x) {
      const size_t at = static_cast<size_t>(row * c.dv + x);
      EXPECT_FALSE(std::isnan(bf16->output.data[at])) << "output " << at;
      const double err = std::abs(bf16->output.data[at] - want.out[at]);
      errs.push_back(err);
      e.max = std::max(e.max, err);
      e.max_vs_f32 =
          std::max(e.max_vs_f32, std::abs(double{bf16->output.data[at]} - f32->output.data[at]));
    }
    const double wl = want.lse[static_cast<size_t>(row)];
    const float gl = bf16->lse->data[static_cast<size_t>(row)];
    if (std::isinf(wl)) {
      EXPECT_EQ(gl, -std::numeric_limits<float>::infinity()) << "lse " << row;
    } else {
      e.max_lse = std::max(e.max_lse, std::abs(gl - wl));
    }
  }
  e.p99 = P99(std::move(errs));
  return e;
}

std::string MaskName(int mask) { return mask == 0 ? "none" : mask == 1 ? "causal" : "gqa+all"; }

Case CaseFor(int64_t l, int64_t d, int mask) {
  Case c;
  c.b = 1, c.hq = 2, c.hkv = 2, c.lq = l, c.lk = l, c.d = d, c.dv = d;
  c.seed = static_cast<uint32_t>(l * 3 + d + mask);
  if (l >= 4096) c.hq = c.hkv = 1;  // keeps the emulated run and the reference short
  if (mask == 1) c.causal = true;
  if (mask == 2) {  // GQA, bottom-right causal, a window, softcap, ALiBi, a sink, padding
    c.hq = 4, c.hkv = 2;
    if (l >= 4096) c.hq = 2, c.hkv = 1;
    c.lq = std::max<int64_t>(1, l / 2);
    c.causal = true, c.bottom_right = true;
    c.wl = l / 4;
    c.softcap = 30.0f;
    c.alibi = true, c.sink = true, c.kpm = true;
  }
  return c;
}

// The accuracy contract over the range, with the table the docs quote.
TEST_F(Bf16Compute, WithinContractOfFloat64AtEveryLengthAndHeadDim) {
  std::printf("%-8s %-4s %-8s %10s %10s %10s %12s\n", "L", "D", "masks", "max", "p99", "lse max",
              "vs float32");
  for (int64_t l : {64, 256, 1024, 2048, 8192}) {
    for (int64_t d : {64, 128}) {
      for (int mask = 0; mask < 3; ++mask) {
        const Case c = CaseFor(l, d, mask);
        SCOPED_TRACE("L=" + std::to_string(l) + " D=" + std::to_string(d) + " " + MaskName(mask));
        const Errors e = Measure(c, l >= 2048 ? l / 64 : 1);
        std::printf("%-8lld %-4lld %-8s %10.2e %10.2e %10.2e %12.2e\n", static_cast<long long>(l),
                    static_cast<long long>(d), MaskName(mask).c_str(), e.max, e.p99, e.max_lse,
                    e.max_vs_f32);
        EXPECT_LT(e.max, kBf16Tolerance);
        EXPECT_LT(e.max_lse, kBf16Tolerance);
        EXPECT_GT(e.max_vs_f32, kVisiblyBf16) << "the call did not compute in bf16";
      }
    }
  }
}

// Permission, not obligation: a call that returns the weights stays float32
// (exact path), and so does float32 precision itself.
TEST_F(Bf16Compute, WeightsAndFloat32CallsStayFloat32) {
  Case c = CaseFor(300, 64, 0);
  const Inputs in = MakeInputs(c);
  const Ref want = Reference(c, in);
  const TensorView q = TensorView::Dense(in.q.data(), {c.b, c.hq, c.lq, c.d});
  const TensorView k = TensorView::Dense(in.k.data(), {c.b, c.hkv, c.lk, c.d});
  const TensorView v = TensorView::Dense(in.v.data(), {c.b, c.hkv, c.lk, c.dv});
  ScaledDotProductAttentionOptions opt = OptionsFor(c, in);
  opt.need_weights = true;
  opt.compute_precision = ComputePrecision::kBFloat16;
  auto got = ScaledDotProductAttention(q, k, v, opt);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->compute_precision, ComputePrecision::kFloat32);
  double worst = 0;
  for (size_t i = 0; i < want.out.size(); ++i) {
    worst = std::max(worst, std::abs(got->output.data[i] - want.out[i]));
  }
  EXPECT_LT(worst, 2e-5);
}

// A packed batch (cu_seqlens) in bf16: every sequence its own problem.
TEST_F(Bf16Compute, PackedBatchWithinContract) {
  Case shape;
  shape.hq = 4, shape.hkv = 2, shape.d = 64, shape.dv = 64;
  shape.causal = true, shape.bottom_right = true;
  const attn_test::Packed pk = attn_test::Pack(shape, {{700, 700}, {1, 300}, {0, 5}, {260, 900}});
  const int64_t tq = pk.cu_q.back(), tk = pk.cu_k.back();
  ScaledDotProductAttentionOptions opt;
  opt.masks.causal = true;
  opt.masks.causal_alignment = CausalAlignment::kBottomRight;
  opt.cu_seqlens_q = pk.cu_q, opt.cu_seqlens_k = pk.cu_k;
  const TensorView q = TensorView::Dense(pk.q.data(), {tq, pk.hq, pk.d});
  const TensorView k = TensorView::Dense(pk.k.data(), {tk, pk.hkv, pk.d});
  const TensorView v = TensorView::Dense(pk.v.data(), {tk, pk.hkv, pk.dv});
  auto f32 = ScaledDotProductAttention(q, k, v, opt);
  opt.compute_precision = ComputePrecision::kBFloat16;
  auto got = ScaledDotProductAttention(q, k, v, opt);
  ASSERT_TRUE(got.ok() && f32.ok());
  EXPECT_EQ(got->compute_precision, ComputePrecision::kBFloat16);
  double worst = 0, vs_f32 = 0;
  for (size_t s = 0; s < pk.cases.size(); ++s) {
    const Case& c = pk.cases[s];
    const Ref want = Reference(c, pk.inputs[s]);
    for (int64_t h = 0; h < c.hq; ++h) {
      for (int64_t i = 0; i < c.lq; ++i) {
        for (int64_t x = 0; x < c.dv; ++x) {
          const size_t at = static_cast<size_t>(((pk.cu_q[s] + i) * pk.hq + h) * pk.dv + x);
          worst =
              std::max(worst, std::abs(got->output.data[at] - want.out[(h * c.lq + i) * c.dv + x]));
          vs_f32 = std::max(vs_f32, std::abs(double{got->output.data[at]} - f32->output.data[at]));
        }
      }
    }
  }
  EXPECT_LT(worst, kBf16Tolerance);
  EXPECT_GT(vs_f32, kVisiblyBf16);
}

// bfloat16 views in place (the server's BFLOAT16 requests): the same answer
// as float32 views of the same (bf16-exact) values, strided views included;
// packed batches too. A call that computes float32, or wants the weights,
// refuses them; so do mixed dtypes.
TEST_F(Bf16Compute, Bf16ViewsAreReadInPlace) {
  Case c = CaseFor(700, 64, 2);
  Inputs in = MakeInputs(c);
  auto round = [](std::vector<float>& x, std::vector<uint16_t>* bits) {
    bits->resize(x.size());
    FloatToHalf(HalfType::kBFloat16, x.data(), bits->data(), static_cast<int64_t>(x.size()));
    HalfToFloat(HalfType::kBFloat16, bits->data(), x.data(), static_cast<int64_t>(x.size()));
  };
  std::vector<uint16_t> q16, k16, v16;
  round(in.q, &q16), round(in.k, &k16), round(in.v, &v16);
  ScaledDotProductAttentionOptions opt = OptionsFor(c, in);
  opt.compute_precision = ComputePrecision::kBFloat16;
  const Shape qs{c.b, c.hq, c.lq, c.d}, ks{c.b, c.hkv, c.lk, c.d}, vs{c.b, c.hkv, c.lk, c.dv};
  auto widened = ScaledDotProductAttention(TensorView::Dense(in.q.data(), qs),
                                           TensorView::Dense(in.k.data(), ks),
                                           TensorView::Dense(in.v.data(), vs), opt);
  const TensorView q = TensorView::DenseBf16(q16.data(), qs);
  const TensorView k = TensorView::DenseBf16(k16.data(), ks);
  const TensorView v = TensorView::DenseBf16(v16.data(), vs);
  auto in_place = ScaledDotProductAttention(q, k, v, opt);
  ASSERT_TRUE(widened.ok() && in_place.ok()) << in_place.status().ToString();
  EXPECT_EQ(in_place->compute_precision, ComputePrecision::kBFloat16);
  ASSERT_EQ(in_place->output.data.size(), widened->output.data.size());
  for (size_t i = 0; i < widened->output.data.size(); ++i) {
    ASSERT_EQ(in_place->output.data[i], widened->output.data[i]) << i;
  }
  EXPECT_EQ(in_place->lse->data, widened->lse->data);

  // Strided: the key read through a transposed-storage view ([.., D, Lk]
  // memory, viewed as [.., Lk, D]).
  std::vector<uint16_t> kt(k16.size());
  for (int64_t h = 0; h < c.b * c.hkv; ++h)
    for (int64_t j = 0; j < c.lk; ++j)
      for (int64_t x = 0; x < c.d; ++x)
        kt[(h * c.d + x) * c.lk + j] = k16[(h * c.lk + j) * c.d + x];
  TensorView k_strided = TensorView::DenseBf16(kt.data(), ks);
  k_strided.strides = {c.hkv * c.d * c.lk, c.d * c.lk, 1, c.lk};
  auto strided = ScaledDotProductAttention(q, k_strided, v, opt);
  ASSERT_TRUE(strided.ok()) << strided.status().ToString();
  for (size_t i = 0; i < widened->output.data.size(); ++i) {
    ASSERT_NEAR(strided->output.data[i], widened->output.data[i], 1e-5) << i;
  }

  // Refused where the call would compute float32, and with mixed dtypes.
  ScaledDotProductAttentionOptions f32 = opt;
  f32.compute_precision = ComputePrecision::kFloat32;
  auto refused = ScaledDotProductAttention(q, k, v, f32);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("query: bfloat16 views need a call that computes"),
            std::string::npos)
      << refused.status().message();
  ScaledDotProductAttentionOptions weights = opt;
  weights.need_weights = true;
  EXPECT_FALSE(ScaledDotProductAttention(q, k, v, weights).ok());
  auto mixed = ScaledDotProductAttention(q, TensorView::Dense(in.k.data(), ks), v, opt);
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("key: dtype must equal query's (bfloat16), got float32"),
            std::string::npos)
      << mixed.status().message();
  // The estimate validates alike.
  EXPECT_TRUE(EstimateScaledDotProductAttention(q, k, v, opt).ok());
  EXPECT_FALSE(EstimateScaledDotProductAttention(q, k, v, f32).ok());
}

TEST_F(Bf16Compute, PackedBf16ViewsAreReadInPlace) {
  Case shape;
  shape.hq = 4, shape.hkv = 2, shape.d = 64, shape.dv = 64;
  shape.causal = true;
  attn_test::Packed pk = attn_test::Pack(shape, {{300, 300}, {1, 40}, {513, 513}});
  std::vector<uint16_t> q16(pk.q.size()), k16(pk.k.size()), v16(pk.v.size());
  for (auto [x, bits] : {std::pair{&pk.q, &q16}, std::pair{&pk.k, &k16}, std::pair{&pk.v, &v16}}) {
    FloatToHalf(HalfType::kBFloat16, x->data(), bits->data(), static_cast<int64_t>(x->size()));
    HalfToFloat(HalfType::kBFloat16, bits->data(), x->data(), static_cast<int64_t>(x->size()));
  }
  const int64_t tq = pk.cu_q.back(), tk = pk.cu_k.back();
  ScaledDotProductAttentionOptions opt;
  opt.masks.causal = true;
  opt.cu_seqlens_q = pk.cu_q, opt.cu_seqlens_k = pk.cu_k;
  opt.compute_precision = ComputePrecision::kBFloat16;
  auto widened =
      ScaledDotProductAttention(TensorView::Dense(pk.q.data(), {tq, pk.hq, pk.d}),
                                TensorView::Dense(pk.k.data(), {tk, pk.hkv, pk.d}),
                                TensorView::Dense(pk.v.data(), {tk, pk.hkv, pk.dv}), opt);
  auto in_place =
      ScaledDotProductAttention(TensorView::DenseBf16(q16.data(), {tq, pk.hq, pk.d}),
                                TensorView::DenseBf16(k16.data(), {tk, pk.hkv, pk.d}),
                                TensorView::DenseBf16(v16.data(), {tk, pk.hkv, pk.dv}), opt);
  ASSERT_TRUE(widened.ok() && in_place.ok()) << in_place.status().ToString();
  EXPECT_EQ(in_place->output.data, widened->output.data);
}

// nn.MultiheadAttention semantics with bf16 projections and attention: the
// weights rounded in the call, or packed by their owner (weight_bf16, as
// models do), give the same answer, within the contract of float64.
TEST_F(Bf16Compute, MultiHeadAttentionProjectionsWithinContract) {
  const int64_t b = 2, l = 160, e = 256, h = 4;
  std::mt19937 rng(7);
  const float wscale = 1.0f / std::sqrt(static_cast<float>(e));
  std::vector<float> x = attn_test::RandomFloats(b * l * e, rng);
  std::vector<float> in_w = attn_test::RandomFloats(3 * e * e, rng, wscale);
  std::vector<float> in_b = attn_test::RandomFloats(3 * e, rng, 0.1f);
  std::vector<float> out_w = attn_test::RandomFloats(e * e, rng, wscale);
  std::vector<float> out_b = attn_test::RandomFloats(e, rng, 0.1f);
  auto linear = [&](const float* w, const float* bias, int64_t rows) {
    LinearView lin{TensorView::Dense(w, {rows, e}), TensorView::Dense(bias, {rows})};
    return lin;
  };
  ProjectionWeights pw{linear(in_w.data(), in_b.data(), e),
                       linear(in_w.data() + e * e, in_b.data() + e, e),
                       linear(in_w.data() + 2 * e * e, in_b.data() + 2 * e, e),
                       linear(out_w.data(), out_b.data(), e)};
  MultiHeadAttentionOptions opt;
  opt.num_heads = h;
  opt.masks.causal = true;
  const TensorView xv = TensorView::Dense(x.data(), {b, l, e});
  auto f32 = MultiHeadAttention(pw, xv, xv, xv, opt);
  opt.compute_precision = ComputePrecision::kBFloat16;
  auto rounded_here = MultiHeadAttention(pw, xv, xv, xv, opt);
  std::vector<uint16_t> in16(in_w.size()), out16(out_w.size());
  FloatToHalf(HalfType::kBFloat16, in_w.data(), in16.data(), static_cast<int64_t>(in16.size()));
  FloatToHalf(HalfType::kBFloat16, out_w.data(), out16.data(), static_cast<int64_t>(out16.size()));
  pw.q.weight_bf16 = in16.data(), pw.k.weight_bf16 = in16.data() + e * e;
  pw.v.weight_bf16 = in16.data() + 2 * e * e, pw.out->weight_bf16 = out16.data();
  auto packed = MultiHeadAttention(pw, xv, xv, xv, opt);
  ASSERT_TRUE(f32.ok() && rounded_here.ok() && packed.ok());
  EXPECT_EQ(packed->compute_precision, ComputePrecision::kBFloat16);

  // float64: projections, per-head causal attention, the output projection.
  const std::vector<double> xd = attn_test::ToDouble(x.data(), x.size());
  auto sub = [](const std::vector<float>& w, int64_t from, int64_t n) {
    return attn_test::ToDouble(w.data() + from, static_cast<size_t>(n));
  };
  const std::vector<double> pq =
      attn_test::ReferenceLinear(xd, b * l, e, sub(in_w, 0, e * e), e, sub(in_b, 0, e));
  const std::vector<double> pk =
      attn_test::ReferenceLinear(xd, b * l, e, sub(in_w, e * e, e * e), e, sub(in_b, e, e));
  const std::vector<double> pv =
      attn_test::ReferenceLinear(xd, b * l, e, sub(in_w, 2 * e * e, e * e), e, sub(in_b, 2 * e, e));
  attn_test::RefProblem rp;
  const int64_t dh = e / h;
  rp.b = b, rp.h = h, rp.lq = l, rp.lk = l, rp.d = dh, rp.dv = dh;
  rp.scale = 1.0 / std::sqrt(static_cast<double>(dh));
  rp.causal = true;
  auto heads = [&](const std::vector<double>& p) {  // [B, L, H, Dh] -> [B, H, L, Dh]
    std::vector<double> r(p.size());
    for (int64_t bb = 0; bb < b; ++bb)
      for (int64_t i = 0; i < l; ++i)
        for (int64_t hh = 0; hh < h; ++hh)
          for (int64_t c = 0; c < dh; ++c)
            r[((bb * h + hh) * l + i) * dh + c] = p[(bb * l + i) * e + hh * dh + c];
    return r;
  };
  rp.q = heads(pq), rp.k = heads(pk), rp.v = heads(pv);
  const attn_test::RefResult att = attn_test::ReferenceAttention(rp);
  std::vector<double> merged(b * l * e);
  for (int64_t bb = 0; bb < b; ++bb)
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t i = 0; i < l; ++i)
        for (int64_t c = 0; c < dh; ++c)
          merged[(bb * l + i) * e + hh * dh + c] = att.out[((bb * h + hh) * l + i) * dh + c];
  const std::vector<double> want =
      attn_test::ReferenceLinear(merged, b * l, e, sub(out_w, 0, e * e), e, sub(out_b, 0, e));

  double worst = 0, vs_f32 = 0, here_vs_packed = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(packed->output.data[i] - want[i]));
    vs_f32 = std::max(vs_f32, std::abs(double{packed->output.data[i]} - f32->output.data[i]));
    here_vs_packed = std::max(
        here_vs_packed, std::abs(double{packed->output.data[i]} - rounded_here->output.data[i]));
  }
  EXPECT_LT(worst, kBf16Tolerance);
  EXPECT_GT(vs_f32, kVisiblyBf16);
  // The same bf16 operands either way: only the float32 sums' order may differ.
  EXPECT_LT(here_vs_packed, 1e-5);
}

// A bf16 call rounds float32 keys and values to bf16 once for the whole call
// (kernels/block_operands.h): its estimate counts those copies (2 bytes an
// element) as scratch, so that the server's memory limit sees them; float32
// calls and bf16 views make none.
TEST_F(Bf16Compute, EstimatesCountTheKeyValueCopies) {
  const int64_t b = 2, hq = 8, hkv = 2, lq = 300, lk = 500, d = 64, dv = 32;
  std::vector<float> q(b * hq * lq * d), k(b * hkv * lk * d), v(b * hkv * lk * dv);
  std::vector<uint16_t> q16(q.size()), k16(k.size()), v16(v.size());
  const Shape qs{b, hq, lq, d}, ks{b, hkv, lk, d}, vs{b, hkv, lk, dv};
  ScaledDotProductAttentionOptions opt;
  auto f32 = EstimateScaledDotProductAttention(TensorView::Dense(q.data(), qs),
                                               TensorView::Dense(k.data(), ks),
                                               TensorView::Dense(v.data(), vs), opt);
  opt.compute_precision = ComputePrecision::kBFloat16;
  auto bf16 = EstimateScaledDotProductAttention(TensorView::Dense(q.data(), qs),
                                                TensorView::Dense(k.data(), ks),
                                                TensorView::Dense(v.data(), vs), opt);
  auto views = EstimateScaledDotProductAttention(TensorView::DenseBf16(q16.data(), qs),
                                                 TensorView::DenseBf16(k16.data(), ks),
                                                 TensorView::DenseBf16(v16.data(), vs), opt);
  ASSERT_TRUE(f32.ok() && bf16.ok() && views.ok());
  EXPECT_EQ(f32->scratch_bytes, 0.0);
  EXPECT_EQ(bf16->scratch_bytes, 2.0 * static_cast<double>(k.size() + v.size()));
  EXPECT_EQ(views->scratch_bytes, 0.0);

  // MultiHeadAttention: its float32 projections, plus the bf16 copies of K and V.
  const int64_t e = 64, l = 40;
  std::vector<float> w(static_cast<size_t>(e * e), 0.0f), x(static_cast<size_t>(b * l * e));
  auto linear = [&] { return LinearView{TensorView::Dense(w.data(), {e, e}), std::nullopt}; };
  ProjectionWeights pw{linear(), linear(), linear(), std::nullopt};
  MultiHeadAttentionOptions mo;
  mo.num_heads = 4;
  const TensorView xv = TensorView::Dense(x.data(), {b, l, e});
  auto m32 = EstimateMultiHeadAttention(pw, xv, xv, xv, mo);
  mo.compute_precision = ComputePrecision::kBFloat16;
  auto m16 = EstimateMultiHeadAttention(pw, xv, xv, xv, mo);
  ASSERT_TRUE(m32.ok() && m16.ok());
  EXPECT_EQ(m16->scratch_bytes - m32->scratch_bytes, 2.0 * static_cast<double>(b * l * 2 * e));
}

}  // namespace
}  // namespace attn
