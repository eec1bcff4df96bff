// bench --op decode: the decode workload of an LLM engine that offloads
// attention to this server. --concurrency N independent clients (each its
// own channel and its own --sessions S sessions) step at once; each client
// sends one Extend a step carrying its S sessions' new tokens (continuous
// batching), and a token is --num-layers L steps, one per layer, in order.
// Every session is first prefilled with P tokens in every layer; with
// --hold-length each token is followed by a truncate back to P, so that a
// run measures one context length. The report gives the aggregate
// session-steps/s, the per-step and per-token latencies (p50, p90, p99),
// tokens/s, the mean cache length the measured steps attended over, the
// cache bytes those steps read (at each step's actual length) per second
// against a plain memory read measured here first, and the memory-bound
// limit of a token at the cache as it stands; --verify recomputes every
// 16th layer-0 step with core over a local replay of the tokens.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "attention/v1/attention.pb.h"
#include "attention/v1/session.pb.h"
#include "attention_client.h"
#include "attn/status.h"
#include "bench/report/bench_report.h"
#include "wire/tensor_codec.h"

namespace attn::client {

struct DecodeBenchConfig {
  std::string target;
  ChannelOptions channel;
  std::chrono::milliseconds timeout{30000};
  int64_t concurrency = 1;  // independent clients, each with its own sessions
  int64_t sessions = 8, prefill = 1024, step_tokens = 1, layers = 1;  // sessions: per client
  int64_t hq = 32, hkv = 8, d = 128;
  attention::v1::DataType cache_dtype = attention::v1::DATA_TYPE_BFLOAT16;
  // --key-format, --value-format (UNSPECIFIED: as cache_dtype)
  attention::v1::CacheFormat key_format = attention::v1::CACHE_FORMAT_UNSPECIFIED;
  attention::v1::CacheFormat value_format = attention::v1::CACHE_FORMAT_UNSPECIFIED;
  wire::WireType wire = wire::WireType::kFloat32;  // --dtype: the steps' tensors
  bool hold_length = false;                        // truncate back to `prefill` after each token
  double duration_s = 10, warmup_s = 1;
  int64_t requests = 0;  // measured Extend calls per client (whole tokens) instead of --duration
  bool verify = false;
  uint32_t seed = 0;
  std::string json_path, html_path;
};

struct DecodeReport {
  DecodeBenchConfig config;
  MachineInfo machine;
  // Measured work, every client together.
  int64_t steps = 0;          // Extend calls
  int64_t session_steps = 0;  // steps x the sessions each carried
  int64_t tokens = 0;         // tokens generated: token rounds x sessions x step tokens
  int64_t token_rounds = 0;   // a client's token: one step on every layer
  double seconds = 0;         // wall time of the measurement (all clients)
  double call_seconds = 0;    // the clients' time in measured Extend calls, summed
  // Rates: each client's work over its own time in Extend calls, summed
  // over the clients (truncates and verification are not in it).
  double session_steps_per_s = 0, tokens_per_s = 0, cache_gbps = 0;
  double step_p50_ms = 0, step_p90_ms = 0, step_p99_ms = 0;
  double token_p50_ms = 0, token_p90_ms = 0, token_p99_ms = 0;
  double cache_bytes = 0;        // K/V bytes the measured steps read, at their lengths
  double mean_cache_tokens = 0;  // the length a measured step attended over, on average
  double memory_read_gbps = 0;   // the plain read measured before the load
  std::vector<double> token_ms;  // every measured token's latency, for the report's histogram
  // What the server held at the end, read back before the sessions are
  // deleted: every client's sessions' tokens per layer.
  std::vector<std::vector<int64_t>> final_layer_tokens;
  int64_t errors = 0, mismatches = 0, verified = 0;
  std::string first_error;

  // One client's token at the mean length: the bytes its L steps read.
  double bytes_per_token() const;
  // The memory-bound limits at the measured read rate: one client's ms per
  // token, and the tokens/s of every client together.
  double limit_ms_per_token() const;
  double limit_tokens_per_s() const;
  double wall_session_steps_per_s() const { return seconds > 0 ? session_steps / seconds : 0; }
};

// Runs it; the sessions it made are deleted at the end. Stops early when
// *interrupt turns true.
StatusOr<DecodeReport> RunDecodeBench(const DecodeBenchConfig& c,
                                      const std::atomic<bool>* interrupt);

std::string DecodeReportText(const DecodeReport& r);
std::string DecodeReportJson(const DecodeReport& r);
// A self-contained page (inline CSS and SVG, no scripts).
std::string DecodeReportHtml(const DecodeReport& r);

}  // namespace attn::client
