// attention-client bench: what a run measured, and its text, CSV and JSON
// forms.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_config.h"
#include "bench/client_cpu.h"
#include "bench/metrics_scrape.h"
#include "bench/report/bench_stats.h"

namespace attn::client {

// One --workload entry's calls within a level.
struct EntryReport {
  std::string name, workload;  // workload: e.g. "mha demo-mha-small query[1, 16, 64]"
  double weight = 1, gflops = 0;
  LatencySummary s;
};

struct LevelReport {
  int concurrency = 0;    // closed loop: calls in flight; open loop: the cap
  double target_rps = 0;  // open loop: the scheduled rate (0: closed loop)
  double seconds = 0;
  int64_t count = 0, ok = 0;
  std::map<std::string, int64_t> errors;  // by gRPC code name
  std::string first_error;                // "CODE: message" of the first failed call
  double rps = 0, gflops = 0;
  double min_ms = 0, mean_ms = 0, p50_ms = 0, p90_ms = 0, p95_ms = 0, p99_ms = 0, max_ms = 0;
  std::vector<std::pair<double, int64_t>> histogram;  // (upper bound ms, count)
  double server_queue_ms = 0, server_compute_ms = 0;  // means, from trailing metadata
  int64_t verified = 0, mismatches = 0;
  int64_t response_bytes = 0;  // serialized, of an OK answer (0: none)
  // Open loop: calls sent over 1 ms after their scheduled time, and calls
  // never sent because --concurrency calls were in flight; the worst lag.
  int64_t late = 0, dropped = 0;
  double max_lag_ms = 0;
  double first_tenth_ms = 0, last_tenth_ms = 0;  // see LatencySummary
  std::vector<EntryReport> entries;              // with --workload
  std::vector<LatencySummary> windows;           // with --stability
  bool stable = false;                           // the last 3 windows agreed
  ClientCpu client;
  ServerView server;  // with --metrics-url
};

struct MachineInfo {
  std::string cpu_model, kernel_tier, onednn_isa;
  int cpus = 0;  // the client's
};

struct BenchReport {
  BenchConfig config;
  std::string workload;       // e.g. "mha demo-mha-small query[1, 16, 64]"
  double flops_per_call = 0;  // of the attention math
  int64_t request_bytes = 0;  // serialized, per call
  std::vector<LevelReport> levels;
  bool interrupted = false;
  MachineInfo machine;
  int knee = -1;  // with --latency-slo: the last level that met it (-1: none)
};

// "concurrency 8" or "rate 200.0/s".
std::string LevelName(const LevelReport& l);
MachineInfo DescribeMachine();
// The level that met config.slo with no errors, the last such before the
// first that did not; -1 when none did.
int FindKnee(const BenchReport& report);
std::string ReportToHtml(const BenchReport& report);
// Text made safe inside HTML elements and attribute values.
std::string HtmlEscape(const std::string& s);

std::string ReportToJson(const BenchReport& report);
std::string ReportToCsv(const BenchReport& report);
std::string ReportToText(const BenchReport& report);

}  // namespace attn::client
