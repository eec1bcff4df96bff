#include "bench_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "attn/json.h"
#include "request_builder.h"

namespace attn::client {
namespace {

std::string Num(double v, int precision = 3) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f", precision, v);
  return buf;
}

}  // namespace

std::string ReportToText(const BenchReport& r) {
  std::ostringstream o;
  o << "workload: " << r.workload << " (" << Num(r.flops_per_call / 1e6, 2)
    << " MFLOP/call), target " << r.config.target << ", " << r.config.connections
    << " connection(s)"
    << (r.config.rps > 0 ? ", open loop at " + Num(r.config.rps, 0) + " req/s" : "")
    << (r.interrupted ? "  [interrupted: partial report]" : "") << "\n";
  for (const auto& l : r.levels) {
    o << "\nconcurrency " << l.concurrency << ": " << l.count << " calls in " << Num(l.seconds, 2)
      << " s, " << l.ok << " ok";
    for (const auto& [code, n] : l.errors) o << ", " << n << " " << code;
    if (!l.first_error.empty()) o << "\n  first error: " << l.first_error;
    o << "\n  throughput " << Num(l.rps, 1) << " req/s, " << Num(l.gflops, 1) << " GFLOP/s\n"
      << "  latency ms: min " << Num(l.min_ms) << "  mean " << Num(l.mean_ms) << "  p50 "
      << Num(l.p50_ms) << "  p90 " << Num(l.p90_ms) << "  p95 " << Num(l.p95_ms) << "  p99 "
      << Num(l.p99_ms) << "  max " << Num(l.max_ms) << "\n"
      << "  server: queue " << Num(l.server_queue_ms) << " ms, compute " << Num(l.server_compute_ms)
      << " ms (means)\n";
    if (r.config.verify) {
      o << "  verify: " << l.verified << " responses checked, " << l.mismatches << " mismatches\n";
    }
    int64_t peak = 1;
    for (const auto& [ub, n] : l.histogram) peak = std::max(peak, n);
    for (const auto& [ub, n] : l.histogram) {
      o << "  <= " << Num(ub) << " ms "
        << std::string(std::max<int64_t>(0, 9 - static_cast<int64_t>(Num(ub).size())), ' ')
        << std::string(static_cast<size_t>(40 * n / peak), '#') << " " << n << "\n";
    }
  }
  if (r.levels.size() > 1) {
    o << "\n"
      << "concurrency  req/s      GFLOP/s   p50 ms    p99 ms    errors\n";
    for (const auto& l : r.levels) {
      int64_t errors = 0;
      for (const auto& [code, n] : l.errors) errors += n;
      char line[160];
      std::snprintf(line, sizeof(line), "%-12d %-10.1f %-9.1f %-9.3f %-9.3f %lld\n", l.concurrency,
                    l.rps, l.gflops, l.p50_ms, l.p99_ms, static_cast<long long>(errors));
      o << line;
    }
  }
  return o.str();
}

std::string ReportToCsv(const BenchReport& r) {
  std::string s =
      "concurrency,requests,ok,errors,seconds,rps,gflops,min_ms,mean_ms,p50_ms,p90_ms,p95_ms,p99_"
      "ms,max_ms,server_queue_ms,server_compute_ms\n";
  for (const auto& l : r.levels) {
    int64_t errors = 0;
    for (const auto& [code, n] : l.errors) errors += n;
    s += std::to_string(l.concurrency) + "," + std::to_string(l.count) + "," +
         std::to_string(l.ok) + "," + std::to_string(errors) + "," + Num(l.seconds, 3) + "," +
         Num(l.rps, 2) + "," + Num(l.gflops, 3) + "," + Num(l.min_ms) + "," + Num(l.mean_ms) + "," +
         Num(l.p50_ms) + "," + Num(l.p90_ms) + "," + Num(l.p95_ms) + "," + Num(l.p99_ms) + "," +
         Num(l.max_ms) + "," + Num(l.server_queue_ms) + "," + Num(l.server_compute_ms) + "\n";
  }
  return s;
}

