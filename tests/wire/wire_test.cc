// attn_wire: the contract both ends share. A malformed tensor gets the same
// code and message from the server (decoding a request) and the client
// (decoding a response); the timing trailer, the status mapping, a
// session's storage types and formats and the secret files, each written
// once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "attention_client.h"
#include "attn/half.h"
#include "host_array.h"
#include "test_server.h"
#include "wire/cache_formats.h"
#include "wire/secret_files.h"
#include "wire/status_mapping.h"
#include "wire/tensor_codec.h"
#include "wire/timing_trailer.h"

namespace attn {
namespace {

attention::v1::Tensor Floats(Shape shape, int n) {
  attention::v1::Tensor t;
  t.mutable_shape()->Add(shape.begin(), shape.end());
  t.set_dtype(attention::v1::DATA_TYPE_FLOAT32);
  t.set_data(std::string(static_cast<size_t>(n) * 4, '\0'));
  return t;
}

// Malformed wire tensors, each a different fault of DecodeTensor.
std::vector<std::pair<std::string, attention::v1::Tensor>> MalformedTensors() {
  std::vector<std::pair<std::string, attention::v1::Tensor>> cases;
  cases.emplace_back("short data", Floats({5, 2}, 7));
  auto values = Floats({5, 2}, 0);
  values.clear_data();
  for (int i = 0; i < 3; ++i) values.add_values(1.0f);
  cases.emplace_back("too few values", values);
  auto both = Floats({1, 2}, 2);
  both.add_values(1), both.add_values(2);
  cases.emplace_back("data and values", both);
  auto dtype = Floats({1, 2}, 2);
  dtype.set_dtype(static_cast<attention::v1::DataType>(99));
  cases.emplace_back("unknown dtype", dtype);
  auto half = Floats({1, 2}, 2);
  half.set_dtype(attention::v1::DATA_TYPE_FLOAT16);
  cases.emplace_back("float16 with float32-sized data", half);
  auto half_values = Floats({1, 2}, 0);
  half_values.set_dtype(attention::v1::DATA_TYPE_BFLOAT16);
  half_values.clear_data();
  half_values.add_values(1), half_values.add_values(2);
  cases.emplace_back("bfloat16 as values", half_values);
  auto negative = Floats({2, 2}, 4);
  negative.set_shape(0, -2);
  cases.emplace_back("negative dim", negative);
  auto deep = Floats({1, 1, 1, 1, 1, 1, 1, 1, 1}, 1);
  cases.emplace_back("rank 9", deep);
  return cases;
}

TEST(TensorCodec, SameMalformedTensorSameCodeAndMessageOnBothEnds) {
  auto server = attn_test::StartTestServer();
  ASSERT_NE(server, nullptr);
  client::AttentionClient client(client::Connect(attn_test::Target(*server)));
  for (const auto& [name, tensor] : MalformedTensors()) {
    SCOPED_TRACE(name);
    attention::v1::AttentionRequest req;
    *req.mutable_query() = tensor;
    attention::v1::AttentionResponse resp;
    const grpc::Status on_server = client.Attention(req, &resp, std::chrono::seconds(10));
    const auto on_client = client::FromWire(tensor, "query");
    ASSERT_FALSE(on_server.ok());
    ASSERT_FALSE(on_client.ok());
    EXPECT_EQ(on_server.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(wire::FromGrpcStatus(on_server).ToString(), on_client.status().ToString());
  }
}

TEST(TensorCodec, EncodeDenseRoundTripsEveryTypeInBothEncodings) {
  // Exact in float16 and bfloat16 too.
  const std::vector<float> floats = {1.5f, -2, 0, 3.25f, 7, -0.5f};
  const std::vector<float> bools = {1, 0, 0, 1, 1, 0};
  using wire::WireType;
  for (auto enc : {wire::Encoding::kData, wire::Encoding::kValues}) {
    for (WireType type :
         {WireType::kFloat32, WireType::kFloat16, WireType::kBFloat16, WireType::kBool}) {
      const bool is_bool = type == WireType::kBool;
      const auto& src = is_bool ? bools : floats;
      attention::v1::Tensor t;
      wire::EncodeDense({2, 3}, src.data(), src.size(), type, enc, &t);
      EXPECT_EQ(t.dtype(), wire::NativeDataType(type));
      wire::DecodedTensor d;
      ASSERT_TRUE(
          wire::DecodeTensor(t, "x", is_bool ? DataType::kBool : DataType::kFloat32, 100, &d).ok());
      EXPECT_EQ(d.type, type);
      // Half types always travel as data, half the bytes of float32.
      const bool half = type == WireType::kFloat16 || type == WireType::kBFloat16;
      EXPECT_EQ(d.encoding, half ? wire::Encoding::kData : enc);
      if (half) {
        EXPECT_EQ(t.data().size(), 2 * src.size());
      }
      EXPECT_EQ(d.view.shape, (Shape{2, 3}));
      for (size_t i = 0; i < src.size(); ++i) {
        const float got = is_bool ? static_cast<float>(d.view.u8()[i] != 0) : d.view.f32()[i];
        EXPECT_EQ(got, src[i]) << i;
      }
    }
  }
}

// Expected kBFloat16 (a call that computes bf16): BFLOAT16 bytes are viewed
// in place, or copied as bf16 (never widened) when they are unaligned, as
// inside an HTTP body; any other dtype is refused, naming what it takes.
TEST(TensorCodec, Bf16KeptInPlaceWhenAsked) {
  const std::vector<float> floats = {1.5f, -2, 0, 3.25f, 7, -0.5f};
  attention::v1::Tensor t;
  wire::EncodeDense({2, 3}, floats.data(), floats.size(), wire::WireType::kBFloat16,
                    wire::Encoding::kData, &t);
  wire::DecodedTensor d;
  ASSERT_TRUE(wire::DecodeTensor(t, "query", DataType::kBFloat16, 100, &d).ok());
  EXPECT_EQ(d.view.dtype, DataType::kBFloat16);
  EXPECT_EQ(d.view.data, static_cast<const void*>(t.data().data()));
  EXPECT_TRUE(d.float_storage.empty() && d.half_storage.empty());
  std::vector<float> back(floats.size());
  HalfToFloat(HalfType::kBFloat16, d.view.bf16(), back.data(), static_cast<int64_t>(back.size()));
  EXPECT_EQ(back, floats);

  // Unaligned bytes: a bf16 copy.
  const std::string shifted = " " + t.data();
  wire::WireTensor w = wire::FromNative(t);
  w.raw = std::string_view(shifted).substr(1);
  wire::DecodedTensor u;
  ASSERT_TRUE(wire::DecodeTensor(w, "query", DataType::kBFloat16, 100, &u).ok());
  EXPECT_EQ(u.view.dtype, DataType::kBFloat16);
  EXPECT_EQ(u.half_storage.size(), floats.size());
  HalfToFloat(HalfType::kBFloat16, u.view.bf16(), back.data(), static_cast<int64_t>(back.size()));
  EXPECT_EQ(back, floats);

  wire::DecodedTensor f;
  const Status st = wire::DecodeTensor(Floats({2, 3}, 6), "query", DataType::kBFloat16, 100, &f);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("query: dtype must be BFLOAT16, got DATA_TYPE_FLOAT32"),
            std::string::npos)
      << st.message();
}

TEST(TensorCodec, OverTheElementLimitIsResourceExhausted) {
  attention::v1::Tensor t = Floats({1000, 1000}, 0);
  wire::DecodedTensor d;
  const Status st = wire::DecodeTensor(t, "query", DataType::kFloat32, 999, &d);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("query: 1000000 elements exceed the limit of 999"), std::string::npos)
      << st.message();
}

TEST(StatusMapping, EveryCodeAndMessageSurvivesBothWays) {
  for (int c = 0; c <= 16; ++c) {
    const Status core(static_cast<StatusCode>(c), c == 0 ? "" : "message " + std::to_string(c));
    const grpc::Status g = wire::ToGrpcStatus(core);
    EXPECT_EQ(static_cast<int>(g.error_code()), c);
    EXPECT_EQ(g.error_message(), core.message());
    EXPECT_EQ(wire::FromGrpcStatus(g).ToString(), core.ToString());
    EXPECT_STREQ(wire::GrpcCodeName(g.error_code()), StatusCodeName(core.code()));
  }
}

TEST(TimingTrailer, WrittenValueParsesBack) {
  double queue = 0, compute = 0;
  const std::string v =
      wire::TimingTrailerValue(std::chrono::microseconds(12), std::chrono::milliseconds(3));
  EXPECT_EQ(v, "queue=12,compute=3000");
  ASSERT_TRUE(wire::ParseTimingTrailer(v, &queue, &compute));
  EXPECT_EQ(queue, 12);
  EXPECT_EQ(compute, 3000);
}

TEST(TimingTrailer, ParsesTheTrailerAndRejectsMalformedValues) {
  using Trailing = std::multimap<grpc::string_ref, grpc::string_ref>;
  double queue = 0, compute = 0;
  EXPECT_TRUE(
      wire::ServerTiming(Trailing{{"attn-timing-us", "queue=12,compute=345"}}, &queue, &compute));
  EXPECT_EQ(queue, 12);
  EXPECT_EQ(compute, 345);
  for (const char* bad : {"queue=12", "compute=3,queue=4", "queue=1,compute=2x", "", "12,345"}) {
    EXPECT_FALSE(wire::ServerTiming(Trailing{{"attn-timing-us", bad}}, &queue, &compute)) << bad;
    EXPECT_EQ(queue, -1);
    EXPECT_EQ(compute, -1);
  }
  EXPECT_FALSE(wire::ServerTiming(Trailing{{"other", "queue=1,compute=2"}}, &queue, &compute));
}

class SecretFiles : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  // A directory of this test's own: ctest runs the tests of this fixture in
  // parallel processes, and a shared one let one test's TearDown remove the
  // other's files.
  void SetUp() override {
    std::string templ = ::testing::TempDir() + "/secret_files_XXXXXX";
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    for (const char* f : {"tokens", "empty", "cert.pem", "notpem"}) {
      std::remove((dir_ + "/" + f).c_str());
    }
    std::remove(dir_.c_str());
  }
  std::string dir_;
};

