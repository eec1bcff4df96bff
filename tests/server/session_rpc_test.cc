// SessionService over TCP (issue 25): every call of the contract against a
// float64 replay of each session (tests/session_replay.h), the errors with
// their codes and messages, atomicity (a failing batch, a deadline that
// passes mid-compute), the pool's limit and health, copy-on-write forks,
// idle expiry and the metrics.
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <random>
#include <thread>

#include "session_client.h"
#include "session_replay.h"
#include "status_matchers.h"
#include "test_server.h"
#include "wire/tensor_codec.h"

namespace {

namespace v1 = attention::v1;
using attn::StatusCode;
using attn::client::SessionClient;
using attn::wire::Encoding;
using attn::wire::WireType;
using attn_test::ReplayOptions;
using attn_test::ReplaySession;
using attn_test::ReplayType;

v1::Tensor Dense(const attn::Shape& shape, const std::vector<float>& v,
                 WireType type = WireType::kFloat32) {
  v1::Tensor t;
  attn::wire::EncodeDense(shape, v.data(), v.size(), type, Encoding::kData, &t);
  return t;
}

std::vector<float> Floats(const v1::Tensor& t) {
  attn::wire::DecodedTensor d;
  const attn::Status st = attn::wire::DecodeTensor(t, "out", attn::DataType::kFloat32, 1 << 30, &d);
  EXPECT_TRUE(st.ok()) << st.ToString();
  const float* p = d.view.f32();
  return std::vector<float>(p, p + attn::NumElements(d.view.shape));
}

v1::CreateSessionRequest Spec(const std::string& id, int layers, int hkv, int d, int dv,
                              v1::DataType type = v1::DATA_TYPE_FLOAT32, int64_t max_tokens = 0) {
  v1::CreateSessionRequest r;
  r.set_session_id(id);
  r.set_num_layers(layers);
  r.set_num_kv_heads(hkv);
  r.set_head_dim(d);
  r.set_value_dim(dv);
  r.set_cache_dtype(type);
  r.set_max_tokens(max_tokens);
  return r;
}

// A session on the server and its replay, stepped together over RPC.
struct Remote {
  std::string id;
  int64_t hq;
  ReplaySession replay;
  WireType wire = WireType::kFloat32;
};

struct Step {
  std::vector<float> q, k, v;
  int64_t n, nkv;
};

Step MakeStep(const Remote& r, int64_t n, int64_t nkv, std::mt19937& rng) {
  Step s{attn_test::Normal(r.hq * n * r.replay.d, rng),
         attn_test::Normal(r.replay.hkv * nkv * r.replay.d, rng),
         attn_test::Normal(r.replay.hkv * nkv * r.replay.dv, rng), n, nkv};
  // The wire type rounds the inputs: the replay sees what the server sees.
  if (r.wire != WireType::kFloat32) {
    const ReplayType t =
        r.wire == WireType::kBFloat16 ? ReplayType::kBFloat16 : ReplayType::kFloat16;
    for (auto* vec : {&s.q, &s.k, &s.v}) {
      for (float& x : *vec) x = attn_test::RoundTo(t, x);
    }
  }
  return s;
}

void AddStep(const Remote& r, const Step& s, v1::ExtendRequest* req) {
  v1::SessionStep* st = req->add_steps();
  st->set_session_id(r.id);
  *st->mutable_query() = Dense({r.hq, s.n, r.replay.d}, s.q, r.wire);
  *st->mutable_key() = Dense({r.replay.hkv, s.nkv, r.replay.d}, s.k, r.wire);
  *st->mutable_value() = Dense({r.replay.hkv, s.nkv, r.replay.dv}, s.v, r.wire);
}

class SessionRpc : public attn_test::ServerWithClient<> {
 protected:
  void SetUp() override {
    ServerWithClient::SetUp();
    sessions_ = std::make_unique<SessionClient>(attn::client::Connect(attn_test::Target(*server_)));
  }

  Remote Open(const std::string& id, int layers, int64_t hq, int hkv, int d, int dv,
              v1::DataType type = v1::DATA_TYPE_FLOAT32) {
    auto info = sessions_->Create(Spec(id, layers, hkv, d, dv, type));
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    const ReplayType rt = type == v1::DATA_TYPE_BFLOAT16  ? ReplayType::kBFloat16
                          : type == v1::DATA_TYPE_FLOAT16 ? ReplayType::kFloat16
                                                          : ReplayType::kFloat32;
    return Remote{info.ok() ? info->session_id() : id, hq, ReplaySession(layers, hkv, d, dv, rt)};
  }

