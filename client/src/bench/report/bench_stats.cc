#include "bench/report/bench_stats.h"

#include <algorithm>
#include <cmath>

#include "wire/status_mapping.h"

namespace attn::client {

LatencySummary Summarise(const std::vector<Sample>& samples, double from_s, double to_s, int entry,
                         double seconds) {
  LatencySummary r;
  r.seconds = std::max(seconds, 1e-9);
  std::vector<double> ms;
  double queue = 0, compute = 0;
  int64_t timed = 0;
  for (const Sample& s : samples) {
    if (s.done_s < from_s || s.done_s >= to_s || (entry >= 0 && s.entry != entry)) continue;
    ++r.count;
    if (s.code != 0) {
      ++r.errors[wire::GrpcCodeName(static_cast<grpc::StatusCode>(s.code))];
      continue;
    }
    ms.push_back(s.ms);
    if (s.queue_ms >= 0) queue += s.queue_ms, compute += s.compute_ms, ++timed;
  }
  r.ok = static_cast<int64_t>(ms.size());
  r.rps = static_cast<double>(r.ok) / r.seconds;
  if (timed > 0) r.server_queue_ms = queue / timed, r.server_compute_ms = compute / timed;
  if (ms.empty()) return r;
  const size_t tenth = std::max<size_t>(1, ms.size() / 10);
  double first = 0, last = 0;
  for (size_t i = 0; i < tenth; ++i) first += ms[i], last += ms[ms.size() - 1 - i];
  r.first_tenth_ms = first / tenth, r.last_tenth_ms = last / tenth;
  std::sort(ms.begin(), ms.end());
  auto pct = [&](double p) {
    const size_t i = static_cast<size_t>(std::ceil(p / 100.0 * ms.size()));
    return ms[std::min(std::max<size_t>(i, 1) - 1, ms.size() - 1)];
  };
  r.min_ms = ms.front(), r.max_ms = ms.back();
  double sum = 0;
  for (double x : ms) sum += x;
  r.mean_ms = sum / ms.size();
  r.p50_ms = pct(50), r.p90_ms = pct(90), r.p95_ms = pct(95), r.p99_ms = pct(99);
  // Ten log-spaced buckets from min to max.
  const double lo = std::max(r.min_ms, 1e-3), hi = std::max(r.max_ms, lo * 1.0001);
  const double ratio = std::pow(hi / lo, 1.0 / 10);
  size_t j = 0;
  for (int b = 1; b <= 10; ++b) {
    const double upper = b == 10 ? hi : lo * std::pow(ratio, b);
    int64_t n = 0;
    while (j < ms.size() && ms[j] <= upper) ++n, ++j;
    r.histogram.emplace_back(upper, n);
  }
  r.histogram.back().second += static_cast<int64_t>(ms.size() - j);
  return r;
}

double StatByName(const LatencySummary& s, const std::string& stat) {
  if (stat == "p50") return s.p50_ms;
  if (stat == "p90") return s.p90_ms;
  if (stat == "p95") return s.p95_ms;
  if (stat == "mean") return s.mean_ms;
  return s.p99_ms;
}

bool Stable(const std::vector<LatencySummary>& w, double pct) {
  if (w.size() < 3) return false;
  auto within = [&](auto get) {
    double mean = 0;
    for (size_t i = w.size() - 3; i < w.size(); ++i) mean += get(w[i]) / 3;
    if (!(mean > 0)) return false;
    for (size_t i = w.size() - 3; i < w.size(); ++i) {
      if (std::abs(get(w[i]) - mean) > pct / 100 * mean) return false;
    }
    return true;
  };
  return within([](const LatencySummary& s) { return s.rps; }) &&
         within([](const LatencySummary& s) { return s.p99_ms; });
}

}  // namespace attn::client
