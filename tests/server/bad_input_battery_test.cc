// Several hundred malformed requests against a live server: each a valid
// request of a random RPC and shape with one mutation whose answer is known.
// Every one must get exactly that code, and the server must stay healthy.
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <functional>
#include <future>
#include <random>
#include <string>

#include "attention_client.h"
#include "host_array.h"
#include "inference/open_inference_grpc.grpc.pb.h"
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
      {"bfloat16 with float32's bytes", StatusCode::INVALID_ARGUMENT,
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

// The attention variants' fields (issue 23): a valid request (GQA, every
// option, sometimes a packed batch) with one mutation of an option or of
// the offsets; each must get INVALID_ARGUMENT naming its field.
struct OptionMutation {
  const char* name;
  const char* field;  // in the message
  bool packed;        // applies to the packed request
  std::function<void(attention::v1::AttentionRequest*, std::mt19937&)> apply;
};

TEST(BadInputBattery, EveryBadVariantOptionGetsInvalidArgumentNamingTheField) {
  auto s = attn_test::StartTestServer();
  ASSERT_NE(s, nullptr);
  client::AttentionClient c(client::Connect(attn_test::Target(*s)));
  std::mt19937 rng(23);
  const float nan = std::nanf(""), inf = INFINITY;
  auto wire = [&](Shape shape) {
    return client::ToWire(Random(std::move(shape), rng), client::Encoding::kData);
  };
  const std::vector<OptionMutation> mutations = {
      {"negative window", "window_left", false,
       [](auto* r, auto& g) { r->mutable_options()->set_window_left(-1 - int64_t(g() % 5)); }},
      {"negative right window", "window_right", true,
       [](auto* r, auto&) { r->mutable_options()->set_window_right(-3); }},
      {"softcap 0", "softcap", false, [](auto* r, auto&) { r->mutable_options()->set_softcap(0); }},
      {"softcap < 0", "softcap", true,
       [](auto* r, auto&) { r->mutable_options()->set_softcap(-2.5f); }},
      {"softcap NaN", "softcap", false,
       [nan](auto* r, auto&) { r->mutable_options()->set_softcap(nan); }},
      {"softcap Inf", "softcap", false,
       [inf](auto* r, auto&) { r->mutable_options()->set_softcap(inf); }},
      {"alibi shape", "alibi_slopes", false,
       [&](auto* r, auto&) { *r->mutable_options()->mutable_alibi_slopes() = wire({3}); }},
      {"alibi NaN", "alibi_slopes", true,
       [nan](auto* r, auto&) {
         client::HostArray a{{4}, {0.5f, nan, 0.1f, 0.2f}, false};
         *r->mutable_options()->mutable_alibi_slopes() = client::ToWire(a, client::Encoding::kData);
       }},
      {"sink shape", "sink_logits", false,
       [&](auto* r, auto&) {
         *r->mutable_options()->mutable_sink_logits() = wire({2, 4});
       }},
      {"sink Inf", "sink_logits", true,
       [inf](auto* r, auto&) {
         client::HostArray a{{4}, {0, inf, 0, 0}, false};
         *r->mutable_options()->mutable_sink_logits() = client::ToWire(a, client::Encoding::kData);
       }},
      {"kv heads not dividing", "kv heads", false,
       [&](auto* r, auto&) {
         *r->mutable_key() = wire({1, 3, 6, 8});
         *r->mutable_value() = wire({1, 3, 6, 8});
       }},
      {"unknown alignment", "options.causal_alignment", false,
       [](auto* r, auto& g) {
         r->mutable_options()->set_causal_alignment(
             static_cast<attention::v1::CausalAlignment>(2 + g() % 9));
       }},
      {"unknown precision", "options.compute_precision", true,
       [](auto* r, auto& g) {
         r->mutable_options()->set_compute_precision(
             static_cast<attention::v1::Precision>(3 + g() % 9));
       }},
      {"offsets not from 0", "cu_seqlens_q[0]", true,
       [](auto* r, auto&) { r->set_cu_seqlens_q(0, 1); }},
      {"offsets falling", "cu_seqlens_k: offsets must not fall", true,
       [](auto* r, auto&) { r->set_cu_seqlens_k(1, 9); }},
      {"offsets off the end", "cu_seqlens_q: the last offset", true,
       [](auto* r, auto&) { r->set_cu_seqlens_q(2, 99); }},
      {"one list alone", "cu_seqlens_k: required", true,
       [](auto* r, auto&) { r->clear_cu_seqlens_k(); }},
      {"differing counts", "cu_seqlens_k: expected 3 offsets", true,
       [](auto* r, auto&) { r->add_cu_seqlens_k(6); }},
      {"packed rank 4", "query: rank must be 3", true,
       [&](auto* r, auto&) {
         *r->mutable_query() = wire({1, 5, 4, 8});
       }},
      {"weights with packed", "return_weights", true,
       [](auto* r, auto&) { r->set_return_weights(true); }},
  };
  std::map<std::string, int> seen;
  for (int i = 0; i < 200; ++i) {
    const OptionMutation& m = mutations[rng() % mutations.size()];
    attention::v1::AttentionRequest req;
    if (m.packed) {  // two sequences: 2 + 3 queries over 4 + 2 keys
      *req.mutable_query() = wire({5, 4, 8});
      *req.mutable_key() = wire({6, 2, 8});
      *req.mutable_value() = wire({6, 2, 8});
      for (int64_t x : {0, 2, 5}) req.add_cu_seqlens_q(x);
      for (int64_t x : {0, 4, 6}) req.add_cu_seqlens_k(x);
    } else {
      *req.mutable_query() = wire({1, 4, 5, 8});
      *req.mutable_key() = wire({1, 2, 6, 8});
      *req.mutable_value() = wire({1, 2, 6, 8});
    }
    req.set_causal(rng() & 1);
    auto* o = req.mutable_options();
    o->set_causal_alignment(attention::v1::CAUSAL_ALIGNMENT_BOTTOM_RIGHT);
    o->set_window_left(3);
    o->set_softcap(10.0f);
    *o->mutable_sink_logits() = wire({4});
    o->set_return_lse(true);
    m.apply(&req, rng);
    AttentionResponse resp;
    const grpc::Status st = c.Attention(req, &resp, std::chrono::seconds(10));
    ++seen[m.name];
    EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT)
        << m.name << ": " << st.error_message();
    EXPECT_NE(st.error_message().find(m.field), std::string::npos)
        << m.name << ": " << st.error_message();
  }
  EXPECT_EQ(seen.size(), mutations.size()) << "every mutation was tried";
  std::string health;
  ASSERT_TRUE(c.Health("", &health).ok());
  EXPECT_EQ(health, "SERVING");
}

