// The client's one request builder: what each op's request carries.
#include "request_builder.h"

#include <gtest/gtest.h>

#include <random>

namespace attn {
namespace {

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

}  // namespace
}  // namespace attn
