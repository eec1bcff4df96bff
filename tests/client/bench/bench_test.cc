// attention-client bench: its flags, and a short run against a real server on
// loopback that must produce a complete JSON report with no errors and no
// --verify mismatches.
#include "bench/bench.h"

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <thread>

#include "attention_server.h"
#include "attn/json.h"
#include "cli/bench_flags.h"
#include "test_server.h"

namespace attn {
namespace {

StatusOr<client::BenchConfig> Parse(std::vector<std::string> args) {
  bool help = false;
  return client::ParseBenchFlags(args, &help);
}

TEST(BenchFlags, GoodValues) {
  auto c = Parse({"--op", "attention", "--concurrency", "8", "--duration", "500ms", "--warmup=2s",
                  "--rps", "150.5", "--encoding", "values", "--seq-q", "32", "--verify",
                  "--timeout", "1m"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->op, "attention");
  EXPECT_EQ(c->concurrency, (std::vector<int>{8})) << "in open loop: the cap";
  EXPECT_DOUBLE_EQ(c->duration_s, 0.5);
  EXPECT_DOUBLE_EQ(c->warmup_s, 2);
  EXPECT_DOUBLE_EQ(c->timeout_s, 60);
  EXPECT_EQ(c->rps, (std::vector<double>{150.5}));
  EXPECT_EQ(c->encoding, client::Encoding::kValues);
  EXPECT_EQ(c->seq_k, 32) << "seq-k defaults to seq-q";
  EXPECT_TRUE(c->verify);
}

TEST(BenchFlags, BadValuesAreRejectedWithTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--op", "softmax"}, "--op: expected attention, cross, mha or health, got 'softmax'"},
      {{"--concurrency", "4,x"}, "--concurrency: expected an integer in [1, 100000], got 'x'"},
      {{"--concurrency", "0"}, "--concurrency: expected an integer in [1, 100000], got '0'"},
      {{"--duration", "fast"}, "--duration: expected a duration like 30s, 500ms or 2m, got 'fast'"},
      {{"--duration", "0s"}, "--duration: must be positive"},
      {{"--rps", "-3"}, "--rps: expected a number in [0.001, 1e+07], got '-3'"},
      {{"--connections", "0"}, "--connections: expected an integer in [1, 1024], got '0'"},
      {{"--encoding", "json"}, "--encoding: expected raw or values, got 'json'"},
      {{"--requests", "10", "--duration", "1s"}, "--requests and --duration: give one, not both"},
      {{"--op", "health", "--verify"}, "--verify: nothing to verify for --op health"},
      {{"--batch"}, "--batch: missing value"},
      {{"--bogus", "1"}, "unknown bench flag '--bogus'"},
  };
  for (const auto& [args, msg] : cases) {
    auto c = Parse(args);
    ASSERT_FALSE(c.ok()) << msg;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find(msg), std::string::npos) << c.status().message();
  }
}

TEST(BenchRun, ShortLoopbackRunGivesACompleteJsonReport) {
  auto s = attn_test::StartTestServer();
  ASSERT_NE(s, nullptr);
  client::BenchConfig c;
  c.target = attn_test::Target(*s);
  c.op = "mha";
  c.model = "demo-mha-small";
  c.seq_q = c.seq_k = 16;
  c.concurrency = {1, 4};
  c.connections = 2;
  c.duration_s = 0.7;
  c.warmup_s = 0.2;
  c.verify = true;
  std::atomic<bool> interrupt{false};
  auto report = client::RunBench(c, &interrupt);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->levels.size(), 2u);
  for (const auto& l : report->levels) {
    EXPECT_GT(l.ok, 10);
    EXPECT_EQ(l.ok, l.count);
    EXPECT_TRUE(l.errors.empty()) << l.first_error;
    EXPECT_GT(l.verified, 0);
    EXPECT_EQ(l.mismatches, 0);
    EXPECT_LE(l.min_ms, l.p50_ms);
    EXPECT_LE(l.p50_ms, l.p99_ms);
    EXPECT_LE(l.p99_ms, l.max_ms);
    EXPECT_GT(l.gflops, 0);
    EXPECT_GT(l.server_compute_ms, 0);
  }
  // The JSON has every field, and parses.
  auto json = ParseJson(client::ReportToJson(*report));
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  for (const char* key : {"workload", "flops_per_call", "interrupted", "config", "levels"}) {
    EXPECT_NE(json->Find(key), nullptr) << key;
  }
  const JsonValue& level = json->Find("levels")->array.at(1);
  for (const char* key : {"concurrency", "seconds", "count", "ok", "errors", "first_error", "rps",
                          "gflops", "latency_ms", "histogram", "server", "verify"}) {
    EXPECT_NE(level.Find(key), nullptr) << key;
  }
  for (const char* key : {"min", "mean", "p50", "p90", "p95", "p99", "max"}) {
    EXPECT_NE(level.Find("latency_ms")->Find(key), nullptr) << key;
  }
  EXPECT_EQ(level.Find("verify")->Find("mismatches")->integer, 0);
  EXPECT_EQ(level.Find("histogram")->array.size(), 10u);
  const std::string csv = client::ReportToCsv(*report);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3) << csv;  // header + 2 levels
}

