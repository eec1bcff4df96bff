// attention-client bench: its settings (read from the command line by
// cli/bench_flags.h, or from a --workload file by workload_file.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attention_client.h"
#include "attn/status.h"
#include "call_spec.h"
#include "host_array.h"

namespace attn::client {

struct BenchConfig;

// One entry of --workload: the calls it makes (a whole BenchConfig, of which
// only the call's fields count) and its share of the calls.
struct MixEntry {
  std::string name;
  double weight = 1;
  std::shared_ptr<const BenchConfig> call;
};

// Arrivals in open loop: evenly spaced, or a Poisson process (exponential
// gaps) at the same mean rate.
enum class Arrival { kConstant, kPoisson };

// --latency-slo p99=50ms: a statistic (p50, p90, p95, p99, mean) and a bound.
struct LatencySlo {
  std::string stat;  // empty: none
  double ms = 0;
};

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
  AttentionVariants variants;  // --causal-alignment, --window-left, ... (call_spec.h)
  int64_t padded_keys = 0;     // the last N keys of every batch row masked (key_padding_mask)
  std::string data_path;       // --data: the inputs from a .npy (query) or .json file
  Encoding encoding = Encoding::kData;
  wire::WireType dtype = wire::WireType::kFloat32;  // --dtype
  bool oip = false;                                 // --protocol oip
  std::vector<MixEntry> mix;                        // --workload: weighted entries
  std::vector<int> concurrency = {1};               // a list is a sweep, one row per level
  int connections = 1;
  int64_t requests = 0;     // measured calls per level; 0: run for `duration_s`
  double duration_s = 10;   // per level (--duration, or --step-duration)
  std::vector<double> rps;  // open loop, one level per rate (concurrency caps calls in flight)
  Arrival arrival = Arrival::kConstant;
  LatencySlo slo;
  double stability_pct = 0;  // > 0: measure in windows until 3 agree within this %
  double window_s = 5;
  int max_windows = 10;
  std::string metrics_url;  // the server's /metrics, scraped around each level
  double warmup_s = 1;
  double timeout_s = 30;  // per-call deadline
  bool verify = false;    // compare every 16th response with core, locally
  uint64_t seed = 0;
  std::string json_path, csv_path, html_path;
  bool progress = false;  // a live line on stderr (default: when it is a TTY)
};

// Open loop (--rps): the calls in flight are capped at the one
// --concurrency value, or at this without one.
constexpr int kOpenLoopCap = 1024;

}  // namespace attn::client
