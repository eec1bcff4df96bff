// Sessions belong to whoever made them. Two named tokens and a bare one
// share a server: every cross-tenant call answers NOT_FOUND exactly as a
// missing id does and leaves the victim as it was; ids live in a namespace
// per principal; quotas per principal; a client certificate's subject as
// the principal under mutual TLS; a token rotated or removed on reload; the
// principal on every access line and metrics label, never a token.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "attention_client.h"
#include "session_client.h"
#include "status_matchers.h"
#include "test_files.h"
#include "test_server.h"
#include "wire/tensor_codec.h"

namespace {

namespace v1 = attention::v1;
using attn::StatusCode;
using attn::client::SessionClient;
using attn_test::CapturedLog;
using attn_test::Pki;
using attn_test::TempDir;

constexpr char kTokenA[] = "tok-A-5d0e8c1f93";
constexpr char kTokenB[] = "tok-B-a17f04d2e6";
constexpr char kTokenBare[] = "tok-bare-3c9e71b0";

v1::Tensor Dense(const attn::Shape& shape, const std::vector<float>& v) {
  v1::Tensor t;
  attn::wire::EncodeDense(shape, v.data(), v.size(), attn::wire::WireType::kFloat32,
                          attn::wire::Encoding::kData, &t);
  return t;
}

std::vector<float> Ramp(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.37f * static_cast<float>(i) + scale);
  return v;
}

v1::CreateSessionRequest Spec(const std::string& id, int layers = 2, int hkv = 2, int d = 8) {
  v1::CreateSessionRequest r;
  r.set_session_id(id);
  r.set_num_layers(layers);
  r.set_num_kv_heads(hkv);
  r.set_head_dim(d);
  return r;
}

// One step on `id`: `n_kv` tokens appended (none: 0) and, with `n_q`,
// queries attended without a causal mask (every key: a reader's probe).
v1::ExtendRequest Step(const std::string& id, int layer, int64_t n_q, int64_t n_kv,
                       float scale = 1.0f, int hkv = 2, int d = 8) {
  v1::ExtendRequest req;
  req.set_layer(layer);
  req.set_causal(false);
  req.mutable_options()->set_return_lse(true);
  v1::SessionStep* st = req.add_steps();
  st->set_session_id(id);
  if (n_q > 0) *st->mutable_query() = Dense({hkv, n_q, d}, Ramp(hkv * n_q * d, 3.0f));
  if (n_kv > 0) {
    *st->mutable_key() = Dense({hkv, n_kv, d}, Ramp(hkv * n_kv * d, scale));
    *st->mutable_value() = Dense({hkv, n_kv, d}, Ramp(hkv * n_kv * d, -scale));
  }
  return req;
}

// The first 8 hex digits of SHA-256(token), from coreutils: what a bare
// token's principal is called.
std::string Sha256Prefix(const std::string& token) {
  FILE* p = popen(("printf '%s' '" + token + "' | sha256sum").c_str(), "r");
  char buf[80] = {};
  const size_t n = p != nullptr ? fread(buf, 1, 64, p) : 0;
  if (p != nullptr) pclose(p);
  return n >= 8 ? std::string(buf, 8) : "";
}

SessionClient Client(const attn::server::AttentionServer& s, const std::string& token) {
  attn::client::ChannelOptions o;
  o.token = token;
  return SessionClient(attn::client::Connect(attn_test::Target(s), o));
}

// Everything a session holds that a reader could see: its info and the
// answer of a fixed probe on each layer, bit for bit.
std::string Snapshot(SessionClient& c, const std::string& id) {
  auto info = c.Get(id);
  EXPECT_TRUE(info.ok()) << info.status().ToString();
  if (!info.ok()) return "";
  std::string s = info->SerializeAsString();
  for (int layer = 0; layer < info->num_layers(); ++layer) {
    auto r = c.Extend(Step(id, layer, 3, 0, 1.0f, info->num_kv_heads(), info->head_dim()));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) s += r->SerializeAsString();
  }
  return s;
}