TEST_F(SecretFiles, TokensAreTrimmedAndCommentsSkipped) {
  auto t = wire::ReadTokenFile("--token-file", Write("tokens", "# ops\n\n  alpha \t\nbeta\r\n"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*t, (std::vector<std::string>{"alpha", "beta"}));
  const std::string empty = Write("empty", "\n# nothing\n");
  EXPECT_EQ(
      wire::ReadTokenFile("--auth-token-file", empty).status().ToString(),
      "INVALID_ARGUMENT: --auth-token-file " + empty + ": no token in it (one token per line)");
  EXPECT_EQ(wire::ReadTokenFile("--token-file", "/nonexistent/t").status().ToString(),
            "INVALID_ARGUMENT: --token-file /nonexistent/t: cannot open");
}

TEST_F(SecretFiles, PemFilesMustLookLikePem) {
  const std::string pem = Write("cert.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n");
  auto ok = wire::ReadPemFile("--tls-ca", pem);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, "-----BEGIN CERTIFICATE-----\nAAAA\n");
  const std::string notpem = Write("notpem", "hello");
  EXPECT_EQ(wire::ReadPemFile("--tls-ca", notpem).status().ToString(),
            "INVALID_ARGUMENT: --tls-ca " + notpem + ": not a PEM file");
}

