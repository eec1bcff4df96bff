// attention-client bench: its settings, from the shared flag table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attention_client.h"
#include "attn/status.h"
#include "flags.h"
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
  wire::WireType dtype = wire::WireType::kFloat32;  // --dtype
  bool oip = false;                                 // --protocol oip
  std::vector<int> concurrency = {1};               // a list is a sweep, one row per level
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

// The bench's settings from its command line (flags.h): INVALID_ARGUMENT
// naming the flag for a bad value or a contradiction.
StatusOr<BenchConfig> BenchConfigFromFlags(const CommandLine& cl);

// Parses the flags after "bench" (tests). Sets *help for --help.
StatusOr<BenchConfig> ParseBenchFlags(const std::vector<std::string>& args, bool* help);

}  // namespace attn::client