  // One Extend of every remote by its step, each result against its replay.
  void ExtendAndCheck(int layer, std::vector<Remote*> rs, const std::vector<Step>& steps,
                      const ReplayOptions& ro = {}, double tol = 1e-5) {
    v1::ExtendRequest req;
    req.set_layer(layer);
    req.set_causal(ro.causal);
    req.mutable_options()->set_return_lse(true);
    if (ro.wl) req.mutable_options()->set_window_left(*ro.wl);
    if (ro.wr) req.mutable_options()->set_window_right(*ro.wr);
    if (ro.softcap > 0) req.mutable_options()->set_softcap(ro.softcap);
    if (!ro.alibi.empty()) {
      *req.mutable_options()->mutable_alibi_slopes() =
          Dense({static_cast<int64_t>(ro.alibi.size())}, ro.alibi);
    }
    if (!ro.sink.empty()) {
      *req.mutable_options()->mutable_sink_logits() =
          Dense({static_cast<int64_t>(ro.sink.size())}, ro.sink);
    }
    for (size_t i = 0; i < rs.size(); ++i) AddStep(*rs[i], steps[i], &req);
    auto resp = sessions_->Extend(req, std::chrono::seconds(60));
    ASSERT_TRUE(resp.ok()) << resp.status().ToString();
    ASSERT_EQ(resp->results_size(), static_cast<int>(rs.size()));
    for (size_t i = 0; i < rs.size(); ++i) {
      rs[i]->replay.Append(layer, steps[i].k, steps[i].v, steps[i].nkv);
      const auto want = rs[i]->replay.Expected(layer, steps[i].q, rs[i]->hq, steps[i].n, ro);
      const v1::AttentionResponse& r = resp->results(static_cast<int>(i));
      EXPECT_EQ(r.output().dtype(), attn::wire::NativeDataType(rs[i]->wire)) << "the query's type";
      const std::vector<float> out = Floats(r.output()), lse = Floats(r.lse());
      SCOPED_TRACE("session " + rs[i]->id);
      attn_test::ExpectMatches(want, out.data(), lse.data(), tol);
    }
  }

  int64_t PoolUsed() {
    auto list = sessions_->List();
    EXPECT_TRUE(list.ok());
    return list.ok() ? list->cache_bytes_used() : -1;
  }

  std::unique_ptr<SessionClient> sessions_;
};

TEST_F(SessionRpc, CreateGetListDelete) {
  auto info = sessions_->Create(Spec("", 3, 2, 16, 0, v1::DATA_TYPE_BFLOAT16));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->session_id().rfind("s-", 0), 0u) << "the server names it: " << info->session_id();
  EXPECT_EQ(info->num_layers(), 3);
  EXPECT_EQ(info->value_dim(), 16) << "0 means head_dim";
  EXPECT_EQ(info->cache_dtype(), v1::DATA_TYPE_BFLOAT16);
  EXPECT_EQ(info->max_tokens(), 131072) << "--max-session-tokens";
  EXPECT_EQ(info->layer_tokens_size(), 3);
  EXPECT_EQ(info->cache_bytes(), 0);
  auto list = sessions_->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->sessions_size(), 1);
  EXPECT_EQ(list->cache_bytes_limit(), int64_t{1024} << 20);
  auto got = sessions_->Get(info->session_id());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->session_id(), info->session_id());
  auto gone = sessions_->Delete(info->session_id());
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(gone->session_id(), info->session_id());
  attn_test::ExpectStatus(
      sessions_->Get(info->session_id()).status(), StatusCode::kNotFound,
      "may have expired (--session-idle-timeout), been deleted, or been lost in a "
      "server restart (sessions are not persisted); create it again");
}

TEST_F(SessionRpc, DecodeLoopEqualsOneShotAttention) {
  std::mt19937 rng(1);
  Remote f32 = Open("f32", 2, 8, 2, 64, 64);
  Remote bf16 = Open("bf16", 2, 8, 2, 64, 64, v1::DATA_TYPE_BFLOAT16);
  bf16.wire = WireType::kBFloat16;  // bf16 on the wire too: the answer comes back in bf16
  ExtendAndCheck(1, {&f32}, {MakeStep(f32, 200, 200, rng)});
  ExtendAndCheck(1, {&bf16}, {MakeStep(bf16, 200, 200, rng)}, {}, 1e-2);
  for (int i = 0; i < 20; ++i) {
    ExtendAndCheck(1, {&f32, &bf16}, {MakeStep(f32, 1, 1, rng), MakeStep(bf16, 1, 1, rng)}, {},
                   1e-2);
  }
}

