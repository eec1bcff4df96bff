// The server's Prometheus metrics: counters and histograms that calls update
// without a lock, and their text exposition for /metrics.
//
// Each thread writes its own cache-line-aligned shard (relaxed atomics, no
// sharing between cores in the common case); a scrape sums the shards. So a
// call pays a handful of uncontended increments, and only scrapes pay for the
// labels and the formatting.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "attn/model.h"

namespace attn::server {

// The calls counted, of every protocol: attention.v1, the Open Inference
// Protocol over gRPC (ModelInfer; the readiness and metadata RPCs together)
// and over HTTP.
enum class Rpc {
  kAttention,
  kCrossAttention,
  kMultiHeadAttention,
  kListModels,
  kModelInfer,
  kOipMetadata,
  kHttpInfer,
  kHttpMetadata,
  // attention.v1.SessionService
  kCreateSession,
  kGetSession,
  kExtend,
  kForkSession,
  kTruncateSession,
  kDeleteSession,
  kListSessions,
};
constexpr int kNumRpcs = 15;
const char* RpcName(Rpc rpc);
// "attention.v1", "oip-grpc" or "oip-http".
const char* ProtocolName(Rpc rpc);

// What a scrape reads besides the counters: gauges owned by others.
struct MetricsGauges {
  int64_t in_flight = 0;  // calls from arrival to their response being sent
  int64_t queued = 0;     // of those, waiting for a CPU
  int64_t running = 0;    // of those, computing
  int64_t compute_threads = 0;
  int64_t max_inflight = 0, max_queue = 0;
  int64_t calls_skipped = 0;  // dropped unanswered: cancelled or expired while queued
  // Bytes gRPC calls hold (requests, answers not yet read), the connections
  // holding them, and --memory-quota-mb.
  int64_t held_bytes = 0, held_connections = 0, memory_quota_bytes = 0;
};

class ServerMetrics {
 public:
  // Buckets, in seconds, shared by the latency, queue and compute histograms.
  static constexpr std::array<double, 16> kBuckets = {
      5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 10};
  static constexpr int kNumCodes = 17;  // gRPC status codes 0..16

  // `models` in the order of their index; index models.size() is "-"
  // (inline weights or none).
  explicit ServerMetrics(std::vector<ModelInfo> models);
  ~ServerMetrics();
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  int num_models() const { return static_cast<int>(models_.size()); }
  // The index of `name`, or num_models() for none/unknown.
  int ModelIndex(const std::string& name) const;

  // One finished call. `queue_s`/`compute_s` < 0: the call never reached
  // the compute stage (rejected before), so those histograms skip it.
  // `bf16`: the call computed in bfloat16 (the compute histogram's
  // precision label).
  void RecordCall(Rpc rpc, int model, int code, double latency_s, double queue_s, double compute_s,
                  int64_t bytes_in, int64_t bytes_out, bool bf16 = false);

  // One finished call of `principal` (a bounded label: PrincipalLabel()),
  // for attn_principal_requests_total. At most kMaxPrincipals labels are
  // kept; later ones count as "other".
  static constexpr int kMaxPrincipals = 256;
  void RecordPrincipalCall(const std::string& principal, Rpc rpc, int code);

  // The Prometheus text exposition format (version 0.0.4).
  std::string Render(const MetricsGauges& gauges) const;

 private:
  struct Shard;
  Shard& LocalShard();
  void RenderPrincipals(std::string* out) const;

  std::vector<ModelInfo> models_;
  static constexpr int kNumShards = 16;
  std::unique_ptr<Shard> shards_[kNumShards];
  const double start_time_s_;
  mutable std::mutex principals_mu_;
  // label -> calls by (rpc, code)
  std::map<std::string, std::vector<uint64_t>> principals_;
};

// The resident set size of this process, in bytes (0 if unknown).
int64_t ProcessRssBytes();

}  // namespace attn::server