// The same for the Open Inference Protocol: a valid ModelInferRequest (SDPA
// or a model, raw or typed) with one mutation whose answer is known.
struct OipMutation {
  const char* name;
  StatusCode expected;
  std::function<void(inference::ModelInferRequest*, std::mt19937&)> apply;
};

std::vector<OipMutation> OipMutations() {
  using R = inference::ModelInferRequest;
  auto raw = [](R* r) { return r->raw_input_contents_size() > 0; };
  return {
      {"truncated raw", StatusCode::INVALID_ARGUMENT,
       [raw](R* r, std::mt19937& g) {
         if (!raw(r)) return r->mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
         std::string* b = r->mutable_raw_input_contents(0);
         b->resize(b->size() - 1 - g() % 3);
       }},
      {"negative dim", StatusCode::INVALID_ARGUMENT,
       [](R* r, std::mt19937& g) { r->mutable_inputs(0)->set_shape(0, -1 - int64_t(g() % 5)); }},
      {"overflowing dims", StatusCode::INVALID_ARGUMENT,
       [](R* r, std::mt19937&) {
         r->mutable_inputs(0)->set_shape(0, int64_t{1} << 40);
         r->mutable_inputs(0)->set_shape(1, int64_t{1} << 40);
       }},
      {"over the element limit", StatusCode::RESOURCE_EXHAUSTED,
       [](R* r, std::mt19937&) { r->mutable_inputs(0)->set_shape(0, int64_t{1} << 28); }},
      {"unknown datatype", StatusCode::INVALID_ARGUMENT,
       [](R* r, std::mt19937& g) {
         const char* names[] = {"INT8", "STRING", "fp32", "", "FP64", "UINT8"};
         r->mutable_inputs(0)->set_datatype(names[g() % 6]);
       }},
      {"FP16 with FP32's bytes", StatusCode::INVALID_ARGUMENT,
       [raw](R* r, std::mt19937&) {
         r->mutable_inputs(0)->set_datatype(raw(r) ? "FP16" : "BF16");
       }},
      {"one raw entry short", StatusCode::INVALID_ARGUMENT,
       [raw](R* r, std::mt19937&) {
         if (raw(r)) return r->mutable_raw_input_contents()->RemoveLast();
         r->add_raw_input_contents("abcd");  // typed and raw mixed
       }},
      {"unknown input", StatusCode::INVALID_ARGUMENT,
       [](R* r, std::mt19937& g) { r->mutable_inputs(g() % r->inputs_size())->set_name("qry"); }},
      {"unknown parameter", StatusCode::INVALID_ARGUMENT,
       [](R* r, std::mt19937&) { (*r->mutable_parameters())["temperature"].set_double_param(1); }},
      {"mistyped parameter", StatusCode::INVALID_ARGUMENT,
       [](R* r, std::mt19937&) { (*r->mutable_parameters())["causal"].set_int64_param(1); }},
      {"unknown output", StatusCode::INVALID_ARGUMENT,
       [](R* r, std::mt19937&) { r->add_outputs()->set_name("logits"); }},
      {"unknown model", StatusCode::NOT_FOUND,
       [](R* r, std::mt19937&) { r->set_model_name("no-such-model"); }},
      {"NaN and Inf (IEEE: answered)", StatusCode::OK,
       [raw](R* r, std::mt19937& g) {
         if (!raw(r)) return r->mutable_inputs(0)->mutable_contents()->set_fp32_contents(0, NAN);
         auto* f = reinterpret_cast<float*>(r->mutable_raw_input_contents(0)->data());
         f[g() % (r->raw_input_contents(0).size() / 4)] = (g() & 1) ? NAN : INFINITY;
       }},
  };
}

