// attention-client bench: a load generator for attention-server, in the
// spirit of ghz and Triton's perf_analyzer. Closed loop at a fixed number of
// calls in flight (or open loop at a fixed rate), over one or more
// connections, with warm-up, a concurrency sweep, latency percentiles and a
// histogram, the server's queue/compute split (from trailing metadata),
// GFLOP/s of attention math, and --verify against a local core computation.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "attention_client.h"
#include "attn/status.h"
#include "host_array.h"

namespace attn::client {

struct BenchConfig {
  std::string target = "localhost:50051";
  // --max-message-mb, --retry, --tls, --tls-ca, --tls-cert, --tls-key and
  // --token-file (or ATTN_TOKEN).
  ChannelOptions channel;
  std::string op = "mha";  // attention | cross | mha | health
  std::string model;       // server-side weights; else inline shapes
  // Inline shapes (and the input sizes with --model: batch, seq_q, seq_k).
  int64_t batch = 1, seq_q = 128, seq_k = 0 /* = seq_q */, dim = 64, heads = 1;
  bool causal = false;
  Encoding encoding = Encoding::kData;
  std::vector<int> concurrency = {1};  // a list is a sweep, one row per level
  int connections = 1;
  int64_t requests = 0;  // measured calls per level; 0: run for `duration_s`
  double duration_s = 10;
  double rps = 0;  // > 0: open loop at this rate (concurrency caps calls in flight)
  double warmup_s = 1;
  double timeout_s = 30;  // per-call deadline
  bool verify = false;    // compare every 16th response with core, locally
  uint64_t seed = 0;
  std::string json_path, csv_path;
  bool progress = false;  // a live line on stderr (default: when it is a TTY)
};

// Parses the flags after "bench". Bad values get INVALID_ARGUMENT naming the
// flag. Sets *help for --help.
StatusOr<BenchConfig> ParseBenchFlags(const std::vector<std::string>& args, bool* help);
std::string BenchUsage();

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
};

struct BenchReport {
  BenchConfig config;
  std::string workload;       // e.g. "mha demo-mha-small query[1, 16, 64]"
  double flops_per_call = 0;  // of the attention math
  std::vector<LevelReport> levels;
  bool interrupted = false;
};

// Runs the configured load. Stops early (with a partial report) when
// *interrupt becomes true. Fails only on set-up errors (unreachable target,
// unknown model, ...), never because calls failed: those are counted.
StatusOr<BenchReport> RunBench(const BenchConfig& config, const std::atomic<bool>* interrupt);

std::string ReportToJson(const BenchReport& report);
std::string ReportToCsv(const BenchReport& report);
std::string ReportToText(const BenchReport& report);

}  // namespace attn::client
