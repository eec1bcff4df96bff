// The KV-cache sessions' Prometheus metrics: steps by their query tokens,
// tokens appended, forks, truncations, expiries, and Extend latency by
// batch size; the session gauges come from the store at each scrape.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "attn/kv_cache.h"

namespace attn::server {

struct SessionGauges {
  int64_t sessions = 0, bytes_used = 0, bytes_limit = 0, max_sessions = 0;
  int64_t metadata_bytes = 0, metadata_limit = 0;  // the sessions' own memory, outside the pool
  std::vector<KvOwnerUsage> owners;                // each principal's sessions and bytes
  // Sessions and their pages' bytes by (key format, value format), the
  // formats named as CacheFormatName does ("bfloat16", "int8", ...).
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>> by_format;
};

class SessionMetrics {
 public:
  // Query-token buckets of a step ("0", "1", "2-16", "17-256", "257+") and
  // batch-size buckets of an Extend ("1", "2-8", "9-32", "33+").
  static constexpr int kStepBuckets = 5, kBatchBuckets = 4;

  // A finished Extend: its steps' query tokens (n_q) and appended tokens.
  void RecordExtend(int64_t steps, double seconds);
  void RecordStep(int64_t n_q, int64_t n_kv);
  void RecordFork() { forks_.fetch_add(1, std::memory_order_relaxed); }
  // Steps that were replays (expected_tokens: already applied, nothing appended).
  void RecordReplays(int64_t n) {
    replays_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
  }
  void RecordTruncate() { truncations_.fetch_add(1, std::memory_order_relaxed); }
  // A session of `owner` expired.
  void RecordExpired(const std::string& owner);

  // The text exposition of these metrics (appended to /metrics).
  std::string Render(const SessionGauges& g) const;

 private:
  std::atomic<uint64_t> tokens_{0}, forks_{0}, truncations_{0}, expired_{0}, replays_{0};
  mutable std::mutex expired_mu_;
  std::map<std::string, uint64_t> expired_by_;  // by principal label (bounded)
  std::array<std::atomic<uint64_t>, kStepBuckets> steps_{};
  // Per batch bucket: the histogram's bucket counts, count and sum (µs).
  static constexpr std::array<double, 12> kBounds = {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3,
                                                     1e-2, 2.5e-2, 5e-2, 0.1,  0.5,    2.5};
  std::array<std::array<std::atomic<uint64_t>, kBounds.size()>, kBatchBuckets> buckets_{};
  std::array<std::atomic<uint64_t>, kBatchBuckets> count_{}, sum_us_{};
};

}  // namespace attn::server
