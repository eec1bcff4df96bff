// bench --op decode against a real server: --concurrency clients each with
// their own sessions, a token as --num-layers steps, --hold-length, and the
// figures computed from the lengths the steps really attended over. Each
// figure is checked against what the server itself counted (/metrics) and
// read back (every session's tokens per layer before the bench deletes it),
// and against the arithmetic of the run's lengths.
#include "bench/decode/decode_bench.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <sstream>

#include "test_server.h"

namespace {

using attn::client::DecodeBenchConfig;
using attn::client::DecodeReport;

// The value of the unlabelled metric `name` in a /metrics text, or -1.
double Metric(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return -1;
}

class DecodeBench : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = attn_test::StartTestServer([](attn::server::ServerConfig& c) { c.metrics_port = 0; });
    ASSERT_NE(server_, nullptr);
  }

  DecodeBenchConfig Config() const {
    DecodeBenchConfig c;
    c.target = attn_test::Target(*server_);
    c.hq = 4, c.hkv = 2, c.d = 16;
    c.cache_dtype = attention::v1::DATA_TYPE_FLOAT32;
    c.warmup_s = 0;
    return c;
  }

  std::string Scrape() {
    httplib::Client http("127.0.0.1", server_->metrics_port());
    auto r = http.Get("/metrics");
    EXPECT_TRUE(r && r->status == 200);
    return r ? r->body : "";
  }

  std::unique_ptr<attn::server::AttentionServer> server_;
};

// Bytes of K and V a step of `sessions` reads at `length` tokens.
double StepBytes(const DecodeBenchConfig& c, double sessions, double length) {
  return sessions * length * static_cast<double>(c.hkv * 2 * c.d) * 4;
}

TEST_F(DecodeBench, ClientsEachStepTheirOwnSessionsOnEveryLayer) {
  DecodeBenchConfig c = Config();
  c.concurrency = 3, c.sessions = 2, c.layers = 2, c.prefill = 5;
  c.requests = 4;  // Extend calls per client: 2 tokens of 2 layers
  c.verify = true;
  auto r = RunDecodeBench(c, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->errors, 0) << r->first_error;
  EXPECT_EQ(r->mismatches, 0);
  EXPECT_GT(r->verified, 0);
  EXPECT_EQ(r->steps, 3 * 4);
  EXPECT_EQ(r->session_steps, 3 * 4 * 2);
  EXPECT_EQ(r->token_rounds, 3 * 2);
  EXPECT_EQ(r->tokens, 3 * 2 * 2);
  EXPECT_EQ(r->token_ms.size(), 6u);
  // The first token's steps attend over 6 tokens, the second's over 7.
  EXPECT_DOUBLE_EQ(r->mean_cache_tokens, 6.5);
  EXPECT_DOUBLE_EQ(r->cache_bytes, 3 * 2 * (StepBytes(c, 2, 6) + StepBytes(c, 2, 7)));
  EXPECT_DOUBLE_EQ(r->bytes_per_token(), 2 * StepBytes(c, 2, 6.5));
  EXPECT_GT(r->token_p50_ms, 0);
  EXPECT_GE(r->token_p99_ms, r->token_p50_ms);
  EXPECT_GE(r->token_p50_ms, r->step_p50_ms) << "a token is two steps";
  // What the server holds and counted: 6 sessions (3 clients x 2), every
  // layer stepped twice after its prefill of 5.
  ASSERT_EQ(r->final_layer_tokens.size(), 6u);
  for (const auto& layers : r->final_layer_tokens) EXPECT_EQ(layers, (std::vector<int64_t>{7, 7}));
  const std::string m = Scrape();
  EXPECT_EQ(Metric(m, "attn_session_tokens_appended_total"), 3 * 2 * 2 * 7);
  EXPECT_EQ(Metric(m, "attn_sessions"), 0) << "the bench deletes its sessions";
  EXPECT_EQ(server_->sessions().num_sessions(), 0);
}

TEST_F(DecodeBench, HoldLengthMeasuresOneContextLength) {
  DecodeBenchConfig c = Config();
  c.concurrency = 2, c.sessions = 1, c.layers = 3, c.prefill = 9;
  c.requests = 9;  // 3 tokens of 3 layers
  c.hold_length = true;
  c.verify = true;
  auto r = RunDecodeBench(c, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->errors, 0) << r->first_error;
  EXPECT_EQ(r->mismatches, 0);
  EXPECT_EQ(r->token_rounds, 2 * 3);
  EXPECT_DOUBLE_EQ(r->mean_cache_tokens, 10) << "every step over the prefill and its token";
  EXPECT_DOUBLE_EQ(r->cache_bytes, 2 * 3 * 3 * StepBytes(c, 1, 10));
  ASSERT_EQ(r->final_layer_tokens.size(), 2u);
  for (const auto& layers : r->final_layer_tokens) {
    EXPECT_EQ(layers, (std::vector<int64_t>{9, 9, 9})) << "truncated back after each token";
  }
  const std::string m = Scrape();
  EXPECT_EQ(Metric(m, "attn_session_truncations_total"), 2 * 3);
  EXPECT_EQ(Metric(m, "attn_session_tokens_appended_total"), 2 * 3 * (9 + 3));
}

TEST_F(DecodeBench, ReportsCarryTheFigures) {
  DecodeBenchConfig c = Config();
  c.concurrency = 2, c.sessions = 1, c.layers = 2, c.prefill = 3, c.requests = 2;
  auto r = RunDecodeBench(c, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::string json = DecodeReportJson(*r), html = DecodeReportHtml(*r),
                    text = DecodeReportText(*r);
  for (const char* key :
       {"\"concurrency\":2", "\"layers\":2", "\"hold_length\":false", "\"mean_cache_tokens\":4",
        "\"token_p50_ms\":", "\"token_p99_ms\":", "\"step_p99_ms\":", "\"tokens_per_s\":",
        "\"session_steps_per_s\":", "\"limit_ms_per_token\":", "\"bytes_per_token\":"}) {
    EXPECT_NE(json.find(key), std::string::npos) << key << " in " << json;
  }
  for (const char* key : {"id=\"figures\"", "ms per token (2 layer steps)", "memory-bound limit",
                          "mean cache length", "<svg id=\"token-latency\""}) {
    EXPECT_NE(html.find(key), std::string::npos) << key;
  }
  EXPECT_NE(text.find("2 client(s) x 1 session(s)"), std::string::npos) << text;
  EXPECT_NE(text.find("mean cache length of the measured steps: 4.0 tokens"), std::string::npos)
      << text;
}

// A target nobody listens on: the bench says so, naming the target, once
// the call timeout has passed (each connection is awaited before the
// first call, so that a connect attempt that fails once is retried).
TEST(DecodeBenchConnect, NoServerIsUnavailableNamingTheTarget) {
  const int port = attn_test::FreeLoopbackPort();  // no server there
  ASSERT_GT(port, 0);
  DecodeBenchConfig c;
  c.target = "127.0.0.1:" + std::to_string(port);
  c.hq = 4, c.hkv = 2, c.d = 16;
  c.concurrency = 1, c.sessions = 1, c.requests = 1;
  c.warmup_s = 0;
  c.timeout = std::chrono::milliseconds(300);
  auto r = attn::client::RunDecodeBench(c, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), attn::StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("no connection to " + c.target + " within 300 ms"),
            std::string::npos)
      << r.status().ToString();
}

}  // namespace