TEST_F(SessionRpc, MixedBatchWithEveryOption) {
  std::mt19937 rng(2);
  Remote a = Open("a", 1, 4, 2, 32, 16), b = Open("b", 1, 4, 2, 32, 16, v1::DATA_TYPE_FLOAT16);
  Remote c = Open("c", 1, 4, 2, 32, 16);
  ReplayOptions all;
  all.wl = 40;
  all.wr = 0;
  all.softcap = 3.0f;
  all.alibi = {0.5f, 0.25f, 0.125f, 0.0625f};
  all.sink = {0.1f, -0.3f, 1.0f, 0.0f};
  ExtendAndCheck(0, {&a, &b, &c},
                 {MakeStep(a, 100, 100, rng), MakeStep(b, 30, 30, rng), MakeStep(c, 7, 7, rng)},
                 all);
  // decode, a chunk, queries only
  ExtendAndCheck(0, {&a, &b, &c},
                 {MakeStep(a, 1, 1, rng), MakeStep(b, 90, 90, rng), MakeStep(c, 3, 0, rng)}, all);
  all.causal = false;
  ExtendAndCheck(0, {&a, &b}, {MakeStep(a, 2, 2, rng), MakeStep(b, 1, 1, rng)}, all);
}

TEST_F(SessionRpc, FillOnlyStepNeedsNoQuery) {
  std::mt19937 rng(3);
  Remote a = Open("fill", 1, 2, 1, 8, 8);
  v1::ExtendRequest req;
  v1::SessionStep* st = req.add_steps();
  st->set_session_id("fill");
  const auto k = attn_test::Normal(8 * 5, rng);
  *st->mutable_key() = Dense({1, 5, 8}, k);
  *st->mutable_value() = Dense({1, 5, 8}, k);
  auto resp = sessions_->Extend(req);
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(resp->results(0).output().shape_size(), 3);
  EXPECT_EQ(resp->results(0).output().shape(1), 0);
  EXPECT_EQ(sessions_->Get("fill")->layer_tokens(0), 5);
}

TEST_F(SessionRpc, ForkCopiesNoPageAndDiverges) {
  std::mt19937 rng(4);
  Remote p = Open("parent", 1, 4, 2, 32, 32, v1::DATA_TYPE_BFLOAT16);
  ExtendAndCheck(0, {&p}, {MakeStep(p, 300, 300, rng)});
  const int64_t used = PoolUsed();
  auto child = sessions_->Fork("parent", "parent:child");
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  EXPECT_EQ(PoolUsed(), used) << "a fork allocates no K/V page";
  EXPECT_EQ(child->cache_bytes(), sessions_->Get("parent")->cache_bytes())
      << "shared pages count in both";
  Remote c{"parent:child", 4, p.replay};
  ExtendAndCheck(0, {&p, &c}, {MakeStep(p, 1, 1, rng), MakeStep(c, 3, 3, rng)});
  ASSERT_TRUE(sessions_->Delete("parent").ok());
  ExtendAndCheck(0, {&c}, {MakeStep(c, 1, 1, rng)});
  auto t = sessions_->Truncate("parent:child", 100);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->layer_tokens(0), 100);
  c.replay.Truncate(100);
  ExtendAndCheck(0, {&c}, {MakeStep(c, 2, 2, rng)});
}

