// bench --op decode: the decode workload of an LLM engine that offloads
// attention to this server. N sessions are created and prefilled with P
// tokens, then stepped together, one Extend a step carrying every
// session's n new tokens (continuous batching), until --duration or
// --requests. The report gives tokens/s and steps/s, the latency of a step,
// and the cache bytes each step reads per second against a plain memory
// read measured here first (on loopback, the server's machine); --verify
// recomputes every 16th step with core over a local replay of the tokens.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "attention/v1/attention.pb.h"
#include "attention_client.h"
#include "attn/status.h"
#include "bench/report/bench_report.h"
#include "wire/tensor_codec.h"

namespace attn::client {

struct DecodeBenchConfig {
  std::string target;
  ChannelOptions channel;
  std::chrono::milliseconds timeout{30000};
  int64_t sessions = 8, prefill = 1024, step_tokens = 1, layers = 1;
  int64_t hq = 32, hkv = 8, d = 128;
  attention::v1::DataType cache_dtype = attention::v1::DATA_TYPE_BFLOAT16;
  wire::WireType wire = wire::WireType::kFloat32;  // --dtype: the steps' tensors
  double duration_s = 10, warmup_s = 1;
  int64_t requests = 0;  // steps measured instead of --duration
  bool verify = false;
  uint32_t seed = 0;
  std::string json_path;
};

struct DecodeReport {
  DecodeBenchConfig config;
  MachineInfo machine;
  int64_t steps = 0, tokens = 0;  // Extend calls, and tokens appended over every session
  double seconds = 0;             // wall time of the measured steps
  double call_seconds = 0;        // the measured Extend calls' own time (the cache rate's)
  double p50_ms = 0, p90_ms = 0, p99_ms = 0;
  double cache_bytes = 0;       // K/V bytes the measured steps read
  double memory_read_gbps = 0;  // the plain read measured before the load
  int64_t errors = 0, mismatches = 0, verified = 0;
  std::string first_error;

  double steps_per_s() const { return seconds > 0 ? steps / seconds : 0; }
  double tokens_per_s() const { return seconds > 0 ? tokens / seconds : 0; }
  double cache_gbps() const { return call_seconds > 0 ? cache_bytes / call_seconds / 1e9 : 0; }
};

// Runs it; the sessions it made are deleted at the end. Stops early when
// *interrupt turns true.
StatusOr<DecodeReport> RunDecodeBench(const DecodeBenchConfig& c,
                                      const std::atomic<bool>* interrupt);

std::string DecodeReportText(const DecodeReport& r);
std::string DecodeReportJson(const DecodeReport& r);

}  // namespace attn::client
