// FLOAT16 and BFLOAT16 through the attention.v1 API, end to end. The
// documented contract: the result equals the float32 computation on the
// exactly widened inputs, rounded once to the query's type (nearest even).
// Checked three ways: against a float64 reference on the widened inputs
// (within half an output ulp plus float32's own error); bit for bit against
// the server's float32 answer to the widened request, rounded here; and on
// the special values (NaN, Inf, subnormals, overflow to Inf on the way out).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "attention_client.h"
#include "attn/half.h"
#include "float64_reference.h"
#include "host_array.h"
#include "request_builder.h"
#include "test_server.h"

namespace attn {
namespace {

using client::HostArray;
using wire::WireType;

HalfType AsHalf(WireType t) {
  return t == WireType::kFloat16 ? HalfType::kFloat16 : HalfType::kBFloat16;
}

// `a` rounded to `type` and widened back: the values the server will see.
HostArray RoundTrip(HostArray a, WireType type) {
  std::vector<uint16_t> h(a.values.size());
  FloatToHalf(AsHalf(type), a.values.data(), h.data(), static_cast<int64_t>(h.size()));
  HalfToFloat(AsHalf(type), h.data(), a.values.data(), static_cast<int64_t>(h.size()));
  return a;
}

HostArray Random(Shape shape, std::mt19937& rng) { return client::RandomArray(shape, rng); }

// Half an ulp of `type` at |x| (the largest error of one rounding).
double HalfUlp(double x, WireType type) {
  const int mantissa = type == WireType::kFloat16 ? 10 : 7;
  const int min_exp = type == WireType::kFloat16 ? -14 : -126;
  const int e =
      std::max(x == 0 ? min_exp : static_cast<int>(std::floor(std::log2(std::abs(x)))), min_exp);
  return std::ldexp(1.0, e - mantissa - 1);
}

class HalfPrecision : public attn_test::ServerWithClient<::testing::TestWithParam<WireType>> {};

TEST_P(HalfPrecision, SdpaEqualsTheFloat64ReferenceOnWidenedInputsRoundedOnce) {
  const WireType type = GetParam();
  std::mt19937 rng(7);
  const int64_t b = 2, h = 3, lq = 5, lk = 9, d = 16;
  const HostArray q = RoundTrip(Random({b, h, lq, d}, rng), type);
  const HostArray k = RoundTrip(Random({b, h, lk, d}, rng), type);
  const HostArray v = RoundTrip(Random({b, h, lk, d}, rng), type);
  attention::v1::AttentionRequest req;
  *req.mutable_query() = client::ToWire(q, wire::Encoding::kData, type);
  *req.mutable_key() = client::ToWire(k, wire::Encoding::kData, type);
  *req.mutable_value() = client::ToWire(v, wire::Encoding::kData, type);
  req.set_causal(true);
  // Computed in float32: the server's auto policy would compute a BFLOAT16
  // query in bf16 on a CPU with a bf16 matrix tier (variants_rpc_test covers
  // that), and this test is about the one rounding on the way out.
  req.mutable_options()->set_compute_precision(attention::v1::PRECISION_FLOAT32);
  EXPECT_EQ(req.query().data().size(), 2 * q.values.size());  // half the bytes in
  attention::v1::AttentionResponse resp;
  ASSERT_TRUE(client_->Attention(req, &resp).ok());
  EXPECT_EQ(resp.output().dtype(), wire::NativeDataType(type));
  EXPECT_EQ(resp.output().data().size(), 2 * static_cast<size_t>(b * h * lq * d));  // and out
  auto out = client::FromWire(resp.output(), "output");
  ASSERT_TRUE(out.ok()) << out.status().ToString();

  attn_test::RefProblem p;
  p.b = b, p.h = h, p.lq = lq, p.lk = lk, p.d = d, p.dv = d;
  p.q.assign(q.values.begin(), q.values.end());
  p.k.assign(k.values.begin(), k.values.end());
  p.v.assign(v.values.begin(), v.values.end());
  p.scale = 1.0 / std::sqrt(static_cast<double>(d));
  p.causal = true;
  const auto ref = attn_test::ReferenceAttention(p);
  ASSERT_EQ(out->values.size(), ref.out.size());
  int64_t bad = 0;
  for (size_t i = 0; i < ref.out.size(); ++i) {
    // One rounding to the half type, after float32's own error (tiny next to it).
    const double tol = HalfUlp(ref.out[i], type) + 1e-5;
    if (!(std::abs(out->values[i] - ref.out[i]) <= tol) && bad++ < 5) {
      ADD_FAILURE() << "element " << i << ": got " << out->values[i] << ", want " << ref.out[i]
                    << " within " << tol;
    }
  }
  EXPECT_EQ(bad, 0);
}

// The half answer is, bit for bit, the server's float32 answer to the
// widened inputs rounded once: MHA with inline half weights and a half bias.
TEST_P(HalfPrecision, MhaBitsAreTheFloat32AnswerRoundedOnce) {
  const WireType type = GetParam();
  std::mt19937 rng(11);
  const int64_t e = 32, heads = 4, l = 6;
  std::vector<HostArray> w;
  for (Shape s : {Shape{e, e}, Shape{e, e}, Shape{e, e}, Shape{e, e}, Shape{e}, Shape{e}, Shape{e},
                  Shape{e}}) {
    w.push_back(RoundTrip(client::RandomArray(s, rng, 0.2f), type));
  }
  const HostArray x = RoundTrip(Random({2, l, e}, rng), type);
  const HostArray bias = RoundTrip(Random({l, l}, rng), type);
  auto request = [&](WireType t) {
    client::CallSpec s;
    s.op = "mha";
    s.dtype = t;
    s.query = x;
    s.attn_bias = bias;
    s.num_heads = heads;
    s.projections = w;
    s.return_weights = true;
    auto call = client::BuildCall(s);
    EXPECT_TRUE(call.ok());
    return call->mha;
  };
  attention::v1::AttentionResponse half, full;
  ASSERT_TRUE(client_->MultiHeadAttention(request(type), &half).ok());
  ASSERT_TRUE(client_->MultiHeadAttention(request(WireType::kFloat32), &full).ok());
  for (auto [h, f] :
       {std::pair{&half.output(), &full.output()}, std::pair{&half.weights(), &full.weights()}}) {
    ASSERT_EQ(h->dtype(), wire::NativeDataType(type));
    ASSERT_EQ(f->dtype(), attention::v1::DATA_TYPE_FLOAT32);
    const int64_t n = static_cast<int64_t>(f->data().size() / 4);
    std::vector<float> f32(n);
    std::memcpy(f32.data(), f->data().data(), f->data().size());
    std::vector<uint16_t> want(n);
    FloatToHalf(AsHalf(type), f32.data(), want.data(), n);
    ASSERT_EQ(h->data().size(), 2 * static_cast<size_t>(n));
    EXPECT_EQ(std::memcmp(h->data().data(), want.data(), h->data().size()), 0);
  }
}

// Uniform attention (a zero query) over identical value rows returns each
// value column exactly, so the output shows what the rounding does to it.
TEST_P(HalfPrecision, SpecialValuesOnTheWayOut) {
  const WireType type = GetParam();
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Overflows float16 (not bfloat16); a float16 subnormal; NaN; +-Inf.
  const std::vector<float> row = {1e6f, -1e6f, 1e-6f, nan, inf, -inf, 0.1f, -2.5f};
  const int64_t lk = 4, dv = static_cast<int64_t>(row.size());
  HostArray q{{1, 2}, std::vector<float>(2, 0.0f), false};  // half: the query's type
  HostArray k{{lk, 2}, std::vector<float>(lk * 2, 1.0f), false};
  HostArray v{{lk, dv}, {}, false};
  for (int64_t j = 0; j < lk; ++j) v.values.insert(v.values.end(), row.begin(), row.end());
  attention::v1::AttentionRequest req;
  *req.mutable_query() = client::ToWire(q, wire::Encoding::kData, type);
  *req.mutable_key() = client::ToWire(k, wire::Encoding::kData);  // float32, which may mix
  *req.mutable_value() = client::ToWire(v, wire::Encoding::kData);
  req.mutable_options()->set_compute_precision(attention::v1::PRECISION_FLOAT32);
  attention::v1::AttentionResponse resp;
  ASSERT_TRUE(client_->Attention(req, &resp).ok());
  ASSERT_EQ(resp.output().data().size(), 2 * row.size());
  std::vector<uint16_t> got(row.size()), want(row.size());
  std::memcpy(got.data(), resp.output().data().data(), 2 * row.size());
  FloatToHalf(AsHalf(type), row.data(), want.data(), dv);
  for (int64_t c = 0; c < dv; ++c) {
    SCOPED_TRACE("column " + std::to_string(c));
    float g = 0;
    HalfToFloat(AsHalf(type), &got[c], &g, 1);
    if (std::isnan(row[c])) {
      EXPECT_TRUE(std::isnan(g));
    } else {
      EXPECT_EQ(got[c], want[c]);  // same bits: one rounding, nearest even
    }
  }
  float first = 0, third = 0;
  HalfToFloat(AsHalf(type), &got[0], &first, 1);
  HalfToFloat(AsHalf(type), &got[2], &third, 1);
  if (type == WireType::kFloat16) {
    EXPECT_EQ(first, inf);   // 1e6 is over float16's 65504
    EXPECT_GT(third, 0.0f);  // a subnormal, kept
    EXPECT_LT(third, 6.2e-5f);
  } else {
    EXPECT_NEAR(first, 1e6f, 1e6f / 128);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, HalfPrecision,
                         ::testing::Values(WireType::kFloat16, WireType::kBFloat16),
                         [](const auto& info) {
                           return info.param == WireType::kFloat16 ? "Float16" : "BFloat16";
                         });

}  // namespace
}  // namespace attn
