// attention-client bench, second pass (issue 15): ranges, open loop with
// arrivals and a backlog, --workload mixes, --data, --latency-slo's knee,
// --stability windows, the client's own CPU and --metrics-url, each against
// a real server on loopback. Every run is bounded by its duration or window
// count, and no bound below is a wall-clock time.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <fstream>

#include "attention_server.h"
#include "attn/json.h"
#include "bench/bench.h"
#include "bench/workload_file.h"
#include "cli/bench_flags.h"
#include "status_matchers.h"
#include "test_server.h"

namespace attn {
namespace {

StatusOr<client::BenchConfig> Parse(std::vector<std::string> args) {
  bool help = false;
  return client::ParseBenchFlags(args, &help);
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(BenchModeFlags, RangesRatesAndTheNewFlags) {
  auto c = Parse({"--concurrency", "1:9:4", "--step-duration", "2s", "--latency-slo", "p99=50ms",
                  "--stability", "10", "--window", "1s", "--max-windows", "6", "--metrics-url",
                  "http://127.0.0.1:9090/metrics", "--html", "r.html", "--padded-keys", "3"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->concurrency, (std::vector<int>{1, 5, 9}));
  EXPECT_DOUBLE_EQ(c->duration_s, 2);
  EXPECT_EQ(c->slo.stat, "p99");
  EXPECT_DOUBLE_EQ(c->slo.ms, 50);
  EXPECT_DOUBLE_EQ(c->stability_pct, 10);
  EXPECT_DOUBLE_EQ(c->window_s, 1);
  EXPECT_EQ(c->max_windows, 6);
  EXPECT_EQ(c->metrics_url, "http://127.0.0.1:9090/metrics");
  EXPECT_EQ(c->html_path, "r.html");
  EXPECT_EQ(c->padded_keys, 3);
  c = Parse({"--rps", "100:300:100", "--arrival", "poisson"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rps, (std::vector<double>{100, 200, 300}));
  EXPECT_EQ(c->arrival, client::Arrival::kPoisson);
  EXPECT_EQ(c->concurrency, (std::vector<int>{client::kOpenLoopCap}));
  c = Parse({"--rps", "50,75.5", "--concurrency", "16"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rps, (std::vector<double>{50, 75.5}));
  EXPECT_EQ(c->concurrency, (std::vector<int>{16}));
}

TEST(BenchModeFlags, BadValuesAreRejectedWithTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--concurrency", "1:8"}, "--concurrency: expected N, a list N,N,... or a range"},
      {{"--concurrency", "8:1:1"}, "--concurrency: a range START:END:STEP needs START <= END"},
      {{"--concurrency", "1:100000:1"}, "at most 1000 steps"},
      {{"--concurrency", "1.5"}, "--concurrency: expected an integer in [1, 100000], got '1.5'"},
      {{"--rps", "0"}, "--rps: expected a number in [0.001, 1e+07], got '0'"},
      {{"--rps", "10", "--concurrency", "1,2"}, "--rps with a --concurrency list"},
      {{"--arrival", "bursty", "--rps", "5"}, "--arrival: expected constant or poisson"},
      {{"--arrival", "poisson"}, "--arrival: only with --rps"},
      {{"--latency-slo", "p42=5ms"}, "--latency-slo: expected STAT=DURATION"},
      {{"--latency-slo", "p99=soon"}, "--latency-slo: expected a duration"},
      {{"--latency-slo", "p99=0s"}, "--latency-slo: the bound must be positive"},
      {{"--stability", "0"}, "--stability: expected a number in [0.1, 100], got '0'"},
      {{"--stability", "5", "--requests", "10"}, "--stability and --requests"},
      {{"--max-windows", "2"}, "--max-windows: expected an integer in [3, 1000]"},
      {{"--window", "0s"}, "--window: must be positive"},
      {{"--duration", "1s", "--step-duration", "2s"}, "--duration and --step-duration"},
      {{"--metrics-url", "localhost:9090"}, "--metrics-url: expected http://HOST:PORT/metrics"},
      {{"--padded-keys", "-1"}, "--padded-keys: expected an integer"},
      {{"--data", ""}, "--data: expected a file, got ''"},
      {{"--workload", "/nonexistent/w.json"}, "--workload /nonexistent/w.json: cannot read"},
  };
  for (const auto& [args, msg] : cases) attn_test::ExpectInvalid(Parse(args), msg);
}

TEST(BenchWorkloadFile, JsonAndYamlGiveTheSameEntries) {
  const std::string json = WriteFile("w.json", R"([
    {"name": "small", "weight": 70, "op": "mha", "model": "demo-mha-small", "seq_q": 16},
    {"name": "cross", "weight": 20, "op": "cross", "model": "demo-cross-attention",
     "seq_q": 128, "encoding": "values"},
    {"weight": 10, "op": "attention", "seq_q": 2048, "num_heads": 8, "causal": true,
     "dtype": "float16", "padded_keys": 5, "protocol": "oip"}])");
  const std::string yaml = WriteFile("w.yaml", R"(workload:
  - {name: small, weight: 70, op: mha, model: demo-mha-small, seq_q: 16}
  - name: cross
    weight: 20
    op: cross
    model: demo-cross-attention
    seq_q: 128
    encoding: values
  - {weight: 10, op: attention, seq_q: 2048, num_heads: 8, causal: true, dtype: float16,
     padded_keys: 5, protocol: oip}
)");
  for (const std::string& path : {json, yaml}) {
    auto c = Parse({"--workload", path, "--dim", "32"});
    ASSERT_TRUE(c.ok()) << path << ": " << c.status().ToString();
    ASSERT_EQ(c->mix.size(), 3u) << path;
    EXPECT_EQ(c->mix[0].name, "small");
    EXPECT_DOUBLE_EQ(c->mix[0].weight, 70);
    EXPECT_EQ(c->mix[0].call->model, "demo-mha-small");
    EXPECT_EQ(c->mix[0].call->seq_k, 16) << "seq_k defaults to the entry's seq_q";
    EXPECT_EQ(c->mix[1].call->encoding, client::Encoding::kValues);
    EXPECT_EQ(c->mix[2].name, "attention") << "a name from the op";
    EXPECT_EQ(c->mix[2].call->heads, 8);
    EXPECT_EQ(c->mix[2].call->dim, 32) << "the command line's flags are the defaults";
    EXPECT_TRUE(c->mix[2].call->causal);
    EXPECT_TRUE(c->mix[2].call->oip);
    EXPECT_EQ(c->mix[2].call->padded_keys, 5);
    EXPECT_EQ(c->mix[2].call->dtype, wire::WireType::kFloat16);
  }
}

TEST(BenchWorkloadFile, BadEntriesNameTheEntryAndTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"([{"op": "mha", "heads": 4}])", "entry 0.heads: unknown key"},
      {R"([{"op": "softmax"}])", "entry 0.op: expected attention|cross|mha|health"},
      {R"([{"op": "mha"}, {"op": "mha", "weight": 0}])", "entry 1.weight: expected a positive"},
      {R"([{"seq_q": 0}])", "entry 0.seq_q: expected an integer in [1, 16777216]"},
      {R"([{"causal": "yes"}])", "entry 0.causal: expected true or false"},
      {R"([{"name": "a"}, {"name": "a"}])", "entry 1: the name 'a' is taken"},
      {R"([])", "expected a non-empty list of entries"},
      {R"({"entries": []})", "expected a non-empty list of entries"},
      {R"([{"op": "mha",)", "--workload"},
  };
  for (const auto& [text, msg] : cases) {
    SCOPED_TRACE(text);
    attn_test::ExpectInvalid(Parse({"--workload", WriteFile("bad.json", text)}), msg);
  }
  attn_test::ExpectInvalid(Parse({"--workload", WriteFile("bad.yaml", "- {op: mha\n- ]")}),
                           "not valid YAML");
}

client::BenchConfig Base(const server::AttentionServer& s) {
  client::BenchConfig c;
  c.target = attn_test::Target(s);
  c.warmup_s = 0.2;
  c.duration_s = 1;
  return c;
}

TEST(BenchModes, WorkloadMixGivesARowPerEntryInItsShare) {
  auto s = attn_test::StartTestServer();
  ASSERT_NE(s, nullptr);
  client::BenchConfig c = Base(*s);
  c.verify = true;
  auto mix = client::WorkloadFromJson(*ParseJson(R"([
      {"name": "small", "weight": 6, "op": "mha", "model": "demo-mha-small", "seq_q": 16},
      {"name": "cross", "weight": 3, "op": "cross", "model": "demo-cross-attention", "seq_q": 32},
      {"name": "sdpa", "weight": 1, "op": "attention", "seq_q": 64, "num_heads": 2,
       "causal": true, "padded_keys": 7, "dtype": "float16", "protocol": "oip"}])"),
                                      c, "test");
  ASSERT_TRUE(mix.ok()) << mix.status().ToString();
  c.mix = *mix;
  c.concurrency = {2};
  auto report = client::RunBench(c, nullptr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const client::LevelReport& l = report->levels.at(0);
  ASSERT_EQ(l.entries.size(), 3u);
  EXPECT_TRUE(l.errors.empty()) << l.first_error;
  EXPECT_GT(l.verified, 0);
  EXPECT_EQ(l.mismatches, 0);
  int64_t sum = 0;
  for (const auto& e : l.entries) {
    EXPECT_GT(e.s.ok, 5) << e.name;
    EXPECT_TRUE(e.s.errors.empty()) << e.name;
    sum += e.s.ok;
  }
  EXPECT_EQ(sum, l.ok);
  // Shares near 60/30/10 (thousands of calls: far inside these bounds).
  EXPECT_NEAR(static_cast<double>(l.entries[0].s.ok) / sum, 0.6, 0.1);
  EXPECT_NEAR(static_cast<double>(l.entries[2].s.ok) / sum, 0.1, 0.07);
  EXPECT_NE(l.entries[2].workload.find("padded_keys=7"), std::string::npos);
  auto json = ParseJson(client::ReportToJson(*report));
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  EXPECT_EQ(json->Find("levels")->array.at(0).Find("entries")->array.size(), 3u);
}

TEST(BenchModes, DataFileInputsAreSentAndVerified) {
  auto s = attn_test::StartTestServer();
  ASSERT_NE(s, nullptr);
  client::BenchConfig c = Base(*s);
  c.op = "attention";
  c.verify = true;
  c.data_path = WriteFile("seed.json", R"({"query": [[1, 0], [0, 1], [1, 1], [1, 1], [0.5, 1]]})");
  auto report = client::RunBench(c, nullptr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_NE(report->workload.find("query[5, 2]"), std::string::npos) << report->workload;
  EXPECT_GT(report->levels[0].verified, 0);
  EXPECT_EQ(report->levels[0].mismatches, 0);
  c.data_path = WriteFile("bad.json", R"({"query": [[1, 0]], "mask": [1]})");
  auto bad = client::RunBench(c, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown member \"mask\""), std::string::npos)
      << bad.status().message();
}

TEST(BenchModes, OpenLoopPastWhatTheServerSustainsShowsLateCallsAndGrowingLatency) {
  auto s = attn_test::StartTestServer([](server::ServerConfig& c) { c.threads = 1; });
  ASSERT_NE(s, nullptr);
  client::BenchConfig c = Base(*s);
  c.op = "attention";
  c.seq_q = c.seq_k = 512, c.dim = 64, c.heads = 4;
  c.concurrency = {2};
  auto closed = client::RunBench(c, nullptr);  // what it sustains, measured here
  ASSERT_TRUE(closed.ok()) << closed.status().ToString();
  const double capacity = closed->levels[0].rps;
  ASSERT_GT(capacity, 5);
  c.rps = {3 * capacity};
  c.concurrency = {2};  // the cap: the rest waits in the client's backlog
  c.duration_s = 1.5;
  c.warmup_s = 0;  // measured from an empty backlog
  auto open = client::RunBench(c, nullptr);
  ASSERT_TRUE(open.ok()) << open.status().ToString();
  const client::LevelReport& l = open->levels.at(0);
  EXPECT_TRUE(l.errors.empty()) << l.first_error;
  EXPECT_GT(l.late + l.dropped, l.ok) << "most calls could not go out on time";
  EXPECT_GT(l.late, 0);
  // Latency counts from the schedule, so it grows as the backlog does.
  EXPECT_GT(l.last_tenth_ms, 3 * l.first_tenth_ms)
      << "first " << l.first_tenth_ms << " ms, last " << l.last_tenth_ms << " ms";
  EXPECT_LT(l.rps, 0.8 * c.rps[0]) << "the server did not keep up";
  // At a third of it, the same schedule is met.
  c.rps = {capacity / 3};
  auto easy = client::RunBench(c, nullptr);
  ASSERT_TRUE(easy.ok());
  EXPECT_EQ(easy->levels[0].dropped, 0);
  EXPECT_LT(easy->levels[0].last_tenth_ms, 3 * easy->levels[0].first_tenth_ms + 5);
}

TEST(BenchModes, SloKneeIsTheLastLevelThatMetIt) {
  auto s = attn_test::StartTestServer([](server::ServerConfig& c) { c.threads = 1; });
  ASSERT_NE(s, nullptr);
  client::BenchConfig c = Base(*s);
  c.op = "attention";
  c.seq_q = c.seq_k = 512, c.dim = 64, c.heads = 4;
  c.concurrency = {1, 8};
  c.duration_s = 0.7;
  auto report = client::RunBench(c, nullptr);
  ASSERT_TRUE(report.ok());
  // A bound between the two levels' p50s: met at 1, not at 8 (8 calls share
  // one CPU, so each waits for about 7 others).
  const double p1 = report->levels[0].p50_ms, p8 = report->levels[1].p50_ms;
  ASSERT_GT(p8, 2 * p1);
  c.slo = {"p50", (p1 + p8) / 2};
  report->config = c;
  EXPECT_EQ(client::FindKnee(*report), 0);
  report->config.slo = {"p50", p8 * 2};
  EXPECT_EQ(client::FindKnee(*report), 1);
  report->config.slo = {"p50", p1 / 10};
  EXPECT_EQ(client::FindKnee(*report), -1);
}

TEST(BenchModes, StabilityConvergesOnASteadyServerAndScrapesItsMetrics) {
  auto s = attn_test::StartTestServer([](server::ServerConfig& c) { c.metrics_port = 0; });
  ASSERT_NE(s, nullptr);
  client::BenchConfig c = Base(*s);
  c.model = "demo-mha-small";
  c.seq_q = c.seq_k = 16;
  c.concurrency = {2};
  c.stability_pct = 25;
  c.window_s = 0.5;
  c.max_windows = 12;
  c.metrics_url = "http://127.0.0.1:" + std::to_string(s->metrics_port()) + "/metrics";
  auto report = client::RunBench(c, nullptr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const client::LevelReport& l = report->levels.at(0);
  EXPECT_TRUE(l.stable) << l.windows.size() << " windows";
  EXPECT_GE(l.windows.size(), 3u);
  EXPECT_LE(l.windows.size(), 12u);
  EXPECT_NEAR(l.seconds, 1.5, 1e-6) << "the three stable windows";
  // The server's view of the same level: its OK count covers the client's.
  ASSERT_TRUE(l.server.scraped) << l.server.error;
  EXPECT_GE(l.server.by_code.at("OK"), static_cast<double>(l.ok));
  EXPECT_GT(l.server.compute_mean_ms, 0);
  EXPECT_GT(l.server.rss_mib, 1);
  // The client watched itself.
  EXPECT_GT(l.client.cpus_used, 0);
  EXPECT_GE(l.client.cpus_available, 1);
  EXPECT_FALSE(l.client.busiest.empty());
  EXPECT_GE(l.client.machine_idle, 0);
  EXPECT_LE(l.client.machine_idle, 1);
  auto json = ParseJson(client::ReportToJson(*report));
  ASSERT_TRUE(json.ok());
  const JsonValue& level = json->Find("levels")->array.at(0);
  for (const char* key : {"client", "server_metrics", "windows", "stable", "late", "dropped"}) {
    EXPECT_NE(level.Find(key), nullptr) << key;
  }
  EXPECT_NE(level.Find("client")->Find("saturated"), nullptr);
  EXPECT_NE(json->Find("machine")->Find("kernel_tier"), nullptr);
}

TEST(BenchModes, UnreachableMetricsUrlIsReportedNotFatal) {
  auto s = attn_test::StartTestServer();
  ASSERT_NE(s, nullptr);
  client::BenchConfig c = Base(*s);
  c.op = "health";
  c.duration_s = 0.3;
  c.metrics_url = "http://127.0.0.1:1/metrics";
  auto report = client::RunBench(c, nullptr);
  ASSERT_TRUE(report.ok());
  EXPECT_FALSE(report->levels[0].server.scraped);
  EXPECT_NE(report->levels[0].server.error.find("127.0.0.1:1"), std::string::npos)
      << report->levels[0].server.error;
}

}  // namespace
}  // namespace attn