class Tenancy : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.Write("tokens", std::string("# two teams and a bare token\nteam-a ") + kTokenA +
                             "\nteam-b " + kTokenB + "\n" + kTokenBare + "\n");
    Start([](attn::server::ServerConfig&) {});
  }
  void Start(const std::function<void(attn::server::ServerConfig&)>& edit) {
    server_ = attn_test::StartTestServer([&](attn::server::ServerConfig& c) {
      c.auth_token_file = dir_.File("tokens");
      c.metrics_port = 0;
      edit(c);
    });
    ASSERT_NE(server_, nullptr);
  }
  std::string Metrics() {
    httplib::Client http("127.0.0.1", server_->metrics_port());
    auto res = http.Get("/metrics");
    return res ? res->body : "";
  }

  TempDir dir_;
  std::unique_ptr<attn::server::AttentionServer> server_;
};

TEST_F(Tenancy, AnotherPrincipalsSessionDoesNotExistForAnyCall) {
  SessionClient a = Client(*server_, kTokenA);
  // A chosen id and a server-made one, each holding tokens on both layers.
  std::vector<std::string> victims = {"chat-42"};
  auto made = a.Create(Spec(""));
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  victims.push_back(made->session_id());
  ASSERT_TRUE(a.Create(Spec("chat-42")).ok());
  for (const std::string& id : victims) {
    for (int layer = 0; layer < 2; ++layer) ASSERT_TRUE(a.Extend(Step(id, layer, 1, 5)).ok());
  }
  std::vector<std::string> before;
  for (const std::string& id : victims) before.push_back(Snapshot(a, id));

  for (const char* token : {kTokenB, kTokenBare}) {
    SessionClient x = Client(*server_, token);
    // What a missing id gets, with the id put in: exactly this, per call.
    auto missing = [&](const std::string& id, const std::string& where) {
      return where + "session '" + id +
             "' not found: it may have expired (--session-idle-timeout), been deleted, or been "
             "lost in a server restart (sessions are not persisted); create it again";
    };
    for (const std::string& probe : {std::string("never-made"), victims[0], victims[1]}) {
      SCOPED_TRACE(std::string(token == kTokenB ? "team-b" : "bare") + " on " + probe);
      auto expect = [&](const attn::Status& st, const std::string& where) {
        EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
        EXPECT_EQ(st.message(), missing(probe, where));
      };
      expect(x.Get(probe).status(), "");
      const std::string step = "extend: steps[0]: ";
      expect(x.Extend(Step(probe, 0, 4, 0)).status(), step);        // read: query only
      expect(x.Extend(Step(probe, 1, 0, 3)).status(), step);        // write: keys only
      expect(x.Extend(Step(probe, 0, 1, 1, 7.0f)).status(), step);  // both
      expect(x.Fork(probe, probe + ":stolen").status(), "fork: ");
      expect(x.Fork(probe, "").status(), "fork: ");
      expect(x.Truncate(probe, 0).status(), "truncate: ");
      expect(x.Delete(probe).status(), "delete: ");
    }
    auto list = x.List();
    ASSERT_TRUE(list.ok());
    EXPECT_EQ(list->sessions_size(), 0) << "another principal's sessions are not listed";
    EXPECT_EQ(list->owner_bytes_used(), 0);
    EXPECT_GT(list->cache_bytes_used(), 0) << "the pool's own total stays the server's";
    for (const std::string& id : victims) {
      EXPECT_EQ(x.Get(id + ":stolen").status().code(), StatusCode::kNotFound) << "no fork was made";
    }
  }
  for (size_t i = 0; i < victims.size(); ++i) {
    EXPECT_EQ(Snapshot(a, victims[i]), before[i]) << victims[i] << " changed";
  }
  auto mine = a.List();
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ(mine->sessions_size(), 2);
  for (const auto& s : mine->sessions()) EXPECT_EQ(s.owner(), "team-a");
  EXPECT_EQ(mine->owner_bytes_used(), mine->cache_bytes_used()) << "only team-a holds pages";
  EXPECT_EQ(mine->owner_bytes_limit(), mine->cache_bytes_limit()) << "no quota: the pool's";
}

