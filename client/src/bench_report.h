// attention-client bench: what a run measured, and its text, CSV and JSON
// forms.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bench_config.h"

namespace attn::client {

struct LevelReport {
  int concurrency = 0;
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
};

struct BenchReport {
  BenchConfig config;
  std::string workload;       // e.g. "mha demo-mha-small query[1, 16, 64]"
  double flops_per_call = 0;  // of the attention math
  int64_t request_bytes = 0;  // serialized, per call
  std::vector<LevelReport> levels;
  bool interrupted = false;
};

std::string ReportToJson(const BenchReport& report);
std::string ReportToCsv(const BenchReport& report);
std::string ReportToText(const BenchReport& report);

}  // namespace attn::client