TEST_F(SessionRpc, ErrorsHaveTheirCodes) {
  std::mt19937 rng(5);
  Remote a = Open("err", 2, 4, 2, 8, 8);
  attn_test::ExpectStatus(sessions_->Create(Spec("err", 1, 1, 8, 8)).status(),
                          StatusCode::kAlreadyExists, "session 'err' already exists");
  attn_test::ExpectStatus(sessions_->Fork("err", "err").status(), StatusCode::kAlreadyExists,
                          "already exists");
  attn_test::ExpectStatus(sessions_->Create(Spec("x", 1, 1, 8, 8, v1::DATA_TYPE_BOOL)).status(),
                          StatusCode::kInvalidArgument, "cache_dtype: expected DATA_TYPE_FLOAT32");
  attn_test::ExpectStatus(sessions_->Create(Spec("x", 0, 1, 8, 8)).status(),
                          StatusCode::kInvalidArgument, "num_layers: must be in [1, 4096], got 0");
  attn_test::ExpectStatus(sessions_->Truncate("err", -2).status(), StatusCode::kInvalidArgument,
                          "tokens: must be >= 0");
  attn_test::ExpectStatus(sessions_->Fork("nope", "").status(), StatusCode::kNotFound,
                          "session 'nope' not found");
  const Step s = MakeStep(a, 1, 1, rng);
  v1::ExtendRequest req;
  req.set_layer(2);
  AddStep(a, s, &req);
  attn_test::ExpectStatus(sessions_->Extend(req).status(), StatusCode::kInvalidArgument,
                          "layer: steps[0] (session 'err') has 2 layers (0..1), got 2");
  req.set_layer(0);
  AddStep(a, s, &req);
  attn_test::ExpectStatus(sessions_->Extend(req).status(), StatusCode::kInvalidArgument,
                          "a session may appear once");
  req.clear_steps();
  attn_test::ExpectStatus(sessions_->Extend(req).status(), StatusCode::kInvalidArgument,
                          "steps: expected at least one step");
  AddStep(a, s, &req);
  *req.mutable_steps(0)->mutable_key() = Dense({2, 1, 4}, std::vector<float>(8, 0.0f));
  attn_test::ExpectStatus(
      sessions_->Extend(req).status(), StatusCode::kInvalidArgument,
      "key: expected float32 [num_kv_heads, n_kv, D] = [2, n_kv, 8], got float32 [2, 1, 4]");
  req.mutable_steps(0)->mutable_key()->set_data("abc");
  attn_test::ExpectStatus(sessions_->Extend(req).status(), StatusCode::kInvalidArgument,
                          "steps[0].key");
  req.clear_steps();
  AddStep(Remote{"ghost", 4, a.replay}, s, &req);
  attn_test::ExpectStatus(sessions_->Extend(req).status(), StatusCode::kNotFound,
                          "extend: steps[0]: session 'ghost' not found");
  auto small = sessions_->Create(Spec("small", 1, 2, 8, 8, v1::DATA_TYPE_FLOAT32, 4));
  ASSERT_TRUE(small.ok());
  req.clear_steps();
  Remote sm{"small", 4, a.replay};
  AddStep(sm, MakeStep(sm, 1, 5, rng), &req);
  attn_test::ExpectStatus(sessions_->Extend(req).status(), StatusCode::kResourceExhausted,
                          "would pass its max_tokens (4)");
  // Bytes that are not an ExtendRequest.
  grpc::ClientContext ctx;
  grpc::GenericStub generic(attn::client::Connect(attn_test::Target(*server_)));
  grpc::Slice junk(std::string("\xff\xff\xff", 3));
  grpc::ByteBuffer in(&junk, 1), out;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status st;
  generic.UnaryCall(&ctx, "/attention.v1.SessionService/Extend", grpc::StubOptions(), &in, &out,
                    [&](grpc::Status s2) {
                      std::lock_guard<std::mutex> l(mu);
                      st = s2;
                      done = true;
                      cv.notify_all();
                    });
  std::unique_lock<std::mutex> l(mu);
  cv.wait_for(l, std::chrono::seconds(10), [&] { return done; });
  ASSERT_TRUE(done);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("attention.v1.ExtendRequest"), std::string::npos)
      << st.error_message();
}

// A batch whose second step fails changes neither session; a deadline that
// passes mid-compute (a long prefill) changes nothing and gives every page back.
TEST_F(SessionRpc, FailedOrExpiredExtendChangesNoSession) {
  std::mt19937 rng(6);
  Remote a = Open("a", 1, 4, 2, 64, 64), b = Open("b", 1, 4, 2, 64, 64);
  ExtendAndCheck(0, {&a, &b}, {MakeStep(a, 50, 50, rng), MakeStep(b, 20, 20, rng)});
  const int64_t used = PoolUsed();
  v1::ExtendRequest req;
  AddStep(a, MakeStep(a, 1, 1, rng), &req);
  Step bad = MakeStep(b, 1, 1, rng);
  AddStep(b, bad, &req);
  *req.mutable_steps(1)->mutable_value() = Dense({2, 1, 32}, std::vector<float>(64, 0.0f));
  attn_test::ExpectStatus(sessions_->Extend(req).status(), StatusCode::kInvalidArgument,
                          "steps[1]");
  EXPECT_EQ(sessions_->Get("a")->layer_tokens(0), 50);
  EXPECT_EQ(PoolUsed(), used);
  // A big chunk (64 heads x 8192 queries over 8192 keys) with a 50 ms deadline.
  Remote big = Open("big", 1, 64, 8, 64, 64);
  v1::ExtendRequest chunk;
  AddStep(big, MakeStep(big, 8192, 8192, rng), &chunk);
  chunk.set_causal(true);
  auto r = sessions_->Extend(chunk, std::chrono::milliseconds(50));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().code() == StatusCode::kDeadlineExceeded ||
              r.status().code() == StatusCode::kCancelled)
      << r.status().ToString();
  // The server may still be unwinding: wait (bounded) for the pages to come back.
  for (int i = 0; i < 200 && PoolUsed() != used; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(PoolUsed(), used);
  EXPECT_EQ(sessions_->Get("big")->layer_tokens(0), 0);
  ExtendAndCheck(0, {&a, &b}, {MakeStep(a, 1, 1, rng), MakeStep(b, 2, 2, rng)});
}