TEST_F(Tenancy, TheSameIdUnderTwoPrincipalsIsTwoSessions) {
  SessionClient a = Client(*server_, kTokenA), b = Client(*server_, kTokenB),
                bare = Client(*server_, kTokenBare);
  auto ia = a.Create(Spec("s1", 2, 2, 8));
  auto ib = b.Create(Spec("s1", 1, 1, 4));
  ASSERT_TRUE(ia.ok() && ib.ok());
  EXPECT_EQ(ia->owner(), "team-a");
  EXPECT_EQ(ib->owner(), "team-b");
  auto ic = bare.Create(Spec("s1", 1, 2, 8));
  ASSERT_TRUE(ic.ok());
  EXPECT_EQ(ic->owner(), Sha256Prefix(kTokenBare)) << "a bare token's name";
  EXPECT_EQ(ic->owner().size(), 8u);
  ASSERT_TRUE(a.Extend(Step("s1", 0, 0, 7, 1.0f)).ok());
  ASSERT_TRUE(b.Extend(Step("s1", 0, 0, 3, 2.0f, 1, 4)).ok());
  EXPECT_EQ(a.Get("s1")->layer_tokens(0), 7);
  EXPECT_EQ(b.Get("s1")->layer_tokens(0), 3);
  EXPECT_EQ(b.Get("s1")->head_dim(), 4);
  ASSERT_TRUE(a.Delete("s1").ok());
  EXPECT_EQ(b.Get("s1")->layer_tokens(0), 3) << "b's s1 outlives a's";
  EXPECT_EQ(a.Get("s1").status().code(), StatusCode::kNotFound);
  // A fork belongs to the caller and is made from the caller's own session.
  auto child = b.Fork("s1", "s1:child");
  ASSERT_TRUE(child.ok());
  EXPECT_EQ(child->owner(), "team-b");
  EXPECT_EQ(a.Get("s1-child").status().code(), StatusCode::kNotFound);
}

TEST_F(Tenancy, QuotasPerPrincipalLeaveTheOthersAlone) {
  Start([](attn::server::ServerConfig& c) {
    c.max_sessions_per_principal = 2;
    c.kv_cache_bytes_per_principal = int64_t{1} << 20;  // 32 pages of 32 KiB
    c.kv_cache_bytes = int64_t{8} << 20;
  });
  SessionClient a = Client(*server_, kTokenA), b = Client(*server_, kTokenB);
  ASSERT_TRUE(a.Create(Spec("a1", 1, 2, 64)).ok());
  ASSERT_TRUE(a.Create(Spec("a2", 1, 2, 64)).ok());
  attn_test::ExpectStatus(a.Create(Spec("a3", 1, 2, 64)).status(), StatusCode::kResourceExhausted,
                          "sessions of principal 'team-a': 2 live, its quota "
                          "(--max-sessions-per-principal 2)");
  ASSERT_TRUE(b.Create(Spec("b1", 1, 2, 64)).ok()) << "team-b is not held back";
  ASSERT_TRUE(b.Create(Spec("b2", 1, 2, 64)).ok());

  // Bytes: a1 grows by 64 tokens a step until team-a's 1 MiB is spent.
  auto fill = [](SessionClient& c, const std::string& id) {
    int steps = 0;
    attn::Status st;
    for (; steps < 200; ++steps) {  // 64 tokens of 2 x 64 floats, keys and values: 64 KiB
      st = c.Extend(Step(id, 0, 0, 64, 1.0f, 2, 64)).status();
      if (!st.ok()) break;
    }
    return std::make_pair(steps, st);
  };
  const auto [a_steps, a_refused] = fill(a, "a1");
  EXPECT_EQ(a_refused.code(), StatusCode::kResourceExhausted) << a_refused.ToString();
  EXPECT_TRUE(std::regex_search(
      a_refused.message(),
      std::regex("^kv cache of principal 'team-a': [0-9]+ bytes more needed, 1048576 of its "
                 "1048576 bytes used \\(its quota, --kv-cache-mb-per-principal\\)")))
      << a_refused.message();
  EXPECT_EQ(a_steps, 16) << "1 MiB holds 16 steps of 64 KiB";
  auto list = a.List();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->owner_bytes_used(), int64_t{1} << 20);
  EXPECT_EQ(list->owner_bytes_limit(), int64_t{1} << 20);
  EXPECT_EQ(list->cache_bytes_limit(), int64_t{8} << 20);
  const std::string a2_before = Snapshot(a, "a2");
  EXPECT_EQ(a.Extend(Step("a2", 0, 0, 1, 1.0f, 2, 64)).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(Snapshot(a, "a2"), a2_before) << "a refused step changes nothing";
  // team-b fills its own quota as if team-a were not there.
  const auto [b_steps, b_refused] = fill(b, "b1");
  EXPECT_EQ(b_steps, 16);
  EXPECT_EQ(b.List()->owner_bytes_used(), int64_t{1} << 20);
  // A fork shares its parent's pages: they count once for their owner.
  ASSERT_TRUE(a.Delete("a2").ok());
  ASSERT_TRUE(a.Fork("a1", "a1:beam").ok());
  EXPECT_EQ(a.List()->owner_bytes_used(), int64_t{1} << 20);
  // Freed sessions and bytes come back.
  ASSERT_TRUE(a.Delete("a1").ok());
  EXPECT_EQ(a.List()->owner_bytes_used(), int64_t{1} << 20) << "the fork still holds the pages";
  ASSERT_TRUE(a.Delete("a1:beam").ok());
  EXPECT_EQ(a.List()->owner_bytes_used(), 0);
  ASSERT_TRUE(a.Create(Spec("a3", 1, 2, 64)).ok());
  EXPECT_EQ(fill(a, "a3").first, 16) << "the whole quota again";
  EXPECT_EQ(b.List()->owner_bytes_used(), int64_t{1} << 20) << "team-b untouched throughout";
}

