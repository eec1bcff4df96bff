// attention-client bench: the samples one level records, and the summaries
// made from them (the whole level, a time window, one workload entry).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace attn::client {

// One measured call.
struct Sample {
  double done_s = 0;  // when it finished, seconds after the level's measuring began
  double ms = 0;      // latency (open loop: from its scheduled send)
  int entry = 0;      // index of its --workload entry (0 without one)
  int code = 0;       // gRPC status code; 0 is OK
  float queue_ms = -1, compute_ms = -1;  // the server's timing trailer; -1: none
};

struct LatencySummary {
  int64_t count = 0, ok = 0;
  std::map<std::string, int64_t> errors;  // by gRPC code name
  double seconds = 0, rps = 0;            // ok calls per second
  double min_ms = 0, mean_ms = 0, p50_ms = 0, p90_ms = 0, p95_ms = 0, p99_ms = 0, max_ms = 0;
  std::vector<std::pair<double, int64_t>> histogram;  // (upper bound ms, count), 10 log buckets
  double server_queue_ms = 0, server_compute_ms = 0;  // means over calls with a trailer
  // Mean latency of the first and the last tenth of the calls, by finish
  // time: a server falling behind shows as last >> first.
  double first_tenth_ms = 0, last_tenth_ms = 0;
};

// The calls of `samples` that finished in [from_s, to_s) and belong to
// `entry` (-1: all), over `seconds` of measuring.
LatencySummary Summarise(const std::vector<Sample>& samples, double from_s, double to_s, int entry,
                         double seconds);

// A statistic by name: "p50", "p90", "p95", "p99" or "mean".
double StatByName(const LatencySummary& s, const std::string& stat);

// perf_analyzer's stability test: the last three windows' req/s and p99 are
// each within `pct` % of their mean.
bool Stable(const std::vector<LatencySummary>& windows, double pct);

}  // namespace attn::client