TEST(SessionServer, FullPoolRefusesStaysServingAndRecovers) {
  auto server =
      attn_test::StartTestServer([](attn::server::ServerConfig& c) { c.kv_cache_bytes = 1 << 20; });
  ASSERT_NE(server, nullptr);
  auto channel = attn::client::Connect(attn_test::Target(*server));
  SessionClient sessions(channel);
  attn::client::AttentionClient client(channel);
  std::mt19937 rng(7);
  // D = Dv = 128 float32: 32 tokens a 32 KiB page; 1 MiB is 32 pages.
  ASSERT_TRUE(sessions.Create(Spec("a", 1, 4, 128, 128)).ok());
  ASSERT_TRUE(sessions.Create(Spec("b", 1, 4, 128, 128)).ok());
  Remote a{"a", 4, ReplaySession(1, 4, 128, 128, ReplayType::kFloat32)}, b{"b", 4, a.replay};
  b.id = "b";
  v1::ExtendRequest fill;
  AddStep(a, MakeStep(a, 1, 200, rng), &fill);  // 7 pages x 4 heads = 28
  ASSERT_TRUE(sessions.Extend(fill).ok());
  v1::ExtendRequest more;
  AddStep(b, MakeStep(b, 1, 64, rng), &more);  // 2 x 4 = 8 more: over the 32
  auto r = sessions.Extend(more);
  attn_test::ExpectStatus(r.status(), StatusCode::kResourceExhausted,
                          "917504 of 1048576 bytes used");
  std::string health;
  ASSERT_TRUE(client.Health("attention.v1.SessionService", &health).ok());
  EXPECT_EQ(health, "SERVING") << "a full pool is not an unhealthy server";
  ASSERT_TRUE(sessions.Delete("a").ok());
  EXPECT_TRUE(sessions.Extend(more).ok());
}

TEST(SessionServer, IdleSessionsExpireAndTheGaugeFalls) {
  auto server = attn_test::StartTestServer([](attn::server::ServerConfig& c) {
    c.session_idle_timeout_s = 0.2;
    c.metrics_port = 0;
  });
  ASSERT_NE(server, nullptr);
  SessionClient sessions(attn::client::Connect(attn_test::Target(*server)));
  std::mt19937 rng(8);
  ASSERT_TRUE(sessions.Create(Spec("idle", 1, 2, 16, 16)).ok());
  Remote r{"idle", 2, ReplaySession(1, 2, 16, 16, ReplayType::kFloat32)};
  v1::ExtendRequest req;
  AddStep(r, MakeStep(r, 1, 40, rng), &req);
  req.mutable_steps(0)->set_expected_tokens(0);
  ASSERT_TRUE(sessions.Extend(req).ok());
  auto again = sessions.Extend(req);  // a retry: a replay, counted as one
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(again->replayed(0));
  httplib::Client http("127.0.0.1", server->metrics_port());
  auto scrape = [&] {
    auto res = http.Get("/metrics");
    return res ? res->body : std::string();
  };
  const std::string before = scrape();
  EXPECT_NE(before.find("attn_session_tokens_appended_total 40\n"), std::string::npos) << before;
  EXPECT_NE(before.find("attn_session_steps_replayed_total 1\n"), std::string::npos);
  EXPECT_EQ(before.find("attn_kv_session_metadata_bytes 0\n"), std::string::npos)
      << "a live session's state is counted";
  EXPECT_NE(before.find("attn_kv_session_metadata_bytes_limit "), std::string::npos);
  // 40 float32 tokens of 2 kv heads, D 16: 2 pages of the default 32 KiB.
  EXPECT_NE(before.find("attn_sessions_by_format{key_format=\"float32\",value_format=\"float32\"} "
                        "1\n"),
            std::string::npos)
      << before;
  EXPECT_NE(before.find("attn_kv_cache_bytes_by_format{key_format=\"float32\",value_format="
                        "\"float32\"} 65536\n"),
            std::string::npos);
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {  // at most 5 s; List touches no session (Get would)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gone = sessions.List()->sessions_size() == 0;
  }
  EXPECT_TRUE(gone);
  const std::string m = scrape();
  EXPECT_NE(m.find("attn_sessions 0"), std::string::npos) << m;
  EXPECT_NE(m.find("attn_kv_cache_bytes_used 0"), std::string::npos);
  EXPECT_NE(m.find("attn_kv_session_metadata_bytes 0\n"), std::string::npos) << "freed with it";
  EXPECT_NE(m.find("attn_session_expired_total 1"), std::string::npos);
  EXPECT_EQ(m.find("attn_sessions_by_format"), std::string::npos) << "no session, no format";
  EXPECT_NE(m.find("attn_session_steps_total{n=\"1\"} 2"), std::string::npos);
  EXPECT_NE(m.find("attn_extend_duration_seconds_count{batch=\"1\"} 2"), std::string::npos);
  EXPECT_NE(m.find("attn_requests_total{rpc=\"Extend\",model=\"-\",code=\"OK\",protocol="
                   "\"attention.v1\"} 2"),
            std::string::npos);
}