TEST_F(Tenancy, RotatingATokenKeepsItsSessionsAndRemovingItsNameEndsAccess) {
  Start([](attn::server::ServerConfig& c) { c.session_idle_timeout_s = 1.0; });
  CapturedLog log;
  spdlog::set_level(spdlog::level::info);
  SessionClient a = Client(*server_, kTokenA);
  ASSERT_TRUE(a.Create(Spec("keep")).ok());
  ASSERT_TRUE(a.Extend(Step("keep", 0, 0, 4)).ok());
  const std::string before = Snapshot(a, "keep");
  // team-a's token rotates: same name, new token.
  constexpr char kTokenA2[] = "tok-A2-77e0b94c1d";
  dir_.Write("tokens", std::string("team-a ") + kTokenA2 + "\nteam-b " + kTokenB + "\n");
  ASSERT_TRUE(server_->ReloadTokens().ok());
  EXPECT_EQ(a.Get("keep").status().code(), StatusCode::kUnauthenticated) << "the old token";
  SessionClient a2 = Client(*server_, kTokenA2);
  EXPECT_EQ(Snapshot(a2, "keep"), before) << "its sessions stay its own under the new token";
  // team-a leaves the file: no token of it works, and its session expires.
  dir_.Write("tokens", std::string("team-b ") + kTokenB + "\n");
  ASSERT_TRUE(server_->ReloadTokens().ok());
  EXPECT_EQ(a2.Get("keep").status().code(), StatusCode::kUnauthenticated);
  bool expired = false;
  for (int i = 0; i < 100 && !expired; ++i) {  // at most 10 s; 1 s idle + a check
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    expired = Metrics().find("attn_principal_sessions_expired_total{principal=\"team-a\"} 1") !=
              std::string::npos;
  }
  EXPECT_TRUE(expired) << Metrics();
  EXPECT_NE(log.Text().find("expired 1 idle KV-cache sessions of principal 'team-a'"),
            std::string::npos)
      << log.Text();
  for (const char* t : {kTokenA, kTokenA2, kTokenB})
    EXPECT_EQ(log.Text().find(t), std::string::npos);
}