std::string ReportToJson(const BenchReport& r) {
  std::ostringstream o;
  const BenchConfig& c = r.config;
  o << "{\n  \"workload\": " << JsonQuote(r.workload)
    << ",\n  \"flops_per_call\": " << Num(r.flops_per_call, 0)
    << ",\n  \"request_bytes\": " << r.request_bytes
    << ",\n  \"interrupted\": " << (r.interrupted ? "true" : "false")
    << ",\n  \"config\": {\"target\": " << JsonQuote(c.target) << ", \"op\": " << JsonQuote(c.op)
    << ", \"model\": " << JsonQuote(c.model) << ", \"batch\": " << c.batch
    << ", \"seq_q\": " << c.seq_q << ", \"seq_k\": " << c.seq_k << ", \"dim\": " << c.dim
    << ", \"heads\": " << c.heads << ", \"causal\": " << (c.causal ? "true" : "false")
    << ", \"encoding\": " << JsonQuote(c.encoding == Encoding::kValues ? "values" : "raw")
    << ", \"dtype\": " << JsonQuote(DtypeName(c.dtype))
    << ", \"protocol\": " << JsonQuote(c.oip ? "oip" : "native")
    << ", \"connections\": " << c.connections << ", \"requests\": " << c.requests
    << ", \"duration_s\": " << Num(c.duration_s) << ", \"rps\": " << Num(c.rps)
    << ", \"warmup_s\": " << Num(c.warmup_s) << ", \"timeout_s\": " << Num(c.timeout_s)
    << ", \"retry\": " << (c.channel.retry_unavailable ? "true" : "false")
    << ", \"tls\": " << (c.channel.UsesTls() ? "true" : "false")
    << ", \"token\": " << (c.channel.token.empty() ? "false" : "true")
    << ", \"verify\": " << (c.verify ? "true" : "false") << "},\n  \"levels\": [";
  for (size_t i = 0; i < r.levels.size(); ++i) {
    const LevelReport& l = r.levels[i];
    o << (i ? "," : "") << "\n    {\"concurrency\": " << l.concurrency
      << ", \"seconds\": " << Num(l.seconds, 4) << ", \"count\": " << l.count
      << ", \"ok\": " << l.ok << ", \"errors\": {";
    bool first = true;
    for (const auto& [code, n] : l.errors) {
      o << (first ? "" : ", ") << JsonQuote(code) << ": " << n;
      first = false;
    }
    o << "}, \"first_error\": " << JsonQuote(l.first_error) << ", \"rps\": " << Num(l.rps, 3)
      << ", \"gflops\": " << Num(l.gflops, 4) << ", \"latency_ms\": {\"min\": " << Num(l.min_ms, 4)
      << ", \"mean\": " << Num(l.mean_ms, 4) << ", \"p50\": " << Num(l.p50_ms, 4)
      << ", \"p90\": " << Num(l.p90_ms, 4) << ", \"p95\": " << Num(l.p95_ms, 4)
      << ", \"p99\": " << Num(l.p99_ms, 4) << ", \"max\": " << Num(l.max_ms, 4)
      << "}, \"histogram\": [";
    for (size_t j = 0; j < l.histogram.size(); ++j) {
      o << (j ? ", " : "") << "{\"le_ms\": " << Num(l.histogram[j].first, 4)
        << ", \"count\": " << l.histogram[j].second << "}";
    }
    o << "], \"server\": {\"queue_ms\": " << Num(l.server_queue_ms, 4)
      << ", \"compute_ms\": " << Num(l.server_compute_ms, 4)
      << "}, \"verify\": {\"checked\": " << l.verified << ", \"mismatches\": " << l.mismatches
      << "}, \"response_bytes\": " << l.response_bytes << "}";
  }
  o << "\n  ]\n}\n";
  return o.str();
}

}  // namespace attn::client