// Twelve threads, each with its own sessions, stepping at once.
TEST_F(SessionRpc, TwelveThreadsWithTheirOwnSessions) {
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 12; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(100 + t));
      SessionClient c(attn::client::Connect(attn_test::Target(*server_)));
      const std::string id = "t" + std::to_string(t);
      if (!c.Create(Spec(id, 1, 2, 16, 16, t % 2 ? v1::DATA_TYPE_BFLOAT16 : v1::DATA_TYPE_FLOAT32))
               .ok()) {
        ++bad;
        return;
      }
      Remote r{id, 4,
               ReplaySession(1, 2, 16, 16, t % 2 ? ReplayType::kBFloat16 : ReplayType::kFloat32)};
      for (int i = 0; i < 15; ++i) {
        const Step s = MakeStep(r, i == 0 ? 10 : 1, i == 0 ? 10 : 1, rng);
        v1::ExtendRequest req;
        req.set_causal(true);
        AddStep(r, s, &req);
        auto resp = c.Extend(req, std::chrono::seconds(30));
        if (!resp.ok()) {
          ++bad;
          return;
        }
        r.replay.Append(0, s.k, s.v, s.nkv);
        const auto want = r.replay.Expected(0, s.q, r.hq, s.n, {});
        const auto out = Floats(resp->results(0).output());
        if (!attn_test::AllClose(out.data(), want.out, 1e-5, 1.0)) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace

namespace {

// Exactly-once over RPC: a step sent twice with expected_tokens is appended
// once, the retry answered the same and marked replayed; a step at the
// wrong place is FAILED_PRECONDITION and changes nothing.
TEST_F(SessionRpc, ARetriedStepWithExpectedTokensIsAReplay) {
  std::mt19937 rng(31);
  Remote r = Open("retry", 1, 4, 2, 16, 16);
  auto send = [&](const Step& s, int64_t expected) {
    v1::ExtendRequest req;
    req.set_causal(true);
    AddStep(r, s, &req);
    req.mutable_steps(0)->set_expected_tokens(expected);
    return sessions_->Extend(req, std::chrono::seconds(30));
  };
  const Step prefill = MakeStep(r, 30, 30, rng);
  auto first = send(prefill, 0);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->replayed_size(), 1);
  EXPECT_FALSE(first->replayed(0));
  auto again = send(prefill, 0);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->replayed(0));
  EXPECT_EQ(sessions_->Get("retry")->layer_tokens(0), 30) << "appended once";
  r.replay.Append(0, prefill.k, prefill.v, 30);
  const auto want = r.replay.Expected(0, prefill.q, r.hq, 30, {});
  attn_test::ExpectMatches(want, Floats(again->results(0).output()).data(), nullptr);
  const Step decode = MakeStep(r, 1, 1, rng);
  ASSERT_TRUE(send(decode, 30).ok());
  auto retry = send(decode, 30);
  ASSERT_TRUE(retry.ok());
  EXPECT_TRUE(retry->replayed(0)) << "a decode retry too";
  attn_test::ExpectStatus(send(decode, 40).status(), StatusCode::kFailedPrecondition,
                          "layer 0 holds 31 tokens, expected_tokens 40");
  EXPECT_EQ(sessions_->Get("retry")->layer_tokens(0), 31);
}

