// ParseWithoutTensorData: the same message as protobuf's parse, with each
// Tensor's `data` viewed where it lies in the input (not copied), and the
// forms it leaves to protobuf refused rather than parsed differently.
#include "wire/tensor_data.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attention/v1/attention.pb.h"
#include "wire/tensor_codec.h"

namespace attn::wire {
namespace {

using attention::v1::MultiHeadAttentionRequest;
using attention::v1::Tensor;

Tensor Make(std::initializer_list<int64_t> shape, const std::string& data) {
  Tensor t;
  for (int64_t d : shape) t.add_shape(d);
  t.set_dtype(attention::v1::DATA_TYPE_FLOAT32);
  t.set_data(data);
  return t;
}

bool Inside(std::string_view part, const std::string& whole) {
  return part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size();
}

// Every Tensor field of the request, top level and under projections.
MultiHeadAttentionRequest FullRequest() {
  MultiHeadAttentionRequest r;
  *r.mutable_query() = Make({1, 2, 4}, std::string(32, 'q'));
  *r.mutable_key() = Make({1, 3, 4}, std::string(48, 'k'));
  *r.mutable_value() = Make({1, 3, 4}, std::string(48, 'v'));
  r.set_num_heads(2);
  r.set_model("m");
  *r.mutable_projections()->mutable_q_weight() = Make({4, 4}, std::string(64, 'w'));
  *r.mutable_projections()->mutable_out_bias() = Make({4}, std::string(16, 'b'));
  r.set_causal(true);
  r.mutable_key_padding_mask()->add_shape(3);
  r.mutable_key_padding_mask()->set_dtype(attention::v1::DATA_TYPE_BOOL);
  r.mutable_key_padding_mask()->set_data(std::string("\1\0\1", 3));
  r.mutable_attn_bias()->add_shape(2);
  r.mutable_attn_bias()->add_values(0.5f);  // typed values: copied, as protobuf does
  r.mutable_attn_bias()->add_values(-1.0f);
  return r;
}

TEST(TensorData, SameMessageAsProtobufWithDataViewedInPlace) {
  const MultiHeadAttentionRequest sent = FullRequest();
  std::string bytes = sent.SerializeAsString();
  bytes += std::string("\xa0\x06\x07", 3);  // unknown field 100 = 7: kept, as protobuf keeps it
  MultiHeadAttentionRequest want;
  ASSERT_TRUE(want.ParseFromString(bytes));

  MultiHeadAttentionRequest got;
  TensorData data;
  ASSERT_TRUE(ParseWithoutTensorData(bytes, &got, &data));
  EXPECT_EQ(data.size(), 6u);  // query, key, value, q_weight, out_bias, key_padding_mask
  const Tensor* tensors[] = {&got.query(),
                             &got.key(),
                             &got.value(),
                             &got.projections().q_weight(),
                             &got.projections().out_bias(),
                             &got.key_padding_mask()};
  const Tensor* expected[] = {&want.query(),
                              &want.key(),
                              &want.value(),
                              &want.projections().q_weight(),
                              &want.projections().out_bias(),
                              &want.key_padding_mask()};
  for (int i = 0; i < 6; ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(tensors[i]->data().empty());  // not copied into the message
    const std::string_view* d = data.Find(tensors[i]);
    ASSERT_NE(d, nullptr);
    EXPECT_TRUE(Inside(*d, bytes));
    EXPECT_EQ(*d, expected[i]->data());
    // FromNative views the recorded bytes.
    const WireTensor w = FromNative(*tensors[i], &data);
    EXPECT_TRUE(w.has_raw);
    EXPECT_EQ(w.raw.data(), d->data());
    EXPECT_EQ(w.shape, Shape(expected[i]->shape().begin(), expected[i]->shape().end()));
  }
  EXPECT_EQ(data.Find(&got.attn_bias()), nullptr);
  EXPECT_EQ(FromNative(got.attn_bias(), &data).typed_count, 2);
  // Put back, the data make protobuf's message, unknown field included.
  for (int i = 0; i < 6; ++i)
    const_cast<Tensor*>(tensors[i])->set_data(std::string(*data.Find(tensors[i])));
  EXPECT_EQ(got.SerializeAsString(), want.SerializeAsString());
}

TEST(TensorData, FormsProtobufMergesAreLeftToProtobuf) {
  const std::string one = FullRequest().SerializeAsString();
  MultiHeadAttentionRequest msg;
  TensorData data;
  // A Tensor field sent twice (protobuf merges the two).
  MultiHeadAttentionRequest q;
  *q.mutable_query() = Make({1, 1, 4}, std::string(16, 'x'));
  EXPECT_FALSE(ParseWithoutTensorData(one + q.SerializeAsString(), &msg, &data));
  // A `data` field sent twice inside one Tensor (the last wins).
  Tensor t = Make({1, 1, 4}, std::string(16, 'a'));
  const std::string twice =
      t.SerializeAsString() + Make({}, std::string(16, 'b')).SerializeAsString();
  std::string req = std::string("\x0a", 1) + static_cast<char>(twice.size()) + twice;
  ASSERT_LT(twice.size(), 128u);
  MultiHeadAttentionRequest want;
  ASSERT_TRUE(want.ParseFromString(req));
  EXPECT_EQ(want.query().data(), std::string(16, 'b'));
  EXPECT_FALSE(ParseWithoutTensorData(req, &msg, &data));
}

TEST(TensorData, MalformedBytesAreRefusedLikeProtobuf) {
  const std::string good = FullRequest().SerializeAsString();
  MultiHeadAttentionRequest msg, want;
  TensorData data;
  for (size_t cut = 1; cut < good.size(); cut += 7) {  // truncations
    const std::string part = good.substr(0, cut);
    if (want.ParseFromString(part)) continue;  // a field boundary: still a message
    EXPECT_FALSE(ParseWithoutTensorData(part, &msg, &data)) << cut;
  }
  EXPECT_FALSE(ParseWithoutTensorData(
      std::string("\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11), &msg, &data));  // bad varint
  EXPECT_FALSE(ParseWithoutTensorData(std::string("\x0b", 1), &msg, &data));           // a group
  EXPECT_FALSE(ParseWithoutTensorData(std::string("\x00\x01", 2), &msg, &data));       // field 0
  EXPECT_TRUE(ParseWithoutTensorData(std::string(), &msg, &data));  // empty: valid
  EXPECT_EQ(data.size(), 0u);
}

// The varints this parse drops or rewrites (a Tensor-holding field's tag and
// length, a Tensor's `data` tag and length) take protobuf's limits: a tag in
// at most 5 bytes, a length in at most 5 bytes below 2^31. An overlong
// encoding past those limits (the fuzzer's 53-byte input had a 6-byte length
// on `projections`) is refused as protobuf refuses it; within them, the
// same message comes out.
std::string Varint(uint64_t v, int bytes) {  // v in exactly `bytes` bytes (padded)
  std::string out;
  for (int i = 0; i < bytes; ++i) {
    uint8_t b = static_cast<uint8_t>(v & 0x7f);
    v >>= 7;
    if (i + 1 < bytes) b |= 0x80;
    out.push_back(static_cast<char>(b));
  }
  return out;
}

TEST(TensorData, OverlongVarintsAreJudgedAsProtobufJudgesThem) {
  const std::string tensor = Make({1, 1, 4}, std::string(16, 'q')).SerializeAsString();
  ASSERT_LT(tensor.size(), 128u);
  const std::string data_payload(16, 'q');
  // A Tensor whose `data` tag or length is padded to `tb` / `lb` bytes.
  auto padded_tensor = [&](int tb, int lb) {
    Tensor head = Make({1, 1, 4}, "");
    return head.SerializeAsString() + Varint((3 << 3) | 2, tb) + Varint(16, lb) + data_payload;
  };
  struct Case {
    const char* what;
    std::string bytes;
  };
  std::vector<Case> cases;
  for (int n = 1; n <= 11; ++n) {
    // AttentionRequest.query (field 1): its tag, its length.
    cases.push_back({"query tag", Varint((1 << 3) | 2, n) + Varint(tensor.size(), 1) + tensor});
    cases.push_back({"query length", Varint((1 << 3) | 2, 1) + Varint(tensor.size(), n) + tensor});
    // projections (field 5), empty and holding a q_weight.
    cases.push_back({"projections length, empty", Varint((5 << 3) | 2, 1) + Varint(0, n)});
    const std::string qw = Varint((1 << 3) | 2, 1) + Varint(tensor.size(), 1) + tensor;
    cases.push_back({"projections tag", Varint((5 << 3) | 2, n) + Varint(qw.size(), 1) + qw});
    cases.push_back({"q_weight length", Varint((5 << 3) | 2, 1) +
                                            Varint(qw.size() + n - 1, 1) +
                                            Varint((1 << 3) | 2, 1) + Varint(tensor.size(), n) +
                                            tensor});
    // The query's `data` tag and length.
    for (const auto& [tb, lb] : {std::pair{n, 1}, std::pair{1, n}}) {
      const std::string t = padded_tensor(tb, lb);
      cases.push_back({"data tag/length", Varint((1 << 3) | 2, 1) + Varint(t.size(), 1) + t});
    }
  }
  // A length at the 5-byte limit whose fifth byte says 2^31 or more.
  cases.push_back({"2 GiB length", std::string("\x0a\xff\xff\xff\xff\x0f", 6) + tensor});
  // A tag whose fifth byte has bits past 32 (protobuf drops them).
  cases.push_back({"tag past 32 bits", std::string("\x8a\x80\x80\x80\x10", 5) +
                                           Varint(tensor.size(), 1) + tensor});
  int accepted = 0, refused = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.what) + ", " + std::to_string(c.bytes.size()) + " bytes");
    attention::v1::AttentionRequest want, got;
    TensorData data;
    const bool protobuf_parses = want.ParseFromString(c.bytes);
    if (!ParseWithoutTensorData(c.bytes, &got, &data)) {
      ++refused;  // refused here: the server parses with protobuf instead
      continue;
    }
    ++accepted;
    ASSERT_TRUE(protobuf_parses) << "taken here, refused by protobuf";
    std::vector<Tensor*> tensors;  // those present: mutable_* would add the others
    if (got.has_query()) tensors.push_back(got.mutable_query());
    if (got.has_projections() && got.projections().has_q_weight()) {
      tensors.push_back(got.mutable_projections()->mutable_q_weight());
    }
    for (Tensor* t : tensors) {
      if (const std::string_view* d = data.Find(t)) t->set_data(std::string(*d));
    }
    EXPECT_EQ(got.SerializeAsString(), want.SerializeAsString());
  }
  // Both sides of the limits were met: padded forms within them are parsed
  // in place; those past them refused.
  EXPECT_GT(accepted, 20);
  EXPECT_GT(refused, 20);
}

// OutputPrefix + the data + the other fields are the bytes protobuf writes
// for the whole answer, for empty-to-large data (varint lengths of 1-3
// bytes) and with or without weights after it.
TEST(TensorData, OutputPrefixFramesDataAsProtobufDoes) {
  for (const Shape& shape : {Shape{1}, Shape{2, 3}, Shape{1, 16, 64}, Shape{8, 512, 64}}) {
    for (bool with_weights : {false, true}) {
      SCOPED_TRACE(ShapeToString(shape) + (with_weights ? " + weights" : ""));
      std::string data(static_cast<size_t>(NumElements(shape)) * 4, '\0');
      for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
      attention::v1::AttentionResponse rest;
      if (with_weights) *rest.mutable_weights() = Make({2, 2}, std::string(16, 'w'));
      attention::v1::AttentionResponse whole = rest;
      *whole.mutable_output() = Make({}, data);
      whole.mutable_output()->mutable_shape()->Add(shape.begin(), shape.end());
      EXPECT_EQ(OutputPrefix(shape, data.size()) + data + rest.SerializeAsString(),
                whole.SerializeAsString());
    }
  }
}

}  // namespace
}  // namespace attn::wire
