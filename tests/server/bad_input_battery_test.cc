// Several hundred malformed requests against a live server: each a valid
// request of a random RPC and shape with one mutation whose answer is known.
// Every one must get exactly that code, and the server must stay healthy.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>

#include "attention_client.h"
#include "host_array.h"
#include "test_server.h"

namespace attn {
namespace {

using attention::v1::AttentionResponse;
using attention::v1::Tensor;
using grpc::StatusCode;

struct Mutation {
  const char* name;
  StatusCode expected;
  std::function<void(Tensor*, std::mt19937&)> apply;
};

std::vector<Mutation> Mutations() {
  return {
      {"negative dim", StatusCode::INVALID_ARGUMENT,
       [](Tensor* t, std::mt19937& r) {
         t->set_shape(r() % t->shape_size(), -1 - int64_t(r() % 9));
       }},
      {"overflowing dims", StatusCode::INVALID_ARGUMENT,
       [](Tensor* t, std::mt19937&) {
         t->set_shape(0, int64_t{1} << 40);
         t->set_shape(1, int64_t{1} << 40);
       }},
      {"over the element limit", StatusCode::RESOURCE_EXHAUSTED,
       [](Tensor* t, std::mt19937&) { t->set_shape(0, int64_t{1} << 28); }},
      {"truncated data", StatusCode::INVALID_ARGUMENT,
       [](Tensor* t, std::mt19937& r) {
         t->mutable_data()->resize(t->data().size() - 1 -
                                   r() % std::min<size_t>(t->data().size(), 8));
       }},
      {"extra bytes", StatusCode::INVALID_ARGUMENT,
       [](Tensor* t, std::mt19937& r) { t->mutable_data()->append(1 + r() % 7, '\0'); }},
      {"values and data", StatusCode::INVALID_ARGUMENT,
       [](Tensor* t, std::mt19937&) { t->add_values(1.0f); }},
      {"bool dtype for a float input", StatusCode::INVALID_ARGUMENT,
       [](Tensor* t, std::mt19937&) { t->set_dtype(attention::v1::DATA_TYPE_BOOL); }},
      {"bfloat16", StatusCode::INVALID_ARGUMENT,
       [](Tensor* t, std::mt19937&) { t->set_dtype(attention::v1::DATA_TYPE_BFLOAT16); }},
      {"unknown dtype", StatusCode::INVALID_ARGUMENT,
       [](Tensor* t, std::mt19937& r) {
         t->set_dtype(static_cast<attention::v1::DataType>(5 + r() % 50));
       }},
      {"rank 9", StatusCode::INVALID_ARGUMENT,
       [](Tensor* t, std::mt19937&) {
         while (t->shape_size() < 9) t->add_shape(1);
       }},
      {"NaN and Inf (IEEE: answered)", StatusCode::OK,
       [](Tensor* t, std::mt19937& r) {
         auto* f = reinterpret_cast<float*>(t->mutable_data()->data());
         const size_t n = t->data().size() / 4;
         f[r() % n] = std::nanf("");
         f[r() % n] = (r() & 1) ? INFINITY : -INFINITY;
       }},
  };
}

client::HostArray Random(Shape shape, std::mt19937& rng) {
  client::HostArray a;
  a.shape = std::move(shape);
  int64_t n = 1;
  for (int64_t d : a.shape) n *= d;
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) a.values.push_back(d(rng));
  return a;
}

TEST(BadInputBattery, EveryMalformedRequestGetsItsCodeAndTheServerStaysUp) {
  auto s = attn_test::StartTestServer();
  ASSERT_NE(s, nullptr);
  client::AttentionClient c(client::Connect(attn_test::Target(*s)));
  std::mt19937 rng(2026);
  const auto mutations = Mutations();
  std::map<std::string, int> seen;
  int sent = 0;
  for (int i = 0; i < 400; ++i) {
    const Mutation& m = mutations[rng() % mutations.size()];
    const int64_t b = 1 + rng() % 3, l = 1 + rng() % 12;
    grpc::Status st;
    AttentionResponse resp;
    switch (rng() % 4) {
      case 0: {  // SDPA, self-attention on [B, L, D]
        attention::v1::AttentionRequest req;
        *req.mutable_query() =
            client::ToWire(Random({b, l, 1 + int64_t(rng() % 8)}, rng), client::Encoding::kData);
        m.apply(req.mutable_query(), rng);
        req.set_causal(rng() & 1);
        st = c.Attention(req, &resp, std::chrono::seconds(10));
        break;
      }
      case 1: {  // MHA on the demo model, key/value mutated
        attention::v1::MultiHeadAttentionRequest req;
        *req.mutable_query() = client::ToWire(Random({b, l, 64}, rng), client::Encoding::kData);
        *req.mutable_key() = client::ToWire(Random({b, l + 1, 64}, rng), client::Encoding::kData);
        *req.mutable_value() = req.key();
        req.set_model("demo-mha-small");
        m.apply((rng() & 1) ? req.mutable_key() : req.mutable_value(), rng);
        st = c.MultiHeadAttention(req, &resp, std::chrono::seconds(10));
        break;
      }
      case 2: {  // cross-attention, the encoder mutated
        attention::v1::CrossAttentionRequest req;
        *req.mutable_decoder() = client::ToWire(Random({b, l, 64}, rng), client::Encoding::kData);
        *req.mutable_encoder() =
            client::ToWire(Random({b, l + 2, 64}, rng), client::Encoding::kData);
        req.set_model("demo-cross-attention");
        m.apply(req.mutable_encoder(), rng);
        st = c.CrossAttention(req, &resp, std::chrono::seconds(10));
        break;
      }
      default: {  // SDPA with an additive mask, the mask mutated
        attention::v1::AttentionRequest req;
        *req.mutable_query() = client::ToWire(Random({b, l, 4}, rng), client::Encoding::kData);
        *req.mutable_attn_bias() = client::ToWire(Random({b, l, l}, rng), client::Encoding::kData);
        m.apply(req.mutable_attn_bias(), rng);
        st = c.Attention(req, &resp, std::chrono::seconds(10));
        break;
      }
    }
    ++sent;
    ++seen[m.name];
    EXPECT_EQ(st.error_code(), m.expected)
        << "request " << i << " (" << m.name << "): " << st.error_message();
  }
  EXPECT_EQ(sent, 400);
  EXPECT_EQ(seen.size(), mutations.size()) << "every mutation was tried";
  // Wrong-shape masks and unknown models, which the loop above cannot make
  // by mutating one tensor.
  attention::v1::AttentionRequest wrong_mask;
  *wrong_mask.mutable_query() = client::ToWire(Random({2, 5, 4}, rng), client::Encoding::kData);
  client::HostArray kpm = Random({2, 6}, rng);
  kpm.is_bool = true;
  *wrong_mask.mutable_key_padding_mask() = client::ToWire(kpm, client::Encoding::kData);
  AttentionResponse resp;
  EXPECT_EQ(c.Attention(wrong_mask, &resp).error_code(), StatusCode::INVALID_ARGUMENT);
  attention::v1::MultiHeadAttentionRequest unknown;
  *unknown.mutable_query() = client::ToWire(Random({1, 3, 64}, rng), client::Encoding::kData);
  unknown.set_model("no-such-model");
  EXPECT_EQ(c.MultiHeadAttention(unknown, &resp).error_code(), StatusCode::NOT_FOUND);
  std::string health;
  ASSERT_TRUE(c.Health("", &health).ok());
  EXPECT_EQ(health, "SERVING");
}

}  // namespace
}  // namespace attn
