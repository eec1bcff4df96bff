#include "ops/server_metrics.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

namespace attn::server {
namespace {

constexpr int kNumBuckets = static_cast<int>(ServerMetrics::kBuckets.size()) + 1;  // + "+Inf"

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Label values are model names from file stems: escape what Prometheus needs.
std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string Num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

using Counter = std::atomic<uint64_t>;

struct Histogram {
  Counter buckets[kNumBuckets]{};
  Counter sum_ns{0};
  void Observe(double seconds) {
    const auto it =
        std::lower_bound(ServerMetrics::kBuckets.begin(), ServerMetrics::kBuckets.end(), seconds);
    buckets[it - ServerMetrics::kBuckets.begin()].fetch_add(1, std::memory_order_relaxed);
    sum_ns.fetch_add(static_cast<uint64_t>(std::max(seconds, 0.0) * 1e9),
                     std::memory_order_relaxed);
  }
};

}  // namespace

const char* RpcName(Rpc rpc) {
  switch (rpc) {
    case Rpc::kAttention:
      return "Attention";
    case Rpc::kCrossAttention:
      return "CrossAttention";
    case Rpc::kMultiHeadAttention:
      return "MultiHeadAttention";
    case Rpc::kListModels:
      return "ListModels";
    case Rpc::kModelInfer:
    case Rpc::kHttpInfer:
      return "ModelInfer";
    case Rpc::kOipMetadata:
    case Rpc::kHttpMetadata:
      return "Metadata";
    case Rpc::kCreateSession:
      return "CreateSession";
    case Rpc::kGetSession:
      return "GetSession";
    case Rpc::kExtend:
      return "Extend";
    case Rpc::kForkSession:
      return "ForkSession";
    case Rpc::kTruncateSession:
      return "TruncateSession";
    case Rpc::kDeleteSession:
      return "DeleteSession";
    case Rpc::kListSessions:
      return "ListSessions";
  }
  return "?";
}

const char* ProtocolName(Rpc rpc) {
  switch (rpc) {
    case Rpc::kModelInfer:
    case Rpc::kOipMetadata:
      return "oip-grpc";
    case Rpc::kHttpInfer:
    case Rpc::kHttpMetadata:
      return "oip-http";
    default:
      return "attention.v1";
  }
}

struct alignas(64) ServerMetrics::Shard {
  explicit Shard(int models) : requests(new Counter[kNumRpcs * (models + 1) * kNumCodes]()) {}
  std::unique_ptr<Counter[]> requests;  // [rpc][model][code]
  Histogram latency[kNumRpcs], queue[kNumRpcs];
  Histogram compute[kNumRpcs], compute_bf16[kNumRpcs];  // by the precision used
  Counter bytes_in[kNumRpcs]{}, bytes_out[kNumRpcs]{};
};

ServerMetrics::ServerMetrics(std::vector<ModelInfo> models)
    : models_(std::move(models)), start_time_s_(NowSeconds()) {
  for (auto& s : shards_) s = std::make_unique<Shard>(num_models());
}

ServerMetrics::~ServerMetrics() = default;

int ServerMetrics::ModelIndex(const std::string& name) const {
  for (int i = 0; i < num_models(); ++i) {
    if (models_[i].name == name) return i;
  }
  return num_models();
}

ServerMetrics::Shard& ServerMetrics::LocalShard() {
  // A thread keeps its shard for life; threads are spread over the shards.
  static std::atomic<uint32_t> next{0};
  thread_local const uint32_t slot = next.fetch_add(1, std::memory_order_relaxed) % kNumShards;
  return *shards_[slot];
}

void ServerMetrics::RecordCall(Rpc rpc, int model, int code, double latency_s, double queue_s,
                               double compute_s, int64_t bytes_in, int64_t bytes_out, bool bf16) {
  const int r = static_cast<int>(rpc);
  model = std::clamp(model, 0, num_models());
  code = std::clamp(code, 0, kNumCodes - 1);
  Shard& s = LocalShard();
  s.requests[(r * (num_models() + 1) + model) * kNumCodes + code].fetch_add(
      1, std::memory_order_relaxed);
  s.latency[r].Observe(latency_s);
  if (queue_s >= 0) s.queue[r].Observe(queue_s);
  if (compute_s >= 0) (bf16 ? s.compute_bf16 : s.compute)[r].Observe(compute_s);
  s.bytes_in[r].fetch_add(static_cast<uint64_t>(bytes_in), std::memory_order_relaxed);
  s.bytes_out[r].fetch_add(static_cast<uint64_t>(bytes_out), std::memory_order_relaxed);
}

void ServerMetrics::RecordPrincipalCall(const std::string& principal, Rpc rpc, int code) {
  code = std::clamp(code, 0, kNumCodes - 1);
  std::lock_guard<std::mutex> lock(principals_mu_);
  auto it = principals_.find(principal);
  if (it == principals_.end()) {
    const std::string label =
        static_cast<int>(principals_.size()) < kMaxPrincipals ? principal : "other";
    it = principals_.try_emplace(label, std::vector<uint64_t>(kNumRpcs * kNumCodes)).first;
  }
  ++it->second[static_cast<int>(rpc) * kNumCodes + code];
}

void ServerMetrics::RenderPrincipals(std::string* out) const {
  {
    std::lock_guard<std::mutex> lock(principals_mu_);
    if (!principals_.empty()) {
      *out +=
          "# HELP attn_principal_requests_total Finished calls, by principal (a token's name; "
          "\"anonymous\" without tokens or certificates; \"certificate\" for mutual TLS "
          "subjects; \"unauthenticated\" when refused before one was known), RPC and gRPC "
          "status code.\n# TYPE attn_principal_requests_total counter\n";
    }
    for (const auto& [label, counts] : principals_) {
      for (int r = 0; r < kNumRpcs; ++r) {
        for (int c = 0; c < kNumCodes; ++c) {
          const uint64_t n = counts[r * kNumCodes + c];
          if (n == 0) continue;
          *out += "attn_principal_requests_total{principal=\"" + Escape(label) + "\",rpc=\"" +
                  RpcName(static_cast<Rpc>(r)) + "\",code=\"" +
                  StatusCodeName(static_cast<StatusCode>(c)) + "\"} " + std::to_string(n) + "\n";
        }
      }
    }
  }
}

std::string ServerMetrics::Render(const MetricsGauges& g) const {
  const int models = num_models() + 1;
  auto sum = [this](auto get) {
    uint64_t total = 0;
    for (const auto& s : shards_) total += get(*s).load(std::memory_order_relaxed);
    return total;
  };
  auto model_name = [this](int m) { return m < num_models() ? Escape(models_[m].name) : "-"; };
  std::string out;
  out.reserve(16384);

  out +=
      "# HELP attn_requests_total Finished calls, by RPC, model (\"-\": inline weights or none), "
      "gRPC status code and protocol.\n# TYPE attn_requests_total counter\n";
  for (int r = 0; r < kNumRpcs; ++r) {
    for (int m = 0; m < models; ++m) {
      for (int c = 0; c < kNumCodes; ++c) {
        const uint64_t n = sum([&](const Shard& s) -> const Counter& {
          return s.requests[(r * models + m) * kNumCodes + c];
        });
        if (n == 0) continue;
        out += "attn_requests_total{rpc=\"" + std::string(RpcName(static_cast<Rpc>(r))) +
               "\",model=\"" + model_name(m) + "\",code=\"" +
               StatusCodeName(static_cast<StatusCode>(c)) + "\",protocol=\"" +
               ProtocolName(static_cast<Rpc>(r)) + "\"} " + std::to_string(n) + "\n";
      }
    }
  }

  RenderPrincipals(&out);

  // `precision`: that label's value too, when not empty; `help` null: no header.
  auto histogram = [&](const char* name, const char* help, Histogram(Shard::*which)[kNumRpcs],
                       const std::string& precision = "") {
    if (help != nullptr) {
      out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " histogram\n";
    }
    for (int r = 0; r < kNumRpcs; ++r) {
      std::string rpc = std::string(RpcName(static_cast<Rpc>(r))) + "\",protocol=\"" +
                        ProtocolName(static_cast<Rpc>(r));
      if (!precision.empty()) rpc += "\",precision=\"" + precision;
      uint64_t cumulative = 0;
      for (int b = 0; b < kNumBuckets; ++b) {
        cumulative +=
            sum([&](const Shard& s) -> const Counter& { return (s.*which)[r].buckets[b]; });
        out += std::string(name) + "_bucket{rpc=\"" + rpc + "\",le=\"" +
               (b + 1 < kNumBuckets ? Num(kBuckets[b]) : "+Inf") + "\"} " +
               std::to_string(cumulative) + "\n";
      }
      const uint64_t ns =
          sum([&](const Shard& s) -> const Counter& { return (s.*which)[r].sum_ns; });
      out += std::string(name) + "_sum{rpc=\"" + rpc + "\"} " + Num(ns * 1e-9) + "\n";
      out += std::string(name) + "_count{rpc=\"" + rpc + "\"} " + std::to_string(cumulative) + "\n";
    }
  };
  histogram("attn_request_duration_seconds", "Time from a call's arrival to its answer, all calls.",
            &Shard::latency);
  histogram("attn_queue_duration_seconds",
            "Time a call waited for a CPU (calls that reached the compute stage).", &Shard::queue);
  histogram("attn_compute_duration_seconds",
            "Time a call computed and encoded its response (calls that reached the compute "
            "stage), by the arithmetic it used.",
            &Shard::compute, "float32");
  histogram("attn_compute_duration_seconds", nullptr, &Shard::compute_bf16, "bfloat16");

  auto per_rpc = [&](const char* name, const char* help, Counter(Shard::*which)[kNumRpcs]) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n";
    for (int r = 0; r < kNumRpcs; ++r) {
      const uint64_t n = sum([&](const Shard& s) -> const Counter& { return (s.*which)[r]; });
      out += std::string(name) + "{rpc=\"" + RpcName(static_cast<Rpc>(r)) + "\",protocol=\"" +
             ProtocolName(static_cast<Rpc>(r)) + "\"} " + std::to_string(n) + "\n";
    }
  };
  per_rpc("attn_request_bytes_total", "Serialized request bytes received.", &Shard::bytes_in);
  per_rpc("attn_response_bytes_total", "Serialized response bytes sent.", &Shard::bytes_out);