// A session's storage: every wire value to core and back, the names the
// CLI and the reports print (and the flags parse back), and a value no
// version of session.proto defines refused with the field named.
TEST(CacheFormats, WireCoreAndNamesAgree) {
  namespace v1 = attention::v1;
  const std::vector<std::pair<v1::DataType, const char*>> types = {
      {v1::DATA_TYPE_FLOAT32, "float32"},
      {v1::DATA_TYPE_BFLOAT16, "bfloat16"},
      {v1::DATA_TYPE_FLOAT16, "float16"}};
  for (const auto& [t, name] : types) {
    auto core = wire::CacheTypeFromWire(t);
    ASSERT_TRUE(core.ok()) << name;
    EXPECT_EQ(wire::CacheTypeToWire(*core), t) << name;
    EXPECT_STREQ(wire::CacheDtypeName(t), name);
  }
  auto unspecified = wire::CacheTypeFromWire(v1::DATA_TYPE_UNSPECIFIED);
  ASSERT_TRUE(unspecified.ok());
  EXPECT_EQ(*unspecified, CacheType::kFloat32);
  EXPECT_EQ(wire::CacheTypeFromWire(v1::DATA_TYPE_BOOL).status().ToString(),
            "INVALID_ARGUMENT: cache_dtype: expected DATA_TYPE_FLOAT32 (or UNSPECIFIED), "
            "DATA_TYPE_BFLOAT16 or DATA_TYPE_FLOAT16, got DATA_TYPE_BOOL");

  const std::vector<std::pair<v1::CacheFormat, const char*>> formats = {
      {v1::CACHE_FORMAT_UNSPECIFIED, "unquantized"},
      {v1::CACHE_FORMAT_INT8, "int8"},
      {v1::CACHE_FORMAT_FP8_E4M3, "fp8_e4m3"},
      {v1::CACHE_FORMAT_INT4, "int4"}};
  for (const auto& [f, name] : formats) {
    auto core = wire::CacheFormatFromWire(f, "key_format");
    ASSERT_TRUE(core.ok()) << name;
    EXPECT_EQ(wire::CacheFormatToWire(*core), f) << name;
    EXPECT_STREQ(wire::CacheFormatName(f), name);
    v1::CacheFormat back = v1::CACHE_FORMAT_INT4;
    ASSERT_TRUE(wire::CacheFormatByName(name, &back)) << name;
    EXPECT_EQ(back, f);
  }
  EXPECT_EQ(*wire::CacheFormatFromWire(v1::CACHE_FORMAT_UNSPECIFIED, "x"),
            CacheFormat::kAsCacheType);
  v1::CacheFormat untouched = v1::CACHE_FORMAT_INT8;
  EXPECT_FALSE(wire::CacheFormatByName("int3", &untouched));
  EXPECT_EQ(untouched, v1::CACHE_FORMAT_INT8);
  EXPECT_EQ(wire::CacheFormatFromWire(9, "value_format").status().ToString(),
            "INVALID_ARGUMENT: value_format: expected CACHE_FORMAT_UNSPECIFIED, CACHE_FORMAT_INT8, "
            "CACHE_FORMAT_FP8_E4M3 or CACHE_FORMAT_INT4, got 9");
}

}  // namespace
}  // namespace attn