// bench --op attention with a packed batch (--cu-seqlens-q/-k) and GQA
// heads, over both protocols: every call OK, --verify finds no mismatch.
TEST(BenchRun, PackedBatchOverBothProtocolsVerifies) {
  auto s = attn_test::StartTestServer();
  ASSERT_NE(s, nullptr);
  for (const char* protocol : {"native", "oip"}) {
    SCOPED_TRACE(protocol);
    auto c = Parse({"--target",
                    attn_test::Target(*s),
                    "--op",
                    "attention",
                    "--protocol",
                    protocol,
                    "--num-heads",
                    "4",
                    "--num-kv-heads",
                    "2",
                    "--dim",
                    "16",
                    "--cu-seqlens-q",
                    "0,30,30,95",
                    "--cu-seqlens-k",
                    "0,40,41,120",
                    "--causal",
                    "--causal-alignment",
                    "bottom_right",
                    "--requests",
                    "6",
                    "--verify",
                    "--no-progress"});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    std::atomic<bool> interrupt{false};
    auto report = client::RunBench(*c, &interrupt);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    ASSERT_EQ(report->levels.size(), 1u);
    const auto& l = report->levels[0];
    EXPECT_EQ(l.ok, 6) << l.first_error;
    EXPECT_GT(l.verified, 0);
    EXPECT_EQ(l.mismatches, 0);
    EXPECT_NE(report->workload.find("query[95, 4, 16]"), std::string::npos) << report->workload;
    EXPECT_NE(report->workload.find("packed=3seqs"), std::string::npos) << report->workload;
  }
}

// BFLOAT16 on the wire, left to the server's auto policy: bf16 compute on a
// CPU with a bf16 matrix tier (the answer's attn-compute-precision says so,
// and --verify allows bf16's error), float32 elsewhere. Explicit float32 is
// held to float32's error either way.
TEST(BenchRun, Bfloat16WireVerifiesWhateverTheServerComputed) {
  auto s = attn_test::StartTestServer();
  ASSERT_NE(s, nullptr);
  for (const char* protocol : {"native", "oip"}) {
    for (const char* precision : {"", "float32"}) {
      SCOPED_TRACE(std::string(protocol) + " precision=" + precision);
      std::vector<std::string> args = {"--target",    attn_test::Target(*s),
                                       "--op",        "attention",
                                       "--protocol",  protocol,
                                       "--num-heads", "4",
                                       "--dim",       "64",
                                       "--seq-q",     "300",
                                       "--dtype",     "bfloat16",
                                       "--requests",  "4",
                                       "--verify",    "--no-progress"};
      if (*precision != 0) args.insert(args.end(), {"--compute-precision", precision});
      auto c = Parse(args);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      std::atomic<bool> interrupt{false};
      auto report = client::RunBench(*c, &interrupt);
      ASSERT_TRUE(report.ok()) << report.status().ToString();
      const auto& l = report->levels[0];
      EXPECT_EQ(l.ok, 4) << l.first_error;
      EXPECT_GT(l.verified, 0);
      EXPECT_EQ(l.mismatches, 0);
    }
  }
}

// No server: each connection is waited for (the call timeout, 5 s at
// most), then a set-up error naming the target and the wait.
TEST(BenchRun, UnreachableTargetIsASetUpError) {
  client::BenchConfig c;
  c.target = "127.0.0.1:1";
  c.timeout_s = 0.3;
  auto report = client::RunBench(c, nullptr);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(report.status().message().find(
                "cannot reach 127.0.0.1:1: no connection to 127.0.0.1:1 within 300 ms"),
            std::string::npos)
      << report.status().ToString();
}

// A server that comes up after the bench started (its first connect
// attempts refused) is waited for, not reported unreachable: the bench's
// connections retry until the call timeout (5 s at most).
TEST(BenchRun, AServerUpAfterTheBenchStartsIsWaitedFor) {
  const int port = attn_test::FreeLoopbackPort();
  ASSERT_GT(port, 0);
  client::BenchConfig c;
  c.target = "127.0.0.1:" + std::to_string(port);
  c.op = "health";
  c.concurrency = {1};
  c.connections = 2;
  c.duration_s = 0.2;
  c.warmup_s = 0;
  c.timeout_s = 5;
  StatusOr<client::BenchReport> report = Status::Unknown("not run");
  std::thread bench([&] { report = client::RunBench(c, nullptr); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto s = attn_test::StartTestServer([&](server::ServerConfig& config) { config.port = port; });
  bench.join();
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_GT(report->levels[0].ok, 0);
}

TEST(BenchRun, InterruptStopsEarlyWithAPartialReport) {
  auto s = attn_test::StartTestServer();
  ASSERT_NE(s, nullptr);
  client::BenchConfig c;
  c.target = attn_test::Target(*s);
  c.op = "health";
  c.concurrency = {2, 4};
  c.duration_s = 60;
  c.warmup_s = 0;
  std::atomic<bool> interrupt{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    interrupt = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto report = client::RunBench(c, &interrupt);
  stopper.join();
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->interrupted);
  EXPECT_EQ(report->levels.size(), 1u);
  EXPECT_GT(report->levels[0].ok, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

}  // namespace
}  // namespace attn