inference::ModelInferRequest ValidOip(std::mt19937& rng) {
  inference::ModelInferRequest r;
  const bool model = rng() & 1, raw = rng() % 3 != 0;
  const int64_t b = 1 + rng() % 3, l = 1 + rng() % 9, d = model ? 64 : 1 + rng() % 8;
  r.set_model_name(model ? "demo-mha-small" : "scaled_dot_product_attention");
  for (const char* name : {"query", "key", "value"}) {
    const client::HostArray a = Random({b, l + (name[0] == 'q' ? 0 : 2), d}, rng);
    auto* in = r.add_inputs();
    in->set_name(name);
    in->set_datatype("FP32");
    in->mutable_shape()->Add(a.shape.begin(), a.shape.end());
    if (raw) {
      r.add_raw_input_contents(
          std::string(reinterpret_cast<const char*>(a.values.data()), a.values.size() * 4));
    } else {
      in->mutable_contents()->mutable_fp32_contents()->Add(a.values.begin(), a.values.end());
    }
  }
  if (rng() & 1) (*r.mutable_parameters())["causal"].set_bool_param(true);
  return r;
}

TEST(BadInputBattery, EveryMalformedOipRequestAndHttpBodyGetsItsCodeAndTheServerStaysUp) {
  auto s = attn_test::StartTestServer([](server::ServerConfig& c) { c.http_port = 0; });
  ASSERT_NE(s, nullptr);
  auto oip = inference::GRPCInferenceService::NewStub(client::Connect(attn_test::Target(*s)));
  std::mt19937 rng(13);
  const auto mutations = OipMutations();
  std::map<std::string, int> seen;
  for (int i = 0; i < 300; ++i) {
    const OipMutation& m = mutations[rng() % mutations.size()];
    inference::ModelInferRequest req = ValidOip(rng);
    m.apply(&req, rng);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    inference::ModelInferResponse resp;
    const grpc::Status st = oip->ModelInfer(&ctx, req, &resp);
    ++seen[m.name];
    EXPECT_EQ(st.error_code(), m.expected)
        << "request " << i << " (" << m.name << "): " << st.error_message();
  }
  EXPECT_EQ(seen.size(), mutations.size()) << "every mutation was tried";

  // HTTP bodies: a valid JSON body cut short, or a binary body whose
  // header or sizes lie. Always a 4xx with a JSON error, never a crash.
  httplib::Client http("127.0.0.1", s->http_port());
  http.set_read_timeout(10, 0);
  const std::string json = R"({"inputs": [{"name": "query", "shape": [2, 3], "datatype": "FP32",)"
                           R"( "data": [1, 2, 3, 4, 5, 6]}], "parameters": {"causal": true}})";
  const std::string bin_header =
      R"({"inputs": [{"name": "query", "shape": [2, 2], "datatype": "FP32",)"
      R"( "parameters": {"binary_data_size": 16}}]})";
  std::map<int, int> statuses;
  for (int i = 0; i < 200; ++i) {
    std::string body;
    httplib::Headers headers;
    switch (rng() % 4) {
      case 0:  // JSON cut anywhere
        body = json.substr(0, rng() % json.size());
        break;
      case 1:  // a declared JSON length past the end, or a huge one
        body = bin_header + std::string(16, '\0');
        headers.emplace("Inference-Header-Content-Length",
                        std::to_string((rng() & 1) ? body.size() + 1 + rng() % 100
                                                   : uint64_t{1} << (40 + rng() % 20)));
        break;
      case 2:  // binary data of the wrong size
        body = bin_header + std::string(rng() % 32 == 16 ? 15 : rng() % 32, '\0');
        if (body.size() == bin_header.size() + 16) body.pop_back();
        headers.emplace("Inference-Header-Content-Length", std::to_string(bin_header.size()));
        break;
      default: {  // a wrong datatype or a wrong value count
        const char* types[] = {"INT32", "BYTES", "FP64", "bool"};
        body = (rng() & 1)
                   ? R"({"inputs": [{"name": "query", "shape": [2, 3], "datatype": ")" +
                         std::string(types[rng() % 4]) + R"(", "data": [1, 2, 3, 4, 5, 6]}]})"
                   : R"({"inputs": [{"name": "query", "shape": [2, 3], "datatype": "FP32",)"
                     R"( "data": [1, 2, 3]}]})";
      }
    }
    auto res = http.Post("/v2/models/scaled_dot_product_attention/infer", headers, body,
                         "application/json");
    ASSERT_TRUE(res) << "request " << i << ": no answer (" << httplib::to_string(res.error())
                     << ")";
    ++statuses[res->status];
    EXPECT_EQ(res->status, 400) << "request " << i << ": " << body.substr(0, 120) << " -> "
                                << res->body;
    EXPECT_EQ(res->body.rfind("{\"error\":", 0), 0u) << res->body;
  }
  auto live = http.Get("/v2/health/live");
  ASSERT_TRUE(live);
  EXPECT_EQ(live->status, 200);
}

