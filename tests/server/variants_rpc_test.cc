// attention.v1's AttentionOptions end to end (issue 23): a real server over
// TCP, each option through Attention against the float64 reference of
// tests/variants_reference.h, grouped-query shapes, the lse in both
// encodings, MultiHeadAttention and CrossAttention passing the options to
// core, and the bad inputs, each INVALID_ARGUMENT naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "attention/v1/attention.pb.h"
#include "attention_client.h"
#include "attention_v1/attention_v1_adapter.h"
#include "attn/attention.h"
#include "attn/cpu_info.h"
#include "attn/half.h"
#include "attn/model.h"
#include "host_array.h"
#include "inference/open_inference_grpc.grpc.pb.h"
#include "test_server.h"
#include "variants_reference.h"

namespace attn {
namespace {

using attn_test::Case;
using attn_test::Inputs;

class VariantsRpc : public attn_test::ServerWithClient<> {};

attention::v1::Tensor Wire(const std::vector<float>& x, Shape shape,
                           wire::Encoding enc = wire::Encoding::kData) {
  client::HostArray a;
  a.shape = std::move(shape);
  a.values = x;
  return client::ToWire(a, enc);
}

// The request of `c` (inputs `in`), with every option of the case.
attention::v1::AttentionRequest Request(const Case& c, const Inputs& in, wire::Encoding enc) {
  attention::v1::AttentionRequest req;
  *req.mutable_query() = Wire(in.q, {c.b, c.hq, c.lq, c.d}, enc);
  *req.mutable_key() = Wire(in.k, {c.b, c.hkv, c.lk, c.d}, enc);
  *req.mutable_value() = Wire(in.v, {c.b, c.hkv, c.lk, c.dv}, enc);
  req.set_causal(c.causal);
  auto* o = req.mutable_options();
  o->set_causal_alignment(c.bottom_right ? attention::v1::CAUSAL_ALIGNMENT_BOTTOM_RIGHT
                                         : attention::v1::CAUSAL_ALIGNMENT_TOP_LEFT);
  if (c.wl) o->set_window_left(*c.wl);
  if (c.wr) o->set_window_right(*c.wr);
  if (c.softcap > 0) o->set_softcap(c.softcap);
  if (c.alibi) *o->mutable_alibi_slopes() = Wire(in.alibi, {c.b, c.hq}, enc);
  if (c.sink) *o->mutable_sink_logits() = Wire(in.sink, {c.hq}, enc);
  o->set_return_lse(true);
  return req;
}

void ExpectReference(const Case& c, const Inputs& in, const attention::v1::AttentionResponse& r) {
  const attn_test::Ref want = attn_test::Reference(c, in);
  auto out = client::FromWire(r.output(), "output");
  auto lse = client::FromWire(r.lse(), "lse");
  ASSERT_TRUE(out.ok() && lse.ok());
  EXPECT_EQ(out->shape, (Shape{c.b, c.hq, c.lq, c.dv}));
  EXPECT_EQ(lse->shape, (Shape{c.b, c.hq, c.lq}));
  EXPECT_EQ(r.lse().dtype(), attention::v1::DATA_TYPE_FLOAT32);
  double worst = 0;
  for (size_t i = 0; i < want.out.size(); ++i) {
    worst = std::max(worst, std::abs(out->values[i] - want.out[i]));
  }
  EXPECT_LT(worst, 2e-5);
  for (size_t i = 0; i < want.lse.size(); ++i) {
    if (std::isinf(want.lse[i])) {
      EXPECT_TRUE(std::isinf(lse->values[i]) && lse->values[i] < 0) << i;
    } else {
      EXPECT_NEAR(lse->values[i], want.lse[i], 2e-5 * std::max(1.0, std::abs(want.lse[i]))) << i;
    }
  }
}

TEST_F(VariantsRpc, EveryOptionAtOnceWithGroupedHeadsMatchesTheReference) {
  for (auto enc : {wire::Encoding::kData, wire::Encoding::kValues}) {
    Case c;
    c.b = 2, c.hq = 8, c.hkv = 2, c.lq = 40, c.lk = 300, c.d = 16, c.dv = 8;
    c.causal = true, c.bottom_right = true, c.wl = 64, c.softcap = 20.0f;
    c.alibi = true, c.sink = true;
    const Inputs in = attn_test::MakeInputs(c);
    attention::v1::AttentionResponse resp;
    const grpc::Status st = client_->Attention(Request(c, in, enc), &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.lse().values_size() > 0, enc == wire::Encoding::kValues);
    ExpectReference(c, in, resp);
  }
}

TEST_F(VariantsRpc, DecodeRowBottomRightSeesTheWholeCache) {
  Case c;
  c.hq = 4, c.hkv = 1, c.lq = 1, c.lk = 700, c.causal = true, c.bottom_right = true;
  const Inputs in = attn_test::MakeInputs(c);
  attention::v1::AttentionResponse resp;
  ASSERT_TRUE(client_->Attention(Request(c, in, wire::Encoding::kData), &resp).ok());
  ExpectReference(c, in, resp);
}

TEST_F(VariantsRpc, MultiHeadAndCrossAttentionPassTheOptionsToCore) {
  std::mt19937 rng(5);
  const int64_t e = 16, h = 4, lq = 6, lk = 11;
  std::vector<client::HostArray> w;
  for (int i = 0; i < 4; ++i) w.push_back(client::RandomArray({e, e}, rng, 0.3f));
  const client::HostArray x = client::RandomArray({1, lq, e}, rng);
  const client::HostArray mem = client::RandomArray({1, lk, e}, rng);
  const std::vector<float> slopes = {0.5f, 0.25f, 0.125f, 0.0625f};

  attention::v1::MultiHeadAttentionRequest req;
  *req.mutable_query() = client::ToWire(x, wire::Encoding::kData);
  *req.mutable_key() = client::ToWire(mem, wire::Encoding::kData);
  *req.mutable_value() = client::ToWire(mem, wire::Encoding::kData);
  req.set_num_heads(static_cast<int32_t>(h));
  req.set_causal(true);
  auto* p = req.mutable_projections();
  *p->mutable_q_weight() = client::ToWire(w[0], wire::Encoding::kData);
  *p->mutable_k_weight() = client::ToWire(w[1], wire::Encoding::kData);
  *p->mutable_v_weight() = client::ToWire(w[2], wire::Encoding::kData);
  *p->mutable_out_weight() = client::ToWire(w[3], wire::Encoding::kData);
  auto* o = req.mutable_options();
  o->set_causal_alignment(attention::v1::CAUSAL_ALIGNMENT_BOTTOM_RIGHT);
  o->set_window_left(3);
  o->set_softcap(4.0f);
  *o->mutable_alibi_slopes() = Wire(slopes, {h});
  o->set_return_lse(true);
  attention::v1::AttentionResponse resp;
  ASSERT_TRUE(client_->MultiHeadAttention(req, &resp).ok());

  // Core, in process, with the same weights and options.
  auto view = [](const client::HostArray& a) {
    return TensorView::Dense(a.values.data(), a.shape);
  };
  ProjectionWeights pw{{view(w[0])}, {view(w[1])}, {view(w[2])}, LinearView{view(w[3])}};
  MultiHeadAttentionOptions mo;
  mo.num_heads = h;
  mo.masks.causal = true;
  mo.masks.causal_alignment = CausalAlignment::kBottomRight;
  mo.masks.window_left = 3;
  mo.score.softcap = 4.0f;
  mo.score.alibi_slopes = TensorView::Dense(slopes.data(), {h});
  mo.score.return_lse = true;
  auto want = MultiHeadAttention(pw, view(x), view(mem), view(mem), mo);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  auto out = client::FromWire(resp.output(), "output");
  auto lse = client::FromWire(resp.lse(), "lse");
  ASSERT_TRUE(out.ok() && lse.ok());
  EXPECT_EQ(lse->shape, (Shape{1, h, lq}));
  ASSERT_EQ(out->values.size(), want->output.data.size());
  for (size_t i = 0; i < out->values.size(); ++i) {
    EXPECT_FLOAT_EQ(out->values[i], want->output.data[i]) << i;
  }
  for (size_t i = 0; i < lse->values.size(); ++i) {
    EXPECT_FLOAT_EQ(lse->values[i], want->lse->data[i]) << i;
  }
  // Without the options, the answer differs: they were not ignored.
  req.clear_options();
  attention::v1::AttentionResponse plain;
  ASSERT_TRUE(client_->MultiHeadAttention(req, &plain).ok());
  auto plain_out = client::FromWire(plain.output(), "output");
  ASSERT_TRUE(plain_out.ok());
  double diff = 0;
  for (size_t i = 0; i < out->values.size(); ++i) {
    diff = std::max(diff, double{std::abs(out->values[i] - plain_out->values[i])});
  }
  EXPECT_GT(diff, 1e-3);
  EXPECT_FALSE(plain.has_lse());

  // CrossAttention takes them too (a window of 0 around the bottom-right
  // position: each decoder row sees one encoder key).
  attention::v1::CrossAttentionRequest cross;
  *cross.mutable_decoder() = client::ToWire(x, wire::Encoding::kData);
  *cross.mutable_encoder() = client::ToWire(mem, wire::Encoding::kData);
  auto* cp = cross.mutable_projections();
  *cp->mutable_q_weight() = p->q_weight();
  *cp->mutable_k_weight() = p->k_weight();
  *cp->mutable_v_weight() = p->v_weight();
  cross.set_return_weights(true);
  cross.mutable_options()->set_causal_alignment(attention::v1::CAUSAL_ALIGNMENT_BOTTOM_RIGHT);
  cross.mutable_options()->set_window_left(0);
  cross.mutable_options()->set_window_right(0);
  ASSERT_TRUE(client_->CrossAttention(cross, &resp).ok());
  auto weights = client::FromWire(resp.weights(), "weights");
  ASSERT_TRUE(weights.ok());
  for (int64_t i = 0; i < lq; ++i) {
    for (int64_t j = 0; j < lk; ++j) {
      EXPECT_EQ(weights->values[i * lk + j], j == i + lk - lq ? 1.0f : 0.0f) << i << "," << j;
    }
  }
}

// MultiHeadAttention with grouped-query projections: inline k/v weights of
// Hkv heads with num_kv_heads, and the demo-gqa model (ListModels says 2 kv
// heads), each equal to core in process on the same weights; a num_kv_heads
// that disagrees with the model, or does not fit the weights, is refused.
TEST_F(VariantsRpc, MultiHeadAttentionWithGroupedKvHeads) {
  std::mt19937 rng(8);
  const int64_t e = 24, h = 6, hkv = 2, dh = e / h, lq = 5, lk = 7;
  const client::HostArray wq = client::RandomArray({e, e}, rng, 0.3f);
  const client::HostArray wk = client::RandomArray({hkv * dh, e}, rng, 0.3f);
  const client::HostArray wv = client::RandomArray({hkv * dh, e}, rng, 0.3f);
  const client::HostArray x = client::RandomArray({2, lq, e}, rng);
  const client::HostArray mem = client::RandomArray({2, lk, e}, rng);
  attention::v1::MultiHeadAttentionRequest req;
  *req.mutable_query() = client::ToWire(x, wire::Encoding::kData);
  *req.mutable_key() = client::ToWire(mem, wire::Encoding::kData);
  *req.mutable_value() = client::ToWire(mem, wire::Encoding::kData);
  req.set_num_heads(static_cast<int32_t>(h));
  req.set_num_kv_heads(static_cast<int32_t>(hkv));
  req.set_causal(true);
  auto* p = req.mutable_projections();
  *p->mutable_q_weight() = client::ToWire(wq, wire::Encoding::kData);
  *p->mutable_k_weight() = client::ToWire(wk, wire::Encoding::kData);
  *p->mutable_v_weight() = client::ToWire(wv, wire::Encoding::kData);
  attention::v1::AttentionResponse resp;
  grpc::Status st = client_->MultiHeadAttention(req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  auto view = [](const client::HostArray& a) {
    return TensorView::Dense(a.values.data(), a.shape);
  };
  MultiHeadAttentionOptions mo;
  mo.num_heads = h, mo.num_kv_heads = hkv, mo.masks.causal = true;
  ProjectionWeights pw{{view(wq)}, {view(wk)}, {view(wv)}, std::nullopt};
  auto want = MultiHeadAttention(pw, view(x), view(mem), view(mem), mo);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  auto out = client::FromWire(resp.output(), "output");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->shape, (Shape{2, lq, e}));
  EXPECT_EQ(out->values, std::vector<float>(want->output.data.begin(), want->output.data.end()));
  req.set_num_kv_heads(3);  // v's 8 rows are not 3 heads
  st = client_->MultiHeadAttention(req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("num_kv_heads: must divide the projection widths (q 24 by "
                                    "num_heads, v 8 by num_kv_heads), got 3"),
            std::string::npos)
      << st.error_message();

  // The demo-gqa model: 8 heads over 2 kv heads, E = 256.
  attention::v1::ListModelsResponse models;
  ASSERT_TRUE(client_->ListModels(&models).ok());
  bool listed = false;
  for (const auto& m : models.models()) {
    if (m.name() == "demo-gqa") listed = m.num_heads() == 8 && m.num_kv_heads() == 2;
    if (m.name() == "demo-mha-small") {
      EXPECT_EQ(m.num_kv_heads(), m.num_heads());
    }
  }
  EXPECT_TRUE(listed);
  const client::HostArray y = client::RandomArray({1, 4, 256}, rng);
  attention::v1::MultiHeadAttentionRequest mreq;
  mreq.set_model("demo-gqa");
  *mreq.mutable_query() = client::ToWire(y, wire::Encoding::kData);
  ASSERT_TRUE(client_->MultiHeadAttention(mreq, &resp).ok());
  const std::vector<AttentionModel> demo = BuiltinDemoModels();
  const AttentionModel* gqa = nullptr;
  for (const AttentionModel& m : demo) gqa = m.info().name == "demo-gqa" ? &m : gqa;
  ASSERT_NE(gqa, nullptr);
  MultiHeadAttentionOptions go;
  go.num_heads = 8, go.num_kv_heads = 2;
  auto local = MultiHeadAttention(gqa->projections(), view(y), view(y), view(y), go);
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  out = client::FromWire(resp.output(), "output");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->values, std::vector<float>(local->output.data.begin(), local->output.data.end()));
  mreq.set_num_kv_heads(8);
  st = client_->MultiHeadAttention(mreq, &resp);
  EXPECT_NE(st.error_message().find("num_kv_heads: model 'demo-gqa' has 2 kv heads, got 8"),
            std::string::npos)
      << st.error_message();
}

// Every computed answer says its arithmetic (response metadata
// attn-compute-precision): float32 for a float32 query, and for a BFLOAT16
// one permitted bf16 (PRECISION_BFLOAT16, or auto) exactly when core can
// compute bf16 on this CPU (Bf16ComputeAvailable: a bf16 matrix tier, or
// the emulation that ctest's bf16 run of this test turns on).
TEST_F(VariantsRpc, AnswersSayTheirComputePrecision) {
  Case c;
  const Inputs in = attn_test::MakeInputs(c);
  const std::string want_bf16 = Bf16ComputeAvailable() ? "bfloat16" : "float32";
  for (const auto precision :
       {attention::v1::PRECISION_UNSPECIFIED, attention::v1::PRECISION_FLOAT32,
        attention::v1::PRECISION_BFLOAT16}) {
    for (const bool bf16_wire : {false, true}) {
      attention::v1::AttentionRequest req = Request(c, in, wire::Encoding::kData);
      if (bf16_wire) {
        for (auto* t : {req.mutable_query(), req.mutable_key(), req.mutable_value()}) {
          auto a = client::FromWire(*t, "t");
          ASSERT_TRUE(a.ok());
          *t = client::ToWire(*a, wire::Encoding::kData, wire::WireType::kBFloat16);
        }
      }
      req.mutable_options()->set_compute_precision(precision);
      grpc::ClientContext ctx;
      attention::v1::AttentionResponse resp;
      ASSERT_TRUE(client_->stub().Attention(&ctx, req, &resp).ok());
      const auto& md = ctx.GetServerInitialMetadata();
      const auto it = md.find("attn-compute-precision");
      ASSERT_NE(it, md.end());
      const bool may_bf16 = precision == attention::v1::PRECISION_BFLOAT16 ||
                            (precision == attention::v1::PRECISION_UNSPECIFIED && bf16_wire);
      EXPECT_EQ(std::string(it->second.data(), it->second.size()), may_bf16 ? want_bf16 : "float32")
          << "precision " << precision << " bf16 wire " << bf16_wire;
    }
  }
}

// PRECISION_BFLOAT16 end to end: Attention (float32 on the wire, so the
// answer shows the arithmetic) and MultiHeadAttention on a model (whose
// weights the server packed in bf16 at load). Where core computes bf16 (a
// bf16 matrix tier, or ctest's ATTN_BF16_EMULATION=1 run of this test), the
// answers say bfloat16, lie within the 3e-2 contract of float64 and differ
// from the float32 answers; elsewhere they say float32 and are exact.
TEST_F(VariantsRpc, Bf16ComputeAnswersWithinTheContract) {
  Case c;
  c.hq = 4, c.hkv = 2, c.lq = 200, c.lk = 300, c.d = 64, c.dv = 64;
  c.causal = true, c.bottom_right = true, c.alibi = true, c.sink = true;
  const Inputs in = attn_test::MakeInputs(c);
  const attn_test::Ref want = attn_test::Reference(c, in);
  const bool bf16 = Bf16ComputeAvailable();
  auto precision_of = [](const grpc::ClientContext& ctx) {
    const auto& md = ctx.GetServerInitialMetadata();
    const auto it = md.find("attn-compute-precision");
    return it == md.end() ? std::string("(none)")
                          : std::string(it->second.data(), it->second.size());
  };
  attention::v1::AttentionRequest req = Request(c, in, wire::Encoding::kData);
  req.mutable_options()->set_compute_precision(attention::v1::PRECISION_BFLOAT16);
  grpc::ClientContext ctx;
  attention::v1::AttentionResponse resp;
  ASSERT_TRUE(client_->stub().Attention(&ctx, req, &resp).ok());
  EXPECT_EQ(precision_of(ctx), bf16 ? "bfloat16" : "float32");
  auto out = client::FromWire(resp.output(), "output");
  ASSERT_TRUE(out.ok());
  double worst = 0;
  for (size_t i = 0; i < want.out.size(); ++i) {
    worst = std::max(worst, std::abs(out->values[i] - want.out[i]));
  }
  EXPECT_LT(worst, bf16 ? 3e-2 : 2e-5);
  if (bf16) {
    EXPECT_GT(worst, 2e-4) << "a bfloat16 answer as exact as float32's";
  }

  // OIP: the same call through ModelInfer with compute_precision "bf16";
  // its response parameter says what was used, and the output matches.
  {
    auto oip =
        inference::GRPCInferenceService::NewStub(client::Connect(attn_test::Target(*server_)));
    inference::ModelInferRequest ireq;
    ireq.set_model_name("scaled_dot_product_attention");
    auto add = [&](const char* name, const std::vector<float>& x, Shape shape) {
      auto* t = ireq.add_inputs();
      t->set_name(name), t->set_datatype("FP32");
      for (int64_t d : shape) t->add_shape(d);
      for (float f : x) t->mutable_contents()->add_fp32_contents(f);
    };
    add("query", in.q, {c.b, c.hq, c.lq, c.d});
    add("key", in.k, {c.b, c.hkv, c.lk, c.d});
    add("value", in.v, {c.b, c.hkv, c.lk, c.dv});
    add("alibi_slopes", in.alibi, {c.b, c.hq});
    add("sink_logits", in.sink, {c.hq});
    (*ireq.mutable_parameters())["causal"].set_bool_param(true);
    (*ireq.mutable_parameters())["causal_alignment"].set_string_param("bottom_right");
    (*ireq.mutable_parameters())["compute_precision"].set_string_param("bf16");
    grpc::ClientContext ictx;
    inference::ModelInferResponse iresp;
    const grpc::Status ist = oip->ModelInfer(&ictx, ireq, &iresp);
    ASSERT_TRUE(ist.ok()) << ist.error_message();
    EXPECT_EQ(iresp.parameters().at("compute_precision").string_param(), bf16 ? "bf16" : "fp32");
    ASSERT_GE(iresp.outputs_size(), 1);
    const auto& o = iresp.outputs(0);
    std::vector<float> got(o.contents().fp32_contents().begin(),
                           o.contents().fp32_contents().end());
    if (got.empty() && iresp.raw_output_contents_size() > 0) {
      got.resize(iresp.raw_output_contents(0).size() / 4);
      std::memcpy(got.data(), iresp.raw_output_contents(0).data(), got.size() * 4);
    }
    ASSERT_EQ(got.size(), want.out.size());
    double oip_worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      oip_worst = std::max(oip_worst, std::abs(got[i] - want.out[i]));
    }
    EXPECT_LT(oip_worst, bf16 ? 3e-2 : 2e-5);
  }