  auto gauge = [&](const char* name, const char* help, double value) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n" + name +
           " " + Num(value) + "\n";
  };
  gauge("attn_inflight_requests", "Calls from arrival to their response being sent.",
        static_cast<double>(g.in_flight));
  gauge("attn_queued_requests", "Calls waiting for a CPU.", static_cast<double>(g.queued));
  gauge("attn_running_requests", "Calls computing.", static_cast<double>(g.running));
  gauge("attn_max_inflight_requests", "--max-inflight.", static_cast<double>(g.max_inflight));
  gauge("attn_max_queued_requests", "--max-queue.", static_cast<double>(g.max_queue));
  gauge("attn_compute_threads", "Compute threads (--threads).",
        static_cast<double>(g.compute_threads));
  gauge("attn_held_bytes",
        "Bytes gRPC calls hold: requests, and answers their clients have not read yet.",
        static_cast<double>(g.held_bytes));
  gauge("attn_held_connections", "Connections holding such bytes.",
        static_cast<double>(g.held_connections));
  gauge("attn_memory_quota_bytes", "--memory-quota-mb, in bytes.",
        static_cast<double>(g.memory_quota_bytes));
  out +=
      "# HELP attn_skipped_requests_total Calls not computed because their client cancelled or "
      "their deadline passed while they waited.\n# TYPE attn_skipped_requests_total counter\n"
      "attn_skipped_requests_total " +
      std::to_string(g.calls_skipped) + "\n";

  out += "# HELP attn_model_info The models served (value 1).\n# TYPE attn_model_info gauge\n";
  for (const auto& m : models_) {
    out += "attn_model_info{model=\"" + Escape(m.name) + "\",kind=\"" + ModelKindName(m.kind) +
           "\",embed_dim=\"" + std::to_string(m.embed_dim) + "\",num_heads=\"" +
           std::to_string(m.num_heads) + "\",kdim=\"" + std::to_string(m.kdim) + "\",vdim=\"" +
           std::to_string(m.vdim) + "\"} 1\n";
  }
  gauge("process_resident_memory_bytes", "Resident memory size in bytes.",
        static_cast<double>(ProcessRssBytes()));
  gauge("process_start_time_seconds", "Start time of the process since the Unix epoch.",
        start_time_s_);
  return out;
}

int64_t ProcessRssBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * sysconf(_SC_PAGESIZE);
}

}  // namespace attn::server