// Bytes that are not a valid message at all (a client with a broken
// serializer): INVALID_ARGUMENT naming the message type, on every attention
// method of both protocols.
// (gRPC's typed callback layer answered UNIMPLEMENTED, with no message.)
TEST(BadInputBattery, UndecodableBytesGetInvalidArgumentNamingTheMessageType) {
  auto s = attn_test::StartTestServer();
  ASSERT_NE(s, nullptr);
  grpc::GenericStub stub(client::Connect(attn_test::Target(*s)));
  const std::vector<std::string> garbage = {
      std::string("\xff", 1),                      // field 31 with wire type 7 (invalid)
      std::string("\x08", 1),                      // a varint field cut short
      std::string("\x0a\x05\x0a", 3),              // a length past the end
      std::string("\x0a\xff\xff\xff\xff\x0f", 6),  // a 4 GiB length
      std::string("\x00\x01", 2),                  // field number 0
      std::string("\x0e\x01", 2),                  // wire type 6
      std::string("\x0f", 1),                      // wire type 7
      std::string("\x0b", 1),                      // a group start never ended
      std::string("\x0c", 1),                      // a group end never started
      std::string("\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", 11),  // an 11-byte varint
  };
  const std::vector<std::pair<std::string, std::string>> methods = {
      {"/attention.v1.AttentionService/Attention", "attention.v1.AttentionRequest"},
      {"/attention.v1.AttentionService/CrossAttention", "attention.v1.CrossAttentionRequest"},
      {"/attention.v1.AttentionService/MultiHeadAttention",
       "attention.v1.MultiHeadAttentionRequest"},
      {"/attention.v1.AttentionService/ListModels", "attention.v1.ListModelsRequest"},
      {"/inference.GRPCInferenceService/ModelInfer", "inference.ModelInferRequest"}};
  int checked = 0;
  for (const auto& [method, type] : methods) {
    for (const std::string& bytes : garbage) {
      SCOPED_TRACE(method + " " + std::to_string(checked));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      grpc::Slice slice(bytes);
      grpc::ByteBuffer request(&slice, 1), response;
      std::promise<grpc::Status> done;
      stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                     [&](grpc::Status st) { done.set_value(st); });
      const grpc::Status st = done.get_future().get();
      EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << st.error_message();
      EXPECT_EQ(st.error_message(), "request: " + std::to_string(bytes.size()) +
                                        " bytes that are not a valid " + type + " message");
      ++checked;
    }
  }
  EXPECT_EQ(checked, 50);
  client::AttentionClient c(client::Connect(attn_test::Target(*s)));
  std::string health;
  ASSERT_TRUE(c.Health("", &health).ok());
  EXPECT_EQ(health, "SERVING");
}

}  // namespace
}  // namespace attn