  std::mt19937 rng(5);
  const client::HostArray x = client::RandomArray({2, 96, 256}, rng);
  attention::v1::MultiHeadAttentionRequest mreq;
  mreq.set_model("demo-gqa");
  *mreq.mutable_query() = client::ToWire(x, wire::Encoding::kData);
  attention::v1::AttentionResponse f32_resp, bf16_resp;
  grpc::ClientContext f32_ctx, bf16_ctx;
  ASSERT_TRUE(client_->stub().MultiHeadAttention(&f32_ctx, mreq, &f32_resp).ok());
  mreq.mutable_options()->set_compute_precision(attention::v1::PRECISION_BFLOAT16);
  ASSERT_TRUE(client_->stub().MultiHeadAttention(&bf16_ctx, mreq, &bf16_resp).ok());
  EXPECT_EQ(precision_of(f32_ctx), "float32");
  EXPECT_EQ(precision_of(bf16_ctx), bf16 ? "bfloat16" : "float32");
  auto a = client::FromWire(f32_resp.output(), "output");
  auto b = client::FromWire(bf16_resp.output(), "output");
  ASSERT_TRUE(a.ok() && b.ok());
  double diff = 0;
  for (size_t i = 0; i < a->values.size(); ++i) {
    diff = std::max(diff, double{std::abs(a->values[i] - b->values[i])});
  }
  EXPECT_LT(diff, bf16 ? 3e-2 : 1e-12);
  if (bf16) {
    EXPECT_GT(diff, 1e-5);
  }
}