TEST_F(Tenancy, AccessLinesAndMetricsNameThePrincipalNeverTheToken) {
  CapturedLog log;
  spdlog::set_level(spdlog::level::debug);
  SessionClient a = Client(*server_, kTokenA), bare = Client(*server_, kTokenBare);
  ASSERT_TRUE(a.Create(Spec("m1")).ok());
  ASSERT_TRUE(a.Extend(Step("m1", 0, 1, 1)).ok());
  EXPECT_EQ(bare.Get("m1").status().code(), StatusCode::kNotFound);
  {  // a stateless call names its principal too
    attn::client::ChannelOptions o;
    o.token = kTokenB;
    attn::client::AttentionClient c(attn::client::Connect(attn_test::Target(*server_), o));
    v1::ListModelsResponse models;
    EXPECT_TRUE(c.ListModels(&models).ok());
  }
  EXPECT_EQ(
      SessionClient(attn::client::Connect(attn_test::Target(*server_))).Get("m1").status().code(),
      StatusCode::kUnauthenticated);
  spdlog::set_level(spdlog::level::off);
  const std::string text = log.Text();
  const std::string bare_name = Sha256Prefix(kTokenBare);
  EXPECT_NE(text.find("rpc=Extend protocol=attention.v1 model=- principal=\"team-a\""),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find("rpc=GetSession protocol=attention.v1 model=- principal=\"" + bare_name + "\""),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("rpc=ListModels protocol=attention.v1 model=- principal=\"team-b\""),
            std::string::npos)
      << text;
  for (const char* t : {kTokenA, kTokenB, kTokenBare}) EXPECT_EQ(text.find(t), std::string::npos);
  const std::string m = Metrics();
  for (const std::string& line : std::vector<std::string>{
           "attn_principal_requests_total{principal=\"team-a\",rpc=\"Extend\",code=\"OK\"} 1",
           "attn_principal_requests_total{principal=\"team-a\",rpc=\"CreateSession\",code=\"OK\"} "
           "1",
           "attn_principal_requests_total{principal=\"" + bare_name +
               "\",rpc=\"GetSession\",code=\"NOT_FOUND\"} 1",
           "attn_principal_requests_total{principal=\"unauthenticated\",rpc=\"GetSession\","
           "code=\"UNAUTHENTICATED\"} 1",
           std::string("attn_principal_sessions{principal=\"team-a\"} 1")}) {
    EXPECT_NE(m.find(line), std::string::npos) << line << "\n" << m;
  }
  for (const char* t : {kTokenA, kTokenB, kTokenBare}) EXPECT_EQ(m.find(t), std::string::npos);
}

// Mutual TLS without tokens: a client certificate's subject is the principal.
TEST(TenancyTls, TheClientCertificatesSubjectIsThePrincipal) {
  ASSERT_TRUE(Pki::Get().ok()) << "openssl failed; see " << Pki::Get().File("openssl.log");
  auto F = [](const std::string& n) { return Pki::Get().File(n); };
  auto s = attn_test::StartTestServer([&](attn::server::ServerConfig& c) {
    c.tls_cert = F("server.pem");
    c.tls_key = F("server.key");
    c.tls_client_ca = F("ca.pem");
  });
  ASSERT_NE(s, nullptr);
  auto client = [&](const std::string& name) {
    attn::client::ChannelOptions o;
    o.tls_ca = F("ca.pem");
    o.tls_cert = F(name + ".pem");
    o.tls_key = F(name + ".key");
    auto ch = attn::client::OpenChannel(attn_test::Target(*s), o);
    EXPECT_TRUE(ch.ok());
    return SessionClient(*ch);
  };
  SessionClient one = client("client"), two = client("client-b");
  auto info = one.Create(Spec("tls-session"));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->owner(), "CN=attn-client");
  EXPECT_EQ(two.Get("tls-session").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(two.List()->sessions_size(), 0);
  auto other = two.Create(Spec("tls-session"));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->owner(), "CN=team-b");
  EXPECT_EQ(one.List()->sessions_size(), 1);
}

}  // namespace