// The C++ Session handle counts every layer's tokens and sends them
// (expected_tokens): a second handle that missed a step is refused instead
// of appending at the wrong place, and the same step from it is a replay.
// Without an id the handle makes one; a fork without one stays in the family.
TEST_F(SessionRpc, SessionHandlesSendTheirCountsSoARetryIsAReplay) {
  std::mt19937 rng(37);
  auto made = attn::client::Session::Create(sessions_.get(), Spec("", 2, 2, 8, 8));
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  attn::client::Session a = *made;
  EXPECT_EQ(a.id().rfind("s-", 0), 0u) << a.id();
  EXPECT_EQ(a.id().size(), 26u);
  EXPECT_EQ(a.layer_tokens(), (std::vector<int64_t>{0, 0}));
  const v1::Tensor q = Dense({2, 1, 8}, attn_test::Normal(16, rng));
  const v1::Tensor k = Dense({2, 3, 8}, attn_test::Normal(48, rng));
  const v1::Tensor v = Dense({2, 3, 8}, attn_test::Normal(48, rng));
  ASSERT_TRUE(a.Extend(1, q, &k, &v).ok());
  EXPECT_EQ(a.layer_tokens(), (std::vector<int64_t>{0, 3}));
  attn::client::Session b(sessions_.get(), a.id());  // learns the counts on its first step
  ASSERT_TRUE(b.Info().ok());
  auto first = a.Extend(0, q, &k, &v);
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(a.last_replayed());
  auto replay = b.Extend(0, q, &k, &v);  // b still counts 0 on layer 0: a retry
  ASSERT_TRUE(replay.ok()) << replay.status().ToString();
  EXPECT_TRUE(b.last_replayed());
  const std::vector<float> got = Floats(replay->output()), want = Floats(first->output());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
  EXPECT_EQ(sessions_->Get(a.id())->layer_tokens(0), 3) << "appended once";
  const v1::Tensor k2 = Dense({2, 3, 8}, attn_test::Normal(48, rng));
  attn::client::Session c(sessions_.get(), a.id());
  ASSERT_TRUE(c.Info().ok());
  ASSERT_TRUE(a.Extend(0, q, &k, &v).ok());  // a appends 3 more (layer 0: 6)
  attn_test::ExpectStatus(c.Extend(0, q, &k2, &v).status(), StatusCode::kFailedPrecondition,
                          "layer 0 holds 6 tokens, expected_tokens 3");
  EXPECT_EQ(sessions_->Get(a.id())->layer_tokens(0), 6) << "the refused step changed nothing";
  auto child = a.Fork();
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  EXPECT_EQ(child->id().rfind(a.id() + ":", 0), 0u) << child->id();
  EXPECT_EQ(child->layer_tokens(), (std::vector<int64_t>{6, 3}));
}

// Every call checks its ids: control characters, spaces, empty and
// oversized ids are INVALID_ARGUMENT, and the message holds no raw control
// character.
TEST_F(SessionRpc, BadIdsAreRefusedOnEveryCall) {
  ASSERT_TRUE(sessions_->Create(Spec("good", 1, 1, 4, 4)).ok());
  for (const std::string& bad :
       {std::string("a\nrpc=Forged"), std::string("nul\0id", 6), std::string("has space"),
        std::string(""), std::string(10000, 'x')}) {
    SCOPED_TRACE(bad.substr(0, 20));
    v1::ExtendRequest req;
    req.add_steps()->set_session_id(bad);
    std::vector<attn::Status> got = {
        sessions_->Get(bad).status(),
        sessions_->Truncate(bad, 0).status(),
        sessions_->Delete(bad).status(),
        sessions_->Fork(bad, "").status(),
        bad.empty() ? sessions_->Get(bad).status() : sessions_->Fork("good", bad).status(),
        sessions_->Extend(req).status()};
    for (const attn::Status& st : got) {
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
      EXPECT_NE(st.message().find("must match [A-Za-z0-9._:-]{1,128}"), std::string::npos)
          << st.message();
      for (char c : st.message()) EXPECT_FALSE(c >= 0 && c < 0x20) << "a raw control character";
      EXPECT_LT(st.message().size(), 400u);
    }
  }
  // (An empty new_session_id is allowed: the server names the fork.)
  // A fork's id stays in its parent's family (the id before its first ':').
  auto child = sessions_->Fork("good", "");
  ASSERT_TRUE(child.ok());
  EXPECT_EQ(child->session_id().rfind("good:", 0), 0u) << child->session_id();
  attn_test::ExpectStatus(sessions_->Fork("good", "other:x").status(), StatusCode::kInvalidArgument,
                          "a fork is in its parent's family");
  EXPECT_TRUE(sessions_->Fork("good", "good:beam-2").ok());
}

}  // namespace