// BFLOAT16 on the wire stays bf16 where the call computes bf16: the
// prepared call views query, key and value in place (dtype bfloat16, not
// widened floats), and the answer is exactly that of the same values sent
// as FLOAT32 with PRECISION_BFLOAT16, rounded to the query's BFLOAT16. With
// weights wanted, or where bf16 compute is off, they are widened as before.
TEST_F(VariantsRpc, Bf16WireTensorsAreViewedInPlaceWhenComputedInBf16) {
  Case c;
  c.hq = 4, c.hkv = 2, c.lq = 70, c.lk = 90, c.d = 32, c.dv = 32, c.causal = true;
  Inputs in = attn_test::MakeInputs(c);
  for (auto* x : {&in.q, &in.k, &in.v}) {  // bf16-exact values
    std::vector<uint16_t> bits(x->size());
    FloatToHalf(HalfType::kBFloat16, x->data(), bits.data(), static_cast<int64_t>(x->size()));
    HalfToFloat(HalfType::kBFloat16, bits.data(), x->data(), static_cast<int64_t>(x->size()));
  }
  attention::v1::AttentionRequest f32 = Request(c, in, wire::Encoding::kData);
  f32.mutable_options()->set_compute_precision(attention::v1::PRECISION_BFLOAT16);
  attention::v1::AttentionRequest bf16 = Request(c, in, wire::Encoding::kData);
  for (auto* t : {bf16.mutable_query(), bf16.mutable_key(), bf16.mutable_value()}) {
    auto a = client::FromWire(*t, "t");
    ASSERT_TRUE(a.ok());
    *t = client::ToWire(*a, wire::Encoding::kData, wire::WireType::kBFloat16);
  }
  const bool on = Bf16ComputeAvailable();
  const server::ModelRegistry models = server::ModelRegistry::Demo();
  {
    server::PreparedCall call;
    ASSERT_TRUE(server::PrepareAttention(bf16, models, server::RequestLimits{}, &call).ok());
    ASSERT_GE(call.tensors.size(), 3u);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(call.tensors[i].view.dtype, on ? DataType::kBFloat16 : DataType::kFloat32) << i;
      EXPECT_TRUE(call.tensors[i].float_storage.empty() == on) << i;
    }
    attention::v1::AttentionRequest with_weights = bf16;
    with_weights.set_return_weights(true);
    server::PreparedCall widened;
    ASSERT_TRUE(
        server::PrepareAttention(with_weights, models, server::RequestLimits{}, &widened).ok());
    EXPECT_EQ(widened.tensors[0].view.dtype, DataType::kFloat32);
  }
  attention::v1::AttentionResponse a, b;
  grpc::ClientContext ca, cb;
  ASSERT_TRUE(client_->stub().Attention(&ca, f32, &a).ok());
  ASSERT_TRUE(client_->stub().Attention(&cb, bf16, &b).ok());
  auto want = client::FromWire(a.output(), "output");
  auto got = client::FromWire(b.output(), "output");
  ASSERT_TRUE(want.ok() && got.ok());
  ASSERT_EQ(b.output().dtype(), attention::v1::DATA_TYPE_BFLOAT16);
  ASSERT_EQ(got->values.size(), want->values.size());
  std::vector<uint16_t> rounded(want->values.size());
  FloatToHalf(HalfType::kBFloat16, want->values.data(), rounded.data(),
              static_cast<int64_t>(rounded.size()));
  for (size_t i = 0; i < rounded.size(); ++i) {
    float w = 0;
    HalfToFloat(HalfType::kBFloat16, &rounded[i], &w, 1);
    ASSERT_EQ(got->values[i], w) << i;
  }
}

