#include "ops/session_metrics.h"

#include <cstdio>

#include "ops/token_auth.h"

namespace attn::server {
namespace {

constexpr const char* kStepLabels[SessionMetrics::kStepBuckets] = {"0", "1", "2-16", "17-256",
                                                                   "257+"};
constexpr const char* kBatchLabels[SessionMetrics::kBatchBuckets] = {"1", "2-8", "9-32", "33+"};

int StepBucket(int64_t n) { return n <= 0 ? 0 : n == 1 ? 1 : n <= 16 ? 2 : n <= 256 ? 3 : 4; }
int BatchBucket(int64_t n) { return n <= 1 ? 0 : n <= 8 ? 1 : n <= 32 ? 2 : 3; }

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

}  // namespace

void SessionMetrics::RecordExtend(int64_t steps, double seconds) {
  const int b = BatchBucket(steps);
  for (size_t i = 0; i < kBounds.size(); ++i) {
    if (seconds <= kBounds[i]) buckets_[b][i].fetch_add(1, std::memory_order_relaxed);
  }
  count_[b].fetch_add(1, std::memory_order_relaxed);
  sum_us_[b].fetch_add(static_cast<uint64_t>(seconds * 1e6), std::memory_order_relaxed);
}

void SessionMetrics::RecordExpired(const std::string& owner) {
  expired_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(expired_mu_);
  std::string label = PrincipalLabel(owner);
  if (expired_by_.size() >= 256 && expired_by_.count(label) == 0) label = "other";
  ++expired_by_[label];
}

void SessionMetrics::RecordStep(int64_t n_q, int64_t n_kv) {
  steps_[StepBucket(n_q)].fetch_add(1, std::memory_order_relaxed);
  tokens_.fetch_add(static_cast<uint64_t>(n_kv), std::memory_order_relaxed);
}

std::string SessionMetrics::Render(const SessionGauges& g) const {
  std::string out;
  auto line = [&](const char* name, const char* type, const char* help, double v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
           name + " " + Num(v) + "\n";
  };
  line("attn_sessions", "gauge", "KV-cache sessions alive.", static_cast<double>(g.sessions));
  line("attn_max_sessions", "gauge", "--max-sessions.", static_cast<double>(g.max_sessions));
  line("attn_kv_cache_bytes_used", "gauge", "Bytes of the KV-cache page pool in use.",
       static_cast<double>(g.bytes_used));
  line("attn_kv_cache_bytes_limit", "gauge", "The KV-cache page pool (--kv-cache-mb), in bytes.",
       static_cast<double>(g.bytes_limit));
  line("attn_kv_session_metadata_bytes", "gauge",
       "Bytes of the sessions' own memory outside the pool (state, ids, page tables).",
       static_cast<double>(g.metadata_bytes));
  line("attn_kv_session_metadata_bytes_limit", "gauge",
       "Their limit (1/32 of --kv-cache-mb and 16 MiB): create and fork past it are refused.",
       static_cast<double>(g.metadata_limit));
  line("attn_session_tokens_appended_total", "counter", "Tokens appended to KV caches.",
       static_cast<double>(tokens_.load()));
  line("attn_session_steps_replayed_total", "counter",
       "Session steps that were replays of an applied step (expected_tokens): nothing appended.",
       static_cast<double>(replays_.load()));
  line("attn_session_forks_total", "counter", "Sessions forked.",
       static_cast<double>(forks_.load()));
  line("attn_session_truncations_total", "counter", "Sessions truncated.",
       static_cast<double>(truncations_.load()));
  line("attn_session_expired_total", "counter",
       "Sessions expired after --session-idle-timeout, their pages freed.",
       static_cast<double>(expired_.load()));
  if (!g.by_format.empty()) {
    std::string s =
        "# HELP attn_sessions_by_format KV-cache sessions alive by how they store "
        "keys and values.\n# TYPE attn_sessions_by_format gauge\n";
    std::string b =
        "# HELP attn_kv_cache_bytes_by_format Bytes of their pages (a page shared "
        "with a fork counted in each).\n# TYPE attn_kv_cache_bytes_by_format gauge\n";
    for (const auto& [f, v] : g.by_format) {
      const std::string labels =
          "{key_format=\"" + f.first + "\",value_format=\"" + f.second + "\"}";
      s += "attn_sessions_by_format" + labels + " " + Num(static_cast<double>(v.first)) + "\n";
      b += "attn_kv_cache_bytes_by_format" + labels + " " + Num(static_cast<double>(v.second)) +
           "\n";
    }
    out += s + b;
  }
  // Per principal, by label: certificate subjects share one ("certificate").
  std::map<std::string, std::pair<int64_t, int64_t>> by;
  for (const KvOwnerUsage& o : g.owners) {
    auto& v = by[PrincipalLabel(o.owner)];
    v.first += o.sessions;
    v.second += o.bytes_used;
  }
  auto labelled = [&](const char* name, const char* type, const char* help, auto each) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    each([&](const std::string& label, double v) {
      out += std::string(name) + "{principal=\"" + label + "\"} " + Num(v) + "\n";
    });
  };
  labelled("attn_principal_sessions", "gauge",
           "KV-cache sessions alive, by the principal that owns them.", [&](auto emit) {
             for (const auto& [label, v] : by) emit(label, static_cast<double>(v.first));
           });
  labelled("attn_principal_kv_cache_bytes_used", "gauge",
           "Bytes of the page pool in use, by the principal that owns them.", [&](auto emit) {
             for (const auto& [label, v] : by) emit(label, static_cast<double>(v.second));
           });
  {
    std::lock_guard<std::mutex> lock(expired_mu_);
    labelled("attn_principal_sessions_expired_total", "counter",
             "Sessions expired after --session-idle-timeout, by owner.", [&](auto emit) {
               for (const auto& [label, n] : expired_by_) emit(label, static_cast<double>(n));
             });
  }
  out +=
      "# HELP attn_session_steps_total Extend steps computed, by their query tokens (n_q).\n"
      "# TYPE attn_session_steps_total counter\n";
  for (int i = 0; i < kStepBuckets; ++i) {
    out += std::string("attn_session_steps_total{n=\"") + kStepLabels[i] + "\"} " +
           std::to_string(steps_[i].load()) + "\n";
  }
  out +=
      "# HELP attn_extend_duration_seconds Extend calls' compute time, by batch size (steps).\n"
      "# TYPE attn_extend_duration_seconds histogram\n";
  for (int b = 0; b < kBatchBuckets; ++b) {
    const std::string label = std::string("batch=\"") + kBatchLabels[b] + "\"";
    for (size_t i = 0; i < kBounds.size(); ++i) {
      out += "attn_extend_duration_seconds_bucket{" + label + ",le=\"" + Num(kBounds[i]) + "\"} " +
             std::to_string(buckets_[b][i].load()) + "\n";
    }
    out += "attn_extend_duration_seconds_bucket{" + label + ",le=\"+Inf\"} " +
           std::to_string(count_[b].load()) + "\n";
    out += "attn_extend_duration_seconds_sum{" + label + "} " + Num(sum_us_[b].load() / 1e6) + "\n";
    out += "attn_extend_duration_seconds_count{" + label + "} " + std::to_string(count_[b].load()) +
           "\n";
  }
  return out;
}

}  // namespace attn::server
