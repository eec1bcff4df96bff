// The client's one request builder: what each op's request carries.
#include "request_builder.h"

#include <gtest/gtest.h>

#include <random>

#include "attention_client.h"
#include "test_server.h"

namespace attn {
namespace {

using client::AttentionVariants;
using client::BuildCall;
using client::CallSpec;
using client::HostArray;

TEST(RequestBuilder, KeyPaddingMaskTravelsAsBoolInBothEncodings) {
  for (auto enc : {client::Encoding::kData, client::Encoding::kValues}) {
    CallSpec spec;
    spec.op = "attention";
    spec.encoding = enc;
    spec.query = HostArray{{1, 3, 2}, {1, 0, 0, 1, 1, 1}, false};
    spec.key_padding_mask = HostArray{{1, 3}, {0, 0, 2.5f}, false};  // read as numbers
    auto call = BuildCall(spec);
    ASSERT_TRUE(call.ok()) << call.status().ToString();
    const auto& m = call->attention.key_padding_mask();
    EXPECT_EQ(m.dtype(), attention::v1::DATA_TYPE_BOOL);
    auto back = client::FromWire(m, "key_padding_mask");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_TRUE(back->is_bool);
    EXPECT_EQ(back->values, (std::vector<float>{0, 0, 1}));
    EXPECT_EQ(call->method(), "/attention.v1.AttentionService/Attention");
  }
}

TEST(RequestBuilder, EachOpGetsItsFieldsAndRefusesWhatItCannotCarry) {
  std::mt19937 rng(1);
  CallSpec spec;
  spec.op = "cross";
  client::FillRandomInputs({2, 4, 6, 8, 5, 5}, rng, &spec);
  auto cross = BuildCall(spec);
  ASSERT_TRUE(cross.ok());
  EXPECT_EQ(cross->cross.decoder().shape(1), 4);
  EXPECT_EQ(cross->cross.encoder().shape(2), 5);
  spec.op = "mha";
  spec.scale = 0.5f;
  EXPECT_EQ(
      BuildCall(spec).status().ToString(),
      "INVALID_ARGUMENT: --scale: not a MultiHeadAttention field (scale is 1/sqrt(head_dim))");
  CallSpec empty;
  empty.op = "attention";
  EXPECT_EQ(BuildCall(empty).status().ToString(),
            "INVALID_ARGUMENT: attention: --query (or --random) is required");
}

// --protocol oip: the same spec as an OIP ModelInfer request.
TEST(RequestBuilder, OipRequestsCarryInputsAndParametersByName) {
  std::mt19937 rng(3);
  CallSpec spec;
  spec.op = "cross";
  spec.oip = true;
  spec.model = "demo-cross-attention";
  spec.dtype = wire::WireType::kBFloat16;
  spec.causal = true;
  spec.scale = 0.25f;
  client::FillRandomInputs({1, 3, 5, 64, 64, 64}, rng, &spec);
  spec.key_padding_mask = HostArray{{1, 5}, {0, 0, 1, 0, 1}, false};
  auto call = BuildCall(spec);
  ASSERT_TRUE(call.ok()) << call.status().ToString();
  EXPECT_EQ(call->method(), "/inference.GRPCInferenceService/ModelInfer");
  const auto& r = call->infer;
  EXPECT_EQ(r.model_name(), "demo-cross-attention");
  ASSERT_EQ(r.inputs_size(), 4);
  EXPECT_EQ(r.inputs(0).name(), "query");
  EXPECT_EQ(r.inputs(1).name(), "key");
  EXPECT_EQ(r.inputs(2).name(), "value");  // the encoder again
  EXPECT_EQ(r.raw_input_contents(1), r.raw_input_contents(2));
  EXPECT_EQ(r.inputs(0).datatype(), "BF16");
  EXPECT_EQ(r.raw_input_contents(0).size(), 2u * 3 * 64);
  EXPECT_EQ(r.inputs(3).datatype(), "BOOL");
  EXPECT_EQ(r.raw_input_contents(3), std::string("\0\0\1\0\1", 5));
  EXPECT_TRUE(r.parameters().at("causal").bool_param());
  EXPECT_EQ(r.parameters().at("scale").double_param(), 0.25);

  CallSpec bad = spec;
  bad.model.clear();
  EXPECT_EQ(BuildCall(bad).status().message(),
            "--protocol oip: cross needs --model (OIP models carry their weights)");
  bad = spec;
  bad.encoding = client::Encoding::kValues;
  EXPECT_EQ(BuildCall(bad).status().message(),
            "--dtype bfloat16: half types travel as raw bytes only (--encoding raw)");
  bad = spec;
  bad.projections.push_back(HostArray{{1}, {1}, false});
  EXPECT_EQ(BuildCall(bad).status().message(),
            "--protocol oip: inline projection weights are attention.v1's only; use --model");
}

// The same inputs through attention.v1 and through OIP (raw and typed
// contents, float32 and a half type) give the same bits: one call path.
TEST(RequestBuilder, OipAndNativeAnswersAreBitIdentical) {
  auto server = attn_test::StartTestServer();
  ASSERT_NE(server, nullptr);
  client::AttentionClient c(client::Connect(attn_test::Target(*server)));
  std::mt19937 rng(9);
  for (auto dtype : {wire::WireType::kFloat32, wire::WireType::kFloat16}) {
    for (auto enc : {client::Encoding::kData, client::Encoding::kValues}) {
      if (enc == client::Encoding::kValues && dtype != wire::WireType::kFloat32) continue;
      CallSpec spec;
      spec.op = "mha";
      spec.model = "demo-mha-small";
      spec.dtype = dtype;
      spec.encoding = enc;
      spec.return_weights = true;
      client::FillRandomInputs({2, 5, 7, 64, 64, 64}, rng, &spec);
      attention::v1::AttentionResponse native, oip;
      auto call = BuildCall(spec);
      ASSERT_TRUE(call.ok());
      ASSERT_TRUE(c.Call(*call, &native).ok());
      spec.oip = true;
      call = BuildCall(spec);
      ASSERT_TRUE(call.ok());
      const grpc::Status st = c.Call(*call, &oip);
      ASSERT_TRUE(st.ok()) << st.error_message();
      for (auto [a, b] : {std::pair{&native.output(), &oip.output()},
                          std::pair{&native.weights(), &oip.weights()}}) {
        auto x = client::FromWire(*a, "native"), y = client::FromWire(*b, "oip");
        ASSERT_TRUE(x.ok() && y.ok());
        EXPECT_EQ(x->shape, y->shape);
        EXPECT_EQ(x->values, y->values);
        EXPECT_EQ(a->dtype(), b->dtype());
      }
    }
  }
}

// Every variant flag's value reaches the server the same way over
// attention.v1 and over OIP: the same bits out, the lse included, for SDPA
// with grouped-query shapes and for a model's MHA.
// The two protocols' answers to one call: the same output and lse, bit for bit.
void ExpectSameOutputAndLse(const attention::v1::AttentionResponse& native,
                            const attention::v1::AttentionResponse& oip) {
  for (auto [a, b] :
       {std::pair{&native.output(), &oip.output()}, std::pair{&native.lse(), &oip.lse()}}) {
    auto x = client::FromWire(*a, "native"), y = client::FromWire(*b, "oip");
    ASSERT_TRUE(x.ok() && y.ok()) << x.status().ToString() << y.status().ToString();
    EXPECT_EQ(x->shape, y->shape);
    EXPECT_EQ(x->values, y->values);
  }
}

TEST(RequestBuilder, VariantsTravelAlikeOverBothProtocols) {
  auto server = attn_test::StartTestServer();
  ASSERT_NE(server, nullptr);
  client::AttentionClient c(client::Connect(attn_test::Target(*server)));
  std::mt19937 rng(4);
  AttentionVariants v;
  v.bottom_right = true;
  v.window_left = 3;
  v.softcap = 6.0f;
  v.return_lse = true;
  v.compute_precision = "bfloat16";
  for (const std::string op : {"attention", "mha"}) {
    SCOPED_TRACE(op);
    CallSpec spec;
    spec.op = op;
    spec.causal = true;
    spec.variants = v;
    if (op == "attention") {
      spec.query = client::RandomArray({1, 4, 5, 8}, rng);
      spec.key = client::RandomArray({1, 2, 9, 8}, rng);  // GQA
      spec.value = client::RandomArray({1, 2, 9, 8}, rng);
      spec.variants.sink_logits = client::RandomArray({4}, rng);
      spec.variants.alibi_slopes = HostArray{{4}, {0.5f, 0.25f, 0.125f, 0.0625f}, false};
    } else {
      spec.model = "demo-mha-small";  // 4 heads
      client::FillRandomInputs({1, 5, 9, 64, 64, 64}, rng, &spec);
      spec.variants.sink_logits = client::RandomArray({4}, rng);
    }
    auto call = BuildCall(spec);
    ASSERT_TRUE(call.ok()) << call.status().ToString();
    const auto& o = op == "attention" ? call->attention.options() : call->mha.options();
    EXPECT_EQ(o.causal_alignment(), attention::v1::CAUSAL_ALIGNMENT_BOTTOM_RIGHT);
    EXPECT_EQ(o.window_left(), 3);
    EXPECT_FALSE(o.has_window_right());
    EXPECT_EQ(o.softcap(), 6.0f);
    EXPECT_TRUE(o.return_lse());
    EXPECT_EQ(o.compute_precision(), attention::v1::PRECISION_BFLOAT16);
    attention::v1::AttentionResponse native, oip;
    grpc::Status st = c.Call(*call, &native);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_TRUE(native.has_lse());
    spec.oip = true;
    call = BuildCall(spec);
    ASSERT_TRUE(call.ok()) << call.status().ToString();
    EXPECT_EQ(call->infer.parameters().at("causal_alignment").string_param(), "bottom_right");
    EXPECT_EQ(call->infer.parameters().at("compute_precision").string_param(), "bf16");
    st = c.Call(*call, &oip);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ExpectSameOutputAndLse(native, oip);
  }
}

// A packed batch travels as the request's cu_seqlens over attention.v1 and
// as INT64 inputs over OIP, in both encodings, with the same bits back; the
// other ops refuse the offsets before sending.
TEST(RequestBuilder, PackedBatchTravelsAlikeOverBothProtocols) {
  auto server = attn_test::StartTestServer();
  ASSERT_NE(server, nullptr);
  client::AttentionClient c(client::Connect(attn_test::Target(*server)));
  std::mt19937 rng(6);
  for (const client::Encoding enc : {client::Encoding::kData, client::Encoding::kValues}) {
    CallSpec spec;
    spec.op = "attention";
    spec.encoding = enc;
    spec.causal = true;
    spec.query = client::RandomArray({7, 4, 8}, rng);
    spec.key = client::RandomArray({10, 2, 8}, rng);
    spec.value = client::RandomArray({10, 2, 8}, rng);
    spec.variants.cu_seqlens_q = {0, 3, 3, 7};
    spec.variants.cu_seqlens_k = {0, 5, 6, 10};
    spec.variants.bottom_right = true;
    spec.variants.return_lse = true;
    auto call = BuildCall(spec);
    ASSERT_TRUE(call.ok()) << call.status().ToString();
    EXPECT_EQ(call->attention.cu_seqlens_k_size(), 4);
    attention::v1::AttentionResponse native, oip;
    grpc::Status st = c.Call(*call, &native);
    ASSERT_TRUE(st.ok()) << st.error_message();
    spec.oip = true;
    call = BuildCall(spec);
    ASSERT_TRUE(call.ok()) << call.status().ToString();
    st = c.Call(*call, &oip);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ExpectSameOutputAndLse(native, oip);
    auto lse = client::FromWire(native.lse(), "lse");
    ASSERT_TRUE(lse.ok());
    EXPECT_EQ(lse->shape, (Shape{4, 7}));
    spec.oip = false;
    spec.op = "mha";
    auto refused = BuildCall(spec);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("packed batches are the attention command's"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace attn
