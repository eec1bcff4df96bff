// attention-server end to end, in process: a real server on 127.0.0.1 (port
// 0), every test run over TCP and over the in-process channel.
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attention_client.h"
#include "attention_server.h"
#include "attn/attention.h"
#include "attn/model.h"
#include "attn/safetensors.h"
#include "float64_reference.h"
#include "host_array.h"
#include "reflection_list_services.pb.h"
#include "tensor_compare.h"
#include "test_server.h"
#include "wire/timing_trailer.h"

namespace attn {
namespace {

using attention::v1::AttentionRequest;
using attention::v1::AttentionResponse;
using attention::v1::CrossAttentionRequest;
using attention::v1::MultiHeadAttentionRequest;
using client::Encoding;
using client::HostArray;

const std::string kGoldenDir = ATTN_GOLDEN_DIR;

enum class Transport { kTcp, kInProcess };

// Servers shared by the whole suite: the demo models, and the golden models.
struct Servers {
  std::unique_ptr<server::AttentionServer> demo, golden;
};

Servers& SharedServers() {
  static Servers* s = [] {
    auto* servers = new Servers();
    servers->demo = attn_test::StartTestServer();
    servers->golden = attn_test::StartTestServer(
        [](server::ServerConfig& c) { c.model_dir = kGoldenDir + "/models"; });
    return servers;
  }();
  return *s;
}

std::shared_ptr<grpc::Channel> ChannelTo(server::AttentionServer& s, Transport t) {
  if (t == Transport::kInProcess) return s.InProcessChannel();
  return client::Connect("127.0.0.1:" + std::to_string(s.port()));
}

HostArray Array(Shape shape, std::vector<float> values) {
  HostArray a;
  a.shape = std::move(shape);
  a.values = std::move(values);
  return a;
}

HostArray RandomArray(Shape shape, unsigned seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return Array(std::move(shape), attn_test::RandomFloats(n, rng, stddev));
}

TensorView View(const HostArray& a) { return TensorView::Dense(a.values.data(), a.shape); }

HostArray Output(const AttentionResponse& r) { return *client::FromWire(r.output(), "output"); }
HostArray Weights(const AttentionResponse& r) { return *client::FromWire(r.weights(), "weights"); }

class ServerTest : public ::testing::TestWithParam<Transport> {
 protected:
  client::AttentionClient Demo() {
    return client::AttentionClient(ChannelTo(*SharedServers().demo, GetParam()));
  }
  client::AttentionClient Golden() {
    return client::AttentionClient(ChannelTo(*SharedServers().golden, GetParam()));
  }
};

INSTANTIATE_TEST_SUITE_P(Transports, ServerTest,
                         ::testing::Values(Transport::kTcp, Transport::kInProcess),
                         [](const auto& info) {
                           return info.param == Transport::kTcp ? "Tcp" : "InProcess";
                         });

// ---- The seed's worked example, with only the 5x2 query ----------------------

TEST_P(ServerTest, SeedWorkedExampleFromQueryAlone) {
  for (Encoding enc : {Encoding::kValues, Encoding::kData}) {
    AttentionRequest req;
    *req.mutable_query() = client::ToWire(Array({5, 2}, {1, 0, 0, 1, 1, 1, 1, 1, 0.5f, 1}), enc);
    req.set_return_weights(true);
    AttentionResponse resp;
    auto st = Demo().Attention(req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    // The response uses the request's encoding.
    EXPECT_EQ(resp.output().values_size() > 0, enc == Encoding::kValues);
    HostArray out = Output(resp), w = Weights(resp);
    EXPECT_EQ(out.shape, (Shape{5, 2}));
    attn_test::RefProblem p;
    p.lq = p.lk = 5, p.d = p.dv = 2, p.scale = 1 / std::sqrt(2.0);
    p.q = p.k = p.v = {1, 0, 0, 1, 1, 1, 1, 1, 0.5, 1};
    auto ref = attn_test::ReferenceAttention(p);
    EXPECT_TRUE(attn_test::AllClose(out.values.data(), ref.out, 1e-5, 0));
    EXPECT_TRUE(attn_test::AllClose(w.values.data(), ref.weights, 1e-5, 0));
    EXPECT_NEAR(out.values[0], 0.7988, 1e-4);
    EXPECT_NEAR(out.values[1], 0.7616, 1e-4);
  }
}

// ---- Every RPC and mask option against a direct core call ---------------------

TEST_P(ServerTest, AttentionWithKeyValueAndEveryMaskMatchesCore) {
  const HostArray q = RandomArray({2, 3, 6, 8}, 1), k = RandomArray({2, 3, 9, 8}, 2),
                  v = RandomArray({2, 3, 9, 5}, 3);
  HostArray kpm = Array({2, 9}, std::vector<float>(18, 0.0f));
  kpm.values[3] = kpm.values[9 + 8] = 1;
  kpm.is_bool = true;
  const HostArray bias = RandomArray({2, 3, 6, 9}, 4);
  for (int masks = 0; masks < 8; ++masks) {
    SCOPED_TRACE("masks " + std::to_string(masks));
    AttentionRequest req;
    *req.mutable_query() = client::ToWire(q, Encoding::kData);
    *req.mutable_key() = client::ToWire(k, Encoding::kData);
    *req.mutable_value() = client::ToWire(v, Encoding::kData);
    req.set_return_weights(true);
    req.set_scale(0.3f);
    ScaledDotProductAttentionOptions opt;
    opt.need_weights = true;
    opt.scale = 0.3f;
    std::vector<uint8_t> kpm_bytes(kpm.values.begin(), kpm.values.end());
    if (masks & 1) req.set_causal(true), opt.masks.causal = true;
    if (masks & 2) {
      *req.mutable_key_padding_mask() =
          client::ToWire(kpm, masks & 4 ? Encoding::kValues : Encoding::kData);
      opt.masks.key_padding_mask = TensorView::DenseBool(kpm_bytes.data(), {2, 9});
    }
    if (masks & 4) {
      *req.mutable_attn_bias() = client::ToWire(bias, Encoding::kData);
      opt.masks.attn_bias = View(bias);
    }
    AttentionResponse resp;
    auto st = Demo().Attention(req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    auto want = ScaledDotProductAttention(View(q), View(k), View(v), opt);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(Output(resp).values,
              std::vector<float>(want->output.data.begin(), want->output.data.end()));
    EXPECT_EQ(Weights(resp).values,
              std::vector<float>(want->weights->data.begin(), want->weights->data.end()));
    EXPECT_EQ(Weights(resp).shape, (Shape{2, 3, 6, 9}));
  }
}

TEST_P(ServerTest, AttentionWithInlineProjectionsIsTheSeedSelfAttention) {
  const int64_t e = 6;
  const HostArray x = RandomArray({2, 5, e}, 5), wq = RandomArray({e, e}, 6, 0.4f),
                  wk = RandomArray({e, e}, 7, 0.4f), wv = RandomArray({e, e}, 8, 0.4f),
                  bq = RandomArray({e}, 9), bk = RandomArray({e}, 10), bv = RandomArray({e}, 11);
  AttentionRequest req;
  *req.mutable_query() = client::ToWire(x, Encoding::kData);
  auto* p = req.mutable_projections();
  *p->mutable_q_weight() = client::ToWire(wq, Encoding::kData);
  *p->mutable_k_weight() = client::ToWire(wk, Encoding::kData);
  *p->mutable_v_weight() = client::ToWire(wv, Encoding::kData);
  *p->mutable_q_bias() = client::ToWire(bq, Encoding::kValues);
  *p->mutable_k_bias() = client::ToWire(bk, Encoding::kValues);
  *p->mutable_v_bias() = client::ToWire(bv, Encoding::kValues);
  AttentionResponse resp;
  auto st = Demo().Attention(req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  // Float64: Q = x Wq^T + bq, ..., softmax(Q K^T / sqrt(E)) V, no out projection.
  auto d = [](const HostArray& a) { return attn_test::ToDouble(a.values.data(), a.values.size()); };
  attn_test::RefProblem ref;
  ref.b = 2, ref.lq = ref.lk = 5, ref.d = ref.dv = e, ref.scale = 1 / std::sqrt(double(e));
  ref.q = attn_test::ReferenceLinear(d(x), 10, e, d(wq), e, d(bq));
  ref.k = attn_test::ReferenceLinear(d(x), 10, e, d(wk), e, d(bk));
  ref.v = attn_test::ReferenceLinear(d(x), 10, e, d(wv), e, d(bv));
  auto want = attn_test::ReferenceAttention(ref);
  EXPECT_EQ(Output(resp).shape, (Shape{2, 5, e}));
  EXPECT_TRUE(
      attn_test::AllClose(Output(resp).values.data(), want.out, 1e-5, attn_test::MaxAbs(want.out)));
}

TEST_P(ServerTest, DemoModelsServeEachRpcKind) {
  auto models = BuiltinDemoModels();
  const AttentionModel& cross = models[1];
  const AttentionModel& mha = models[3];  // demo-mha-small, E=64, 4 heads
  const HostArray dec = RandomArray({2, 4, 64}, 12), enc = RandomArray({2, 7, 64}, 13);
  {
    CrossAttentionRequest req;
    *req.mutable_decoder() = client::ToWire(dec, Encoding::kData);
    *req.mutable_encoder() = client::ToWire(enc, Encoding::kData);
    req.set_model("demo-cross-attention");
    req.set_return_weights(true);
    AttentionResponse resp;
    auto st = Demo().CrossAttention(req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    MultiHeadAttentionOptions opt;
    opt.need_weights = true;
    auto want = MultiHeadAttention(cross.projections(), View(dec), View(enc), View(enc), opt);
    EXPECT_EQ(Output(resp).values,
              std::vector<float>(want->output.data.begin(), want->output.data.end()));
    EXPECT_EQ(Weights(resp).shape, (Shape{2, 4, 7}));
  }
  {
    MultiHeadAttentionRequest req;
    *req.mutable_query() = client::ToWire(dec, Encoding::kData);
    req.set_model("demo-mha-small");
    req.set_causal(true);
    req.set_return_weights(true);
    req.set_per_head_weights(true);
    AttentionResponse resp;
    auto st = Demo().MultiHeadAttention(req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    MultiHeadAttentionOptions opt;
    opt.num_heads = 4;
    opt.masks.causal = true;
    opt.need_weights = true;
    opt.average_weights = false;
    auto want = MultiHeadAttention(mha.projections(), View(dec), View(dec), View(dec), opt);
    EXPECT_EQ(Output(resp).values,
              std::vector<float>(want->output.data.begin(), want->output.data.end()));
    EXPECT_EQ(Weights(resp).shape, (Shape{2, 4, 4, 4}));
  }
}

TEST_P(ServerTest, InlineMultiHeadProjectionsNeedNumHeads) {
  const int64_t e = 8;
  const HostArray x = RandomArray({1, 3, e}, 14), w = RandomArray({e, e}, 15, 0.3f);
  MultiHeadAttentionRequest req;
  *req.mutable_query() = client::ToWire(x, Encoding::kValues);
  for (auto* t : {req.mutable_projections()->mutable_q_weight(),
                  req.mutable_projections()->mutable_k_weight(),
                  req.mutable_projections()->mutable_v_weight(),
                  req.mutable_projections()->mutable_out_weight()}) {
    *t = client::ToWire(w, Encoding::kValues);
  }
  req.set_num_heads(2);
  AttentionResponse resp;
  ASSERT_TRUE(Demo().MultiHeadAttention(req, &resp).ok());
  ProjectionWeights pw;
  pw.q = pw.k = pw.v = {View(w), std::nullopt};
  pw.out = LinearView{View(w), std::nullopt};
  MultiHeadAttentionOptions opt;
  opt.num_heads = 2;
  auto want = MultiHeadAttention(pw, View(x), View(x), View(x), opt);
  EXPECT_EQ(Output(resp).values,
            std::vector<float>(want->output.data.begin(), want->output.data.end()));
  EXPECT_GT(resp.output().values_size(), 0) << "values in, values out";
}

// ---- Models from --model-dir: PyTorch 1.13 parity through the server -----------

TEST_P(ServerTest, ModelDirModelsMatchPyTorchGoldens) {
  const std::vector<std::string> cases = {
      "mha_self_avg_weights", "mha_self_per_head_kpm_bias2d",  "mha_cross_kdim_vdim_bias4d",
      "mha_no_bias_causal",   "mha_unbatched_cross_kpm",       "seed_self_attention",
      "seed_cross_attention", "seed_multi_head_self_attention"};
  for (const auto& name : cases) {
    SCOPED_TRACE(name);
    auto file = ReadSafetensorsFile(kGoldenDir + "/cases/" + name + ".safetensors");
    ASSERT_TRUE(file.ok());
    auto& t = file->tensors;
    auto arr = [&](const std::string& k) {
      return Array(t.at(k).shape, std::vector<float>(t.at(k).data.begin(), t.at(k).data.end()));
    };
    const bool weights = file->metadata["need_weights"] == "1";
    AttentionResponse resp;
    grpc::Status st;
    HostArray kpm;
    if (t.count("key_padding_mask")) kpm = arr("key_padding_mask"), kpm.is_bool = true;
    if (name == "seed_self_attention") {
      AttentionRequest req;
      *req.mutable_query() = client::ToWire(arr("query"), Encoding::kData);
      req.set_model(name);
      st = Golden().Attention(req, &resp);
    } else if (name == "seed_cross_attention") {
      CrossAttentionRequest req;
      *req.mutable_decoder() = client::ToWire(arr("query"), Encoding::kData);
      *req.mutable_encoder() = client::ToWire(arr("key"), Encoding::kData);
      req.set_model(name);
      st = Golden().CrossAttention(req, &resp);
    } else {
      MultiHeadAttentionRequest req;
      *req.mutable_query() = client::ToWire(arr("query"), Encoding::kData);
      if (t.count("key")) {
        *req.mutable_key() = client::ToWire(arr("key"), Encoding::kData);
        *req.mutable_value() = client::ToWire(arr("value"), Encoding::kData);
      }
      req.set_model(name);
      req.set_causal(file->metadata["causal"] == "1");
      req.set_return_weights(weights);
      req.set_per_head_weights(file->metadata["average_weights"] == "0");
      if (t.count("key_padding_mask"))
        *req.mutable_key_padding_mask() = client::ToWire(kpm, Encoding::kData);
      if (t.count("attn_bias"))
        *req.mutable_attn_bias() = client::ToWire(arr("attn_bias"), Encoding::kData);
      st = Golden().MultiHeadAttention(req, &resp);
    }
    ASSERT_TRUE(st.ok()) << st.error_message();
    const Tensor& want = t.at("expected_output");
    std::vector<double> w(want.data.begin(), want.data.end());
    EXPECT_EQ(Output(resp).shape, want.shape);
    EXPECT_TRUE(attn_test::AllClose(Output(resp).values.data(), w, 1e-5, attn_test::MaxAbs(w)));
    if (weights) {
      const Tensor& ww = t.at("expected_weights");
      std::vector<double> wd(ww.data.begin(), ww.data.end());
      EXPECT_TRUE(attn_test::AllClose(Weights(resp).values.data(), wd, 1e-5, 1e-6));
    }
  }
}

TEST_P(ServerTest, ListModelsDescribesEachModel) {
  attention::v1::ListModelsResponse resp;
  ASSERT_TRUE(Demo().ListModels(&resp).ok());
  std::map<std::string, attention::v1::ModelInfo> by_name;
  for (const auto& m : resp.models()) by_name[m.name()] = m;
  ASSERT_EQ(by_name.size(), 5u);
  EXPECT_EQ(by_name["demo-gqa"].num_heads(), 8);
  EXPECT_EQ(by_name["demo-gqa"].num_kv_heads(), 2);
  EXPECT_EQ(by_name["demo-mha"].num_kv_heads(), 8);
  EXPECT_EQ(by_name["demo-mha"].kind(), "multi_head_attention");
  EXPECT_EQ(by_name["demo-mha"].embed_dim(), 512);
  EXPECT_EQ(by_name["demo-mha"].num_heads(), 8);
  EXPECT_EQ(by_name["demo-attention"].kind(), "attention");
  EXPECT_EQ(by_name["demo-cross-attention"].kind(), "cross_attention");

  ASSERT_TRUE(Golden().ListModels(&resp).ok());
  for (const auto& m : resp.models()) by_name[m.name()] = m;
  EXPECT_EQ(by_name["mha_cross_kdim_vdim_bias4d"].kdim(), 12);
  EXPECT_EQ(by_name["mha_cross_kdim_vdim_bias4d"].vdim(), 20);
  EXPECT_EQ(by_name["mha_cross_kdim_vdim_bias4d"].num_heads(), 2);
}

TEST_P(ServerTest, TrailingMetadataSplitsQueueAndComputeTime) {
  auto stub =
      attention::v1::AttentionService::NewStub(ChannelTo(*SharedServers().demo, GetParam()));
  MultiHeadAttentionRequest req;
  *req.mutable_query() = client::ToWire(RandomArray({2, 64, 512}, 21), Encoding::kData);
  req.set_model("demo-mha");
  grpc::ClientContext ctx;
  AttentionResponse resp;
  ASSERT_TRUE(stub->MultiHeadAttention(&ctx, req, &resp).ok());
  const auto& md = ctx.GetServerTrailingMetadata();
  ASSERT_EQ(md.count("attn-timing-us"), 1u);
  double queue_us = -1, compute_us = -1;
  ASSERT_TRUE(wire::ServerTiming(md, &queue_us, &compute_us)) << std::string(
      md.find("attn-timing-us")->second.data(), md.find("attn-timing-us")->second.size());
  EXPECT_GE(queue_us, 0);
  EXPECT_GT(compute_us, 0) << "2x64x512 through demo-mha takes time";
}

TEST_P(ServerTest, HealthIsServing) {
  std::string status;
  ASSERT_TRUE(Demo().Health("", &status).ok());
  EXPECT_EQ(status, "SERVING");
  ASSERT_TRUE(Demo().Health("attention.v1.AttentionService", &status).ok());
  EXPECT_EQ(status, "SERVING");
  ASSERT_TRUE(Demo().Health("attention.v1.SessionService", &status).ok());
  EXPECT_EQ(status, "SERVING");
  auto st = Demo().Health("no.such.Service", &status);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
}

// A blocking bidi-streaming call through GenericStub (async API, one tag at a
// time): the reflection protocol without its generated stubs.
class RawBidiCall {
 public:
  RawBidiCall(std::shared_ptr<grpc::Channel> channel, const std::string& method)
      : stub_(std::move(channel)) {
    call_ = stub_.PrepareCall(&ctx_, method, &cq_);
    call_->StartCall(Tag(1));
    ok_ = Wait(1);
  }
  bool Write(const google::protobuf::Message& m) {
    grpc::Slice slice(m.SerializeAsString());
    grpc::ByteBuffer buf(&slice, 1);
    call_->Write(buf, Tag(2));
    return ok_ && Wait(2);
  }
  bool Read(google::protobuf::Message* m) {
    grpc::ByteBuffer buf;
    call_->Read(&buf, Tag(3));
    if (!ok_ || !Wait(3)) return false;
    std::vector<grpc::Slice> slices;
    if (!buf.Dump(&slices).ok()) return false;
    std::string bytes;
    for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    return m->ParseFromString(bytes);
  }
  grpc::Status Finish() {
    call_->WritesDone(Tag(4));
    Wait(4);
    grpc::Status st;
    call_->Finish(&st, Tag(5));
    Wait(5);
    return st;
  }

 private:
  static void* Tag(intptr_t i) { return reinterpret_cast<void*>(i); }
  bool Wait(intptr_t want) {
    void* tag = nullptr;
    bool ok = false;
    const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(10);
    if (cq_.AsyncNext(&tag, &ok, deadline) != grpc::CompletionQueue::GOT_EVENT) return false;
    return ok && tag == Tag(want);
  }

  grpc::GenericStub stub_;
  grpc::ClientContext ctx_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  bool ok_ = false;
};

TEST_P(ServerTest, ReflectionListsTheServices) {
  RawBidiCall call(ChannelTo(*SharedServers().demo, GetParam()),
                   "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo");
  attn_test::reflection::ServerReflectionRequest req;
  req.set_list_services("");
  ASSERT_TRUE(call.Write(req));
  attn_test::reflection::ServerReflectionResponse resp;
  ASSERT_TRUE(call.Read(&resp));
  std::vector<std::string> names;
  for (const auto& s : resp.list_services_response().service()) names.push_back(s.name());
  for (const char* want : {"attention.v1.AttentionService", "attention.v1.SessionService",
                           "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  // And the API's descriptor, which is what grpcurl needs to build requests.
  req.set_file_containing_symbol("attention.v1.AttentionService");
  ASSERT_TRUE(call.Write(req));
  ASSERT_TRUE(call.Read(&resp));
  EXPECT_GT(resp.file_descriptor_response().file_descriptor_proto_size(), 0);
  EXPECT_TRUE(call.Finish().ok());
}

// ---- The bad-input matrix: exact code and a message naming the field -----------

struct BadCase {
  std::string name;
  std::function<grpc::Status(client::AttentionClient&)> call;
  grpc::StatusCode code;
  std::string message;
};

AttentionRequest SeedQuery() {
  AttentionRequest req;
  *req.mutable_query() =
      client::ToWire(Array({5, 2}, {1, 0, 0, 1, 1, 1, 1, 1, 0.5f, 1}), Encoding::kData);
  return req;
}

grpc::Status Call(client::AttentionClient& c, const AttentionRequest& req) {
  AttentionResponse resp;
  return c.Attention(req, &resp);
}
grpc::Status Call(client::AttentionClient& c, const MultiHeadAttentionRequest& req) {
  AttentionResponse resp;
  return c.MultiHeadAttention(req, &resp);
}
grpc::Status Call(client::AttentionClient& c, const CrossAttentionRequest& req) {
  AttentionResponse resp;
  return c.CrossAttention(req, &resp);
}

template <typename Edit>
std::function<grpc::Status(client::AttentionClient&)> Attn(Edit edit) {
  return [edit](client::AttentionClient& c) {
    AttentionRequest req = SeedQuery();
    edit(req);
    return Call(c, req);
  };
}

template <typename Edit>
std::function<grpc::Status(client::AttentionClient&)> Mha(Edit edit) {
  return [edit](client::AttentionClient& c) {
    MultiHeadAttentionRequest req;
    *req.mutable_query() = client::ToWire(RandomArray({1, 3, 64}, 1), Encoding::kData);
    req.set_model("demo-mha-small");
    edit(req);
    return Call(c, req);
  };
}

std::vector<BadCase> BadCases() {
  using grpc::StatusCode;
  const auto kInvalid = StatusCode::INVALID_ARGUMENT;
  const int64_t huge = int64_t{1} << 40;
  return {
      {"missing query", [](client::AttentionClient& c) { return Call(c, AttentionRequest()); },
       kInvalid, "query: required"},
      {"rank 1", Attn([](AttentionRequest& r) {
         *r.mutable_query() = client::ToWire(Array({4}, {1, 2, 3, 4}), Encoding::kData);
       }),
       kInvalid, "query: rank must be 2 to 4, got 1"},
      {"byte length",
       Attn([](AttentionRequest& r) { r.mutable_query()->mutable_data()->resize(12); }), kInvalid,
       "query: data has 12 bytes, expected 40 (shape [5, 2] x 4 bytes DATA_TYPE_FLOAT32)"},
      {"values count", Attn([](AttentionRequest& r) {
         *r.mutable_query() = client::ToWire(Array({5, 2}, {1, 2, 3}), Encoding::kValues);
       }),
       kInvalid, "query: shape [5, 2] needs 10 values, got 3"},
      {"no data", Attn([](AttentionRequest& r) { r.mutable_query()->clear_data(); }), kInvalid,
       "query: shape [5, 2] needs 10 values, got 0 (and no data)"},
      {"both data and values", Attn([](AttentionRequest& r) { r.mutable_query()->add_values(1); }),
       kInvalid, "query: set exactly one of data or values, got both"},
      {"negative dim", Attn([](AttentionRequest& r) { r.mutable_query()->set_shape(0, -5); }),
       kInvalid, "query: dims must be non-negative, got [-5, 2]"},
      {"overflowing shape", Attn([huge](AttentionRequest& r) {
         r.mutable_query()->clear_shape();
         r.mutable_query()->add_shape(huge);
         r.mutable_query()->add_shape(huge);
       }),
       kInvalid, "query: element count of [1099511627776, 1099511627776] overflows int64"},
      {"huge valid shape",
       Attn([](AttentionRequest& r) { r.mutable_query()->set_shape(0, int64_t{1} << 30); }),
       StatusCode::RESOURCE_EXHAUSTED, "query: 2147483648 elements exceed the limit of 67108864"},
      {"bfloat16 with float32 bytes", Attn([](AttentionRequest& r) {
         r.mutable_query()->set_dtype(attention::v1::DATA_TYPE_BFLOAT16);
       }),
       kInvalid,
       "query: data has 40 bytes, expected 20 (shape [5, 2] x 2 bytes DATA_TYPE_BFLOAT16)"},
      {"float16 as values", Attn([](AttentionRequest& r) {
         *r.mutable_query() = client::ToWire(RandomArray({5, 2}, 1), Encoding::kValues);
         r.mutable_query()->set_dtype(attention::v1::DATA_TYPE_FLOAT16);
       }),
       kInvalid, "query: DATA_TYPE_FLOAT16 travels as data bytes only, got values"},
      {"unknown dtype", Attn([](AttentionRequest& r) {
         r.mutable_query()->set_dtype(static_cast<attention::v1::DataType>(99));
       }),
       kInvalid,
       "query: dtype must be DATA_TYPE_FLOAT32, DATA_TYPE_FLOAT16 or DATA_TYPE_BFLOAT16, got "
       "unknown data type 99"},
      {"key without value", Attn([](AttentionRequest& r) { *r.mutable_key() = r.query(); }),
       kInvalid,
       "key and value: set both or neither (query alone is self-attention), got only key"},
      {"shapes disagree", Attn([](AttentionRequest& r) {
         *r.mutable_key() = client::ToWire(RandomArray({5, 3}, 1), Encoding::kData);
         *r.mutable_value() = r.key();
       }),
       kInvalid, "key: last dim must equal query's (2), got 3"},
      {"mask does not broadcast", Attn([](AttentionRequest& r) {
         *r.mutable_attn_bias() = client::ToWire(RandomArray({4, 5}, 1), Encoding::kData);
       }),
       kInvalid, "attn_bias: expected a shape that broadcasts to [1, 1, 5, 5]"},
      {"padding mask shape", Attn([](AttentionRequest& r) {
         HostArray m = Array({1, 4}, {0, 0, 0, 1});
         m.is_bool = true;
         *r.mutable_key_padding_mask() = client::ToWire(m, Encoding::kData);
       }),
       kInvalid, "key_padding_mask: expected shape [5] or [1, 5], got [1, 4]"},
      {"padding mask dtype", Attn([](AttentionRequest& r) {
         *r.mutable_key_padding_mask() =
             client::ToWire(Array({5}, {0, 0, 0, 1, 0}), Encoding::kData);
       }),
       kInvalid, "key_padding_mask: dtype must be DATA_TYPE_BOOL, got DATA_TYPE_FLOAT32"},
      {"NaN scale", Attn([](AttentionRequest& r) { r.set_scale(std::nanf("")); }), kInvalid,
       "scale: must be finite"},
      {"model and projections", Attn([](AttentionRequest& r) {
         r.set_model("demo-attention");
         *r.mutable_projections()->mutable_q_weight() = r.query();
       }),
       kInvalid, "model and projections: set one, not both"},
      {"unknown model", Attn([](AttentionRequest& r) { r.set_model("nope"); }),
       StatusCode::NOT_FOUND,
       "model: no model named 'nope' (available: demo-attention, demo-cross-attention, demo-gqa, "
       "demo-mha, "
       "demo-mha-small)"},
      {"multi-head model in Attention", Attn([](AttentionRequest& r) { r.set_model("demo-mha"); }),
       kInvalid,
       "model: 'demo-mha' has 8 heads; Attention applies single-head weights, use "
       "MultiHeadAttention"},
      {"projections without v", Attn([](AttentionRequest& r) {
         auto* p = r.mutable_projections();
         *p->mutable_q_weight() = client::ToWire(RandomArray({2, 2}, 1), Encoding::kData);
         *p->mutable_k_weight() = p->q_weight();
       }),
       kInvalid, "projections.v_weight: required with inline projections"},
      {"out bias without out weight", Attn([](AttentionRequest& r) {
         auto* p = r.mutable_projections();
         *p->mutable_q_weight() = client::ToWire(RandomArray({2, 2}, 1), Encoding::kData);
         *p->mutable_k_weight() = p->q_weight();
         *p->mutable_v_weight() = p->q_weight();
         *p->mutable_out_bias() = client::ToWire(RandomArray({2}, 1), Encoding::kData);
       }),
       kInvalid, "projections.out_bias: set without projections.out_weight"},
      {"projection shapes", Attn([](AttentionRequest& r) {
         auto* p = r.mutable_projections();
         *p->mutable_q_weight() = client::ToWire(RandomArray({4, 3}, 1), Encoding::kData);
         *p->mutable_k_weight() = p->q_weight();
         *p->mutable_v_weight() = p->q_weight();
       }),
       kInvalid, "query: last dim must equal q_weight's in_features (3), got 2"},
      {"heads do not divide", Mha([](MultiHeadAttentionRequest& r) {
         r.clear_model();
         auto* p = r.mutable_projections();
         *p->mutable_q_weight() = client::ToWire(RandomArray({64, 64}, 1), Encoding::kData);
         *p->mutable_k_weight() = p->q_weight();
         *p->mutable_v_weight() = p->q_weight();
         r.set_num_heads(5);
       }),
       kInvalid, "num_heads: must divide the projection widths (q 64, v 64), got 5"},
      {"inline without num_heads", Mha([](MultiHeadAttentionRequest& r) {
         r.clear_model();
         auto* p = r.mutable_projections();
         *p->mutable_q_weight() = client::ToWire(RandomArray({64, 64}, 1), Encoding::kData);
         *p->mutable_k_weight() = p->q_weight();
         *p->mutable_v_weight() = p->q_weight();
       }),
       kInvalid, "num_heads: required (positive) with inline projections, got 0"},
      {"num_heads disagrees with model",
       Mha([](MultiHeadAttentionRequest& r) { r.set_num_heads(2); }), kInvalid,
       "num_heads: model 'demo-mha-small' has 4 heads, got 2 (leave it 0)"},
      {"mha without weights", Mha([](MultiHeadAttentionRequest& r) { r.clear_model(); }), kInvalid,
       "model or projections: MultiHeadAttention needs one"},
      {"mha wrong width", Mha([](MultiHeadAttentionRequest& r) {
         *r.mutable_query() = client::ToWire(RandomArray({1, 3, 32}, 1), Encoding::kData);
       }),
       kInvalid, "query: last dim must equal q_weight's in_features (64), got 32"},
      {"cross without weights",
       [](client::AttentionClient& c) {
         CrossAttentionRequest r;
         *r.mutable_decoder() = client::ToWire(RandomArray({1, 2, 64}, 1), Encoding::kData);
         *r.mutable_encoder() = r.decoder();
         return Call(c, r);
       },
       kInvalid, "model or projections: CrossAttention needs one"},
      {"cross without encoder",
       [](client::AttentionClient& c) {
         CrossAttentionRequest r;
         *r.mutable_decoder() = client::ToWire(RandomArray({1, 2, 64}, 1), Encoding::kData);
         r.set_model("demo-cross-attention");
         return Call(c, r);
       },
       kInvalid, "encoder: required"},
  };
}

TEST_P(ServerTest, BadInputGetsTheRightCodeAndNamesTheField) {
  auto c = Demo();
  for (const auto& bad : BadCases()) {
    SCOPED_TRACE(bad.name);
    grpc::Status st = bad.call(c);
    EXPECT_EQ(st.error_code(), bad.code) << st.error_message();
    EXPECT_NE(st.error_message().find(bad.message), std::string::npos)
        << "message: " << st.error_message() << "\nwanted: " << bad.message;
  }
  // Still healthy and still answering.
  std::string status;
  ASSERT_TRUE(c.Health("", &status).ok());
  EXPECT_EQ(status, "SERVING");
  EXPECT_TRUE(Call(c, SeedQuery()).ok());
}

TEST(ServerLimits, OverLimitRequestsAreResourceExhausted) {
  auto s = attn_test::StartTestServer([](server::ServerConfig& cfg) {
    cfg.limits.max_message_bytes = 1 << 20;
    cfg.limits.max_attention_work = 1e8;
    cfg.limits.max_projection_elements = 100;
    cfg.limits.max_request_memory_bytes = 2 << 20;
  });
  ASSERT_NE(s, nullptr);
  client::ChannelOptions four_mb;
  four_mb.max_message_mb = 4;
  client::AttentionClient c(client::Connect(attn_test::Target(*s), four_mb));
  auto expect = [&](const grpc::Status& st, const std::string& msg) {
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
    EXPECT_NE(st.error_message().find(msg), std::string::npos) << st.error_message();
  };
  AttentionRequest req;
  // Work: 20000^2 * 1 = 4e8 > 1e8; a small message.
  *req.mutable_query() = client::ToWire(RandomArray({20000, 1}, 1), Encoding::kData);
  expect(Call(c, req),
         "request: attention work B*H*Lq*Lk*D = 4e+08 exceeds the limit of 1e+08 "
         "(--max-attention-work)");
  // Weights 1000 x 1000 x 4 bytes = 4 MB > the 1 MiB message limit.
  *req.mutable_query() = client::ToWire(RandomArray({1000, 1}, 1), Encoding::kData);
  req.set_return_weights(true);
  expect(Call(c, req),
         "response: 4.004e+06 bytes would exceed the message limit of 1048576 bytes "
         "(--max-message-mb)");
  // A request over the message limit is refused by gRPC itself.
  *req.mutable_query() = client::ToWire(RandomArray({300000, 1}, 1), Encoding::kData);
  expect(Call(c, req), "");
  // Inline weights over --max-projection-elements.
  AttentionRequest proj;
  *proj.mutable_query() = client::ToWire(RandomArray({2, 8}, 1), Encoding::kData);
  for (auto* w : {proj.mutable_projections()->mutable_q_weight(),
                  proj.mutable_projections()->mutable_k_weight(),
                  proj.mutable_projections()->mutable_v_weight()}) {
    *w = client::ToWire(RandomArray({8, 8}, 2), Encoding::kData);
  }
  expect(Call(c, proj),
         "projections: 192 weight elements exceed the limit of 100 (--max-projection-elements)");
  // Buffers: a 0.8 MB query through demo-mha (E=512) needs ~4 MB of
  // projections and output, over the 2 MiB limit.
  MultiHeadAttentionRequest mha;
  *mha.mutable_query() = client::ToWire(RandomArray({1, 400, 512}, 3), Encoding::kData);
  mha.set_model("demo-mha");
  expect(Call(c, mha), "MiB of buffers, over the limit of 2 MiB (--max-request-memory-mb)");
  std::string status;
  ASSERT_TRUE(c.Health("", &status).ok());
  EXPECT_EQ(status, "SERVING");
}

TEST(ServerShutdown, CallsInFlightFinishAndNewCallsAreRefused) {
  auto s = attn_test::StartTestServer();
  ASSERT_NE(s, nullptr);
  const std::string target = attn_test::Target(*s);
  // The test holds every CPU, so the three calls wait inside the server for
  // as long as the test needs, however fast they compute and however slowly
  // their clients connect.
  server::ComputeScheduler& cpus = s->scheduler();
  ASSERT_TRUE(cpus.TryAcquire(cpus.cpus()));
  MultiHeadAttentionRequest req;
  *req.mutable_query() = client::ToWire(RandomArray({4, 512, 512}, 31), Encoding::kData);
  req.set_model("demo-mha");
  std::atomic<int> ok{0};
  std::vector<std::thread> callers;
  std::vector<std::string> failures(3);  // caller i's status when it failed
  for (int i = 0; i < 3; ++i) {
    callers.emplace_back([&, i] {
      client::AttentionClient c(client::Connect(target));
      AttentionResponse resp;
      const auto st = c.MultiHeadAttention(req, &resp, std::chrono::seconds(60));
      if (st.ok()) {
        ++ok;
      } else {
        failures[static_cast<size_t>(i)] =
            std::to_string(static_cast<int>(st.error_code())) + " " + st.error_message();
      }
    });
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (cpus.queued() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(cpus.queued(), 3);
  std::thread stopper([&] { s->Shutdown(std::chrono::seconds(30)); });
  // Once the shutdown has begun, a new call is refused while the three wait.
  bool refused = false;
  while (!refused && std::chrono::steady_clock::now() < deadline) {
    client::AttentionClient late(client::Connect(target));
    std::string status;
    refused = !late.Health("", &status, std::chrono::seconds(2)).ok();
  }
  EXPECT_TRUE(refused) << "still accepting calls";
  EXPECT_EQ(cpus.queued(), 3) << "a call waiting for a CPU was dropped by the shutdown";
  cpus.Release(cpus.cpus());
  stopper.join();
  for (auto& t : callers) t.join();
  EXPECT_EQ(ok.load(), 3) << "a call in flight failed during shutdown: [" << failures[0] << "] ["
                          << failures[1] << "] [" << failures[2] << "]";
}

// SDPA over [1, 8, L, 64]: long enough to hold the CPUs for a while.
AttentionRequest LongSdpa(int64_t l) {
  AttentionRequest req;
  *req.mutable_query() = client::ToWire(RandomArray({1, 8, l, 64}, 41), Encoding::kData);
  return req;
}

TEST(ServerDeadlines, ExpiredWhileQueuedIsNotComputed) {
  // One compute thread: a long call holds it while a short-deadline call waits.
  auto s = attn_test::StartTestServer([](server::ServerConfig& c) { c.threads = 1; });
  ASSERT_NE(s, nullptr);
  const std::string target = attn_test::Target(*s);
  std::atomic<bool> long_ok{false};
  std::thread long_call([&] {
    client::AttentionClient c(client::Connect(target));
    AttentionResponse resp;
    long_ok = c.Attention(LongSdpa(6144), &resp, std::chrono::seconds(60)).ok();
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (s->calls_in_flight() < 1 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  client::AttentionClient c(client::Connect(target));
  AttentionResponse resp;
  const grpc::Status st = c.Attention(LongSdpa(64), &resp, std::chrono::milliseconds(50));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  long_call.join();
  EXPECT_TRUE(long_ok.load());
  // The expired call reached a CPU only after its client gave up: dropped.
  while (s->calls_in_flight() > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(s->calls_skipped(), 1);
}

TEST(ServerDeadlines, LongCallStopsBetweenBlocksWhenItsClientGivesUp) {
  auto s = attn_test::StartTestServer();
  ASSERT_NE(s, nullptr);
  client::AttentionClient c(client::Connect(attn_test::Target(*s)));
  AttentionResponse resp;
  // The bound comes from this machine's own speed, whatever its ISA tier: a
  // complete call at L = 4096, times 16 (the work grows as L^2), is how long
  // the server would stay busy with L = 16384 if it ignored the cancellation.
  const auto m0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(c.Attention(LongSdpa(4096), &resp, std::chrono::seconds(120)).ok());
  const double full_s =
      16.0 * std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count();
  constexpr double kWaitS = 0.3;  // the client gives up after this
  ASSERT_GT(full_s, 4 * kWaitS) << "too fast for the test to tell anything";

  const auto t0 = std::chrono::steady_clock::now();
  const grpc::Status st = c.Attention(LongSdpa(16384), &resp,
                                      std::chrono::milliseconds(static_cast<int>(kWaitS * 1000)));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  while (s->calls_in_flight() > 0 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const double freed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Cancelled between key blocks, the server is free one key block (a tiny
  // share of the call) after the deadline; without cancellation only after
  // full_s. Half of full_s past the deadline separates the two on any CPU,
  // under the sanitizers too.
  EXPECT_LT(freed_s, kWaitS + 0.5 * full_s)
      << "the server kept computing an abandoned call (a complete call takes ~" << full_s << " s)";
}

TEST(ServerStart, PortInUseIsRefused) {
  auto first = attn_test::StartTestServer();
  ASSERT_NE(first, nullptr);
  server::ServerConfig cfg;
  cfg.host = "127.0.0.1";
  cfg.port = first->port();
  cfg.log_level = "off";
  auto second = server::AttentionServer::Start(cfg);
  ASSERT_FALSE(second.ok()) << "a second server shared port " << cfg.port;
  EXPECT_NE(
      second.status().message().find("cannot listen on 127.0.0.1:" + std::to_string(cfg.port)),
      std::string::npos)
      << second.status().message();
}

TEST(ServerStart, BadModelDirIsRefusedWithTheReason) {
  server::ServerConfig cfg;
  cfg.host = "127.0.0.1";
  cfg.port = 0;
  cfg.model_dir = "/nonexistent/models";
  auto s = server::AttentionServer::Start(cfg);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_NE(s.status().message().find("--model-dir /nonexistent/models: cannot open directory"),
            std::string::npos);
}

}  // namespace
}  // namespace attn