// A packed batch (cu_seqlens) in both encodings: each sequence equals its
// own float64 reference, the lse [H, total_q]; a model with packed inputs,
// falling offsets and weights with packed inputs are refused by name.
TEST_F(VariantsRpc, PackedBatchEachSequenceMatchesItsReference) {
  Case shape;
  shape.hq = 4, shape.hkv = 2, shape.d = 16, shape.dv = 8;
  shape.causal = true, shape.bottom_right = true, shape.wl = 9, shape.alibi = true;
  const attn_test::Packed p = attn_test::Pack(shape, {{3, 5}, {0, 0}, {1, 1}, {40, 70}, {7, 2}});
  const int64_t tq = p.cu_q.back(), tk = p.cu_k.back();
  for (auto enc : {wire::Encoding::kData, wire::Encoding::kValues}) {
    attention::v1::AttentionRequest req;
    *req.mutable_query() = Wire(p.q, {tq, p.hq, p.d}, enc);
    *req.mutable_key() = Wire(p.k, {tk, p.hkv, p.d}, enc);
    *req.mutable_value() = Wire(p.v, {tk, p.hkv, p.dv}, enc);
    req.mutable_cu_seqlens_q()->Add(p.cu_q.begin(), p.cu_q.end());
    req.mutable_cu_seqlens_k()->Add(p.cu_k.begin(), p.cu_k.end());
    req.set_causal(true);
    auto* o = req.mutable_options();
    o->set_causal_alignment(attention::v1::CAUSAL_ALIGNMENT_BOTTOM_RIGHT);
    o->set_window_left(9);
    *o->mutable_alibi_slopes() = Wire(p.alibi, {static_cast<int64_t>(p.cases.size()), p.hq}, enc);
    o->set_return_lse(true);
    attention::v1::AttentionResponse resp;
    const grpc::Status st = client_->Attention(req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    auto out = client::FromWire(resp.output(), "output");
    auto lse = client::FromWire(resp.lse(), "lse");
    ASSERT_TRUE(out.ok() && lse.ok());
    ASSERT_EQ(out->shape, (Shape{tq, p.hq, p.dv}));
    ASSERT_EQ(lse->shape, (Shape{p.hq, tq}));
    for (size_t s = 0; s < p.cases.size(); ++s) {
      const Case& c = p.cases[s];
      const attn_test::Ref want = attn_test::Reference(c, p.inputs[s]);
      for (int64_t h = 0; h < c.hq; ++h) {
        for (int64_t i = 0; i < c.lq; ++i) {
          const int64_t row = p.cu_q[s] + i;
          for (int64_t e = 0; e < c.dv; ++e) {
            EXPECT_NEAR(out->values[(row * p.hq + h) * p.dv + e],
                        want.out[(h * c.lq + i) * c.dv + e], 2e-5)
                << "sequence " << s;
          }
          const double want_lse = want.lse[h * c.lq + i];
          if (std::isinf(want_lse)) {  // bottom-right: the first of 7 rows over 2 keys
            EXPECT_EQ(lse->values[h * tq + row], -std::numeric_limits<float>::infinity());
          } else {
            EXPECT_NEAR(lse->values[h * tq + row], want_lse, 2e-4);
          }
        }
      }
    }
    req.set_return_weights(true);
    EXPECT_EQ(client_->Attention(req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    req.set_return_weights(false);
    req.set_cu_seqlens_q(2, 0);
    const grpc::Status fall = client_->Attention(req, &resp);
    EXPECT_EQ(fall.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(fall.error_message().find("cu_seqlens_q: offsets must not fall"), std::string::npos)
        << fall.error_message();
    req.set_model("demo-mha-small");
    const grpc::Status model = client_->Attention(req, &resp);
    EXPECT_NE(model.error_message().find("packed batches are for Attention without weights"),
              std::string::npos)
        << model.error_message();
  }
}

TEST_F(VariantsRpc, BadOptionsAreInvalidArgumentNamingTheField) {
  Case c;
  const Inputs in = attn_test::MakeInputs(c);
  auto expect = [&](const attention::v1::AttentionRequest& req, const std::string& words) {
    attention::v1::AttentionResponse resp;
    const grpc::Status st = client_->Attention(req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << words;
    EXPECT_NE(st.error_message().find(words), std::string::npos) << st.error_message();
  };
  auto base = [&] { return Request(c, in, wire::Encoding::kData); };
  auto r = base();
  r.mutable_options()->set_causal_alignment(static_cast<attention::v1::CausalAlignment>(7));
  expect(r, "options.causal_alignment: expected CAUSAL_ALIGNMENT_TOP_LEFT (0)");
  r = base();
  r.mutable_options()->set_compute_precision(static_cast<attention::v1::Precision>(9));
  expect(r, "options.compute_precision: expected PRECISION_UNSPECIFIED (0)");
  r = base();
  r.mutable_options()->set_window_left(-2);
  expect(r, "window_left: must be >= 0 (unset: unbounded), got -2");
  r = base();
  r.mutable_options()->set_softcap(0.0f);
  expect(r, "softcap: must be > 0 and finite, got 0");
  r = base();
  *r.mutable_options()->mutable_alibi_slopes() = Wire({1, 2, 3}, {3});
  expect(r, "alibi_slopes: expected shape [4] or [1, 4], got [3]");
  r = base();
  *r.mutable_options()->mutable_sink_logits() =
      Wire({1, std::numeric_limits<float>::quiet_NaN(), 3, 4}, {4});
  expect(r, "sink_logits: values must be finite");
  r = base();
  *r.mutable_key() = Wire(std::vector<float>(3 * c.lk * c.d), {1, 3, c.lk, c.d});
  *r.mutable_value() = Wire(std::vector<float>(3 * c.lk * c.dv), {1, 3, c.lk, c.dv});
  expect(r, "key: dim 1 (kv heads) must divide query's heads (4), got 3");
  r = base();
  r.add_cu_seqlens_q(0);
  r.add_cu_seqlens_q(8);
  expect(r, "cu_seqlens_k: required with cu_seqlens_q");
  r.add_cu_seqlens_k(0);
  r.add_cu_seqlens_k(8);
  expect(r, "query: rank must be 3 [total_q, H, D] with cu_seqlens, got 4");
  attention::v1::MultiHeadAttentionRequest m;
  m.set_model("demo-mha-small");
  m.set_num_kv_heads(1);
  std::mt19937 rng(2);
  *m.mutable_query() = client::ToWire(client::RandomArray({1, 3, 64}, rng), wire::Encoding::kData);
  attention::v1::AttentionResponse resp;
  const grpc::Status st = client_->MultiHeadAttention(m, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("num_kv_heads: model 'demo-mha-small' has 4 kv heads, got 1"),
            std::string::npos)
      << st.error_message();
}

}  // namespace
}  // namespace attn