namespace {

// Quantized sessions over the wire: the formats round-trip through
// CreateSession and SessionInfo, a decode loop matches the float64 replay of
// what the server stores (kv_quant_model.h), and int4, an unknown format
// and a non-finite key on an int8 side get INVALID_ARGUMENT naming the field.
TEST_F(SessionRpc, QuantizedSessionsStoreTheirFormatsAndAnswerOverTheirCodes) {
  v1::CreateSessionRequest spec = Spec("q8", 1, 2, 16, 16, v1::DATA_TYPE_BFLOAT16);
  spec.set_key_format(v1::CACHE_FORMAT_INT8);
  spec.set_value_format(v1::CACHE_FORMAT_FP8_E4M3);
  auto info = sessions_->Create(spec);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->key_format(), v1::CACHE_FORMAT_INT8);
  EXPECT_EQ(info->value_format(), v1::CACHE_FORMAT_FP8_E4M3);
  Remote r{"q8", 8, ReplaySession(1, 2, 16, 16, ReplayType::kBFloat16)};
  r.replay.key_q = attn_test::ModelInt8;
  r.replay.value_q = attn_test::ModelFp8;
  std::mt19937 rng(17);
  // int8 keys meet the query rounded to int16 (2^-16 of its largest element).
  ExtendAndCheck(0, {&r}, {MakeStep(r, 80, 80, rng)}, {}, 2e-4);  // the blocked kernel
  for (int i = 0; i < 5; ++i) ExtendAndCheck(0, {&r}, {MakeStep(r, 1, 1, rng)}, {}, 2e-4);
  auto listed = sessions_->List();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->sessions_size(), 1);  // before the int4 one below
  EXPECT_EQ(listed->sessions(0).key_format(), v1::CACHE_FORMAT_INT8);
  EXPECT_EQ(listed->sessions(0).layer_tokens(0), 85);

  // int4 (keys per channel over blocks of tokens, values per token in
  // groups): answers within 25% relative RMS of the unquantized inputs.
  spec.set_session_id("q4");
  spec.set_key_format(v1::CACHE_FORMAT_INT4);
  spec.set_value_format(v1::CACHE_FORMAT_INT4);
  auto q4 = sessions_->Create(spec);
  ASSERT_TRUE(q4.ok()) << q4.status().ToString();
  EXPECT_EQ(q4->key_format(), v1::CACHE_FORMAT_INT4);
  Remote exact{"q4", 8, ReplaySession(1, 2, 16, 16, ReplayType::kFloat32)};
  for (int64_t n : {150, 1, 1, 3}) {
    const Step st = MakeStep(exact, n, n, rng);
    v1::ExtendRequest req4;
    req4.set_causal(true);
    AddStep(exact, st, &req4);
    auto resp = sessions_->Extend(req4);
    ASSERT_TRUE(resp.ok()) << resp.status().ToString();
    exact.replay.Append(0, st.k, st.v, n);
    const auto want = exact.replay.Expected(0, st.q, 8, n, {});
    const std::vector<float> got = Floats(resp->results(0).output());
    double num = 0, den = 0;
    for (size_t i = 0; i < want.out.size(); ++i) {
      num += (got[i] - want.out[i]) * (got[i] - want.out[i]);
      den += want.out[i] * want.out[i];
    }
    EXPECT_LT(std::sqrt(num / den), 0.25) << n;
  }
  spec.set_session_id("q4-odd");
  spec.set_head_dim(15);
  attn_test::ExpectStatus(sessions_->Create(spec).status(), attn::StatusCode::kInvalidArgument,
                          "key_format: int4 needs an even head_dim (two channels a byte), got 15");
  spec.set_head_dim(16);
  spec.set_key_format(static_cast<v1::CacheFormat>(7));
  attn_test::ExpectStatus(sessions_->Create(spec).status(), attn::StatusCode::kInvalidArgument,
                          "key_format: expected CACHE_FORMAT_UNSPECIFIED, CACHE_FORMAT_INT8, "
                          "CACHE_FORMAT_FP8_E4M3 or CACHE_FORMAT_INT4, got 7");
  Step bad = MakeStep(r, 1, 1, rng);
  bad.k[0] = std::nanf("");
  v1::ExtendRequest req;
  AddStep(r, bad, &req);
  attn_test::ExpectStatus(sessions_->Extend(req).status(), attn::StatusCode::kInvalidArgument,
                          "key: the session stores it as int8, which holds finite values only");
  EXPECT_EQ(sessions_->Get("q8")->layer_tokens(0), 85);
  EXPECT_EQ(sessions_->Get("q4")->layer_tokens(0), 155);
}

}  // namespace
