#include "bench/report/bench_report.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "attn/cpu_info.h"
#include "attn/json.h"
#include "request_builder.h"

namespace attn::client {
namespace {

std::string Num(double v, int precision = 3) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f", precision, v);
  return buf;
}

std::string NumList(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + Num(v[i], 3);
  return s + "]";
}

std::string MixJson(const BenchConfig& c) {
  std::string s = "[";
  for (size_t i = 0; i < c.mix.size(); ++i) {
    const BenchConfig& e = *c.mix[i].call;
    s += std::string(i ? ", " : "") + "{\"name\": " + JsonQuote(c.mix[i].name) +
         ", \"weight\": " + Num(c.mix[i].weight) + ", \"op\": " + JsonQuote(e.op) +
         ", \"model\": " + JsonQuote(e.model) + ", \"dtype\": " + JsonQuote(DtypeName(e.dtype)) +
         ", \"protocol\": " + JsonQuote(e.oip ? "oip" : "native") + "}";
  }
  return s + "]";
}

std::string ErrorsJson(const std::map<std::string, int64_t>& errors) {
  std::string s = "{";
  for (const auto& [code, n] : errors) {
    s += (s.size() > 1 ? ", " : "") + JsonQuote(code) + ": " + std::to_string(n);
  }
  return s + "}";
}

std::string SummaryJson(const LatencySummary& x) {
  return "{\"count\": " + std::to_string(x.count) + ", \"ok\": " + std::to_string(x.ok) +
         ", \"errors\": " + ErrorsJson(x.errors) + ", \"rps\": " + Num(x.rps, 3) +
         ", \"mean_ms\": " + Num(x.mean_ms, 4) + ", \"p50_ms\": " + Num(x.p50_ms, 4) +
         ", \"p90_ms\": " + Num(x.p90_ms, 4) + ", \"p99_ms\": " + Num(x.p99_ms, 4) +
         ", \"max_ms\": " + Num(x.max_ms, 4) + "}";
}

// The fields of a level beyond the closed-loop basics.
std::string LevelExtrasJson(const LevelReport& l) {
  std::string s =
      "\"target_rps\": " + Num(l.target_rps, 3) + ", \"late\": " + std::to_string(l.late) +
      ", \"dropped\": " + std::to_string(l.dropped) + ", \"max_lag_ms\": " + Num(l.max_lag_ms, 3) +
      ", \"latency_trend_ms\": {\"first_tenth\": " + Num(l.first_tenth_ms, 4) +
      ", \"last_tenth\": " + Num(l.last_tenth_ms, 4) + "}, \"entries\": [";
  for (size_t i = 0; i < l.entries.size(); ++i) {
    const EntryReport& e = l.entries[i];
    s += std::string(i ? ", " : "") + "{\"name\": " + JsonQuote(e.name) +
         ", \"workload\": " + JsonQuote(e.workload) + ", \"weight\": " + Num(e.weight) +
         ", \"gflops\": " + Num(e.gflops, 4) + ", \"stats\": " + SummaryJson(e.s) + "}";
  }
  s += "], \"windows\": [";
  for (size_t i = 0; i < l.windows.size(); ++i) {
    s += std::string(i ? ", " : "") + SummaryJson(l.windows[i]);
  }
  s += "], \"stable\": " + std::string(l.stable ? "true" : "false") +
       ", \"client\": {\"cpus_used\": " + Num(l.client.cpus_used, 3) +
       ", \"cpus_available\": " + std::to_string(l.client.cpus_available) +
       ", \"machine_idle\": " + Num(l.client.machine_idle, 3) +
       ", \"saturated\": " + (l.client.saturated ? "true" : "false") + ", \"threads\": [";
  for (size_t i = 0; i < l.client.busiest.size(); ++i) {
    s += std::string(i ? ", " : "") + "{\"name\": " + JsonQuote(l.client.busiest[i].first) +
         ", \"cpu\": " + Num(l.client.busiest[i].second, 3) + "}";
  }
  s += "]}, \"server_metrics\": ";
  if (!l.server.scraped) {
    return s + (l.server.error.empty() ? "null" : "{\"error\": " + JsonQuote(l.server.error) + "}");
  }
  s += "{\"by_code\": {";
  bool first = true;
  for (const auto& [code, n] : l.server.by_code) {
    s += (first ? "" : ", ") + JsonQuote(code) + ": " + Num(n, 0);
    first = false;
  }
  return s + "}, \"latency_mean_ms\": " + Num(l.server.latency_mean_ms, 4) +
         ", \"queue_mean_ms\": " + Num(l.server.queue_mean_ms, 4) +
         ", \"compute_mean_ms\": " + Num(l.server.compute_mean_ms, 4) +
         ", \"queue_p99_ms\": " + Num(l.server.queue_p99_ms, 4) +
         ", \"compute_p99_ms\": " + Num(l.server.compute_p99_ms, 4) +
         ", \"rss_mib\": " + Num(l.server.rss_mib, 2) + "}";
}

void TextExtras(const BenchReport& r, const LevelReport& l, std::ostringstream& o) {
  if (l.target_rps > 0) {
    o << "  open loop: " << l.late << " calls sent late (> 1 ms after schedule, worst "
      << Num(l.max_lag_ms, 1) << " ms; at most " << l.concurrency << " in flight), " << l.dropped
      << " never sent (a full backlog, or left at the end); latency of the first "
      << "tenth " << Num(l.first_tenth_ms) << " ms, last tenth " << Num(l.last_tenth_ms) << " ms\n";
  }
  if (!l.windows.empty()) {
    o << "  stability: " << l.windows.size() << " windows of " << Num(r.config.window_s, 1)
      << " s, " << (l.stable ? "converged" : "NOT converged") << " (within "
      << Num(r.config.stability_pct, 1) << "%)\n";
  }
  for (const auto& e : l.entries) {
    int64_t errors = 0;
    for (const auto& [code, n] : e.s.errors) errors += n;
    o << "  entry " << e.name << " (" << e.workload << "): " << e.s.ok << " ok, " << errors
      << " errors, " << Num(e.s.rps, 1) << " req/s, p50 " << Num(e.s.p50_ms) << " ms, p99 "
      << Num(e.s.p99_ms) << " ms\n";
  }
  o << "  client: " << Num(l.client.cpus_used, 2) << " CPUs of " << l.client.cpus_available
    << "; machine idle " << Num(100 * l.client.machine_idle, 0) << "%";
  if (!l.client.busiest.empty()) {
    o << "; busiest thread " << l.client.busiest.front().first << " "
      << Num(100 * l.client.busiest.front().second, 0) << "%";
  }
  o << (l.client.saturated ? "  [NO SPARE CPU: these numbers are the client's limit too]" : "")
    << "\n";
  if (l.server.scraped) {
    o << "  server /metrics:";
    for (const auto& [code, n] : l.server.by_code) o << " " << code << " " << Num(n, 0);
    o << "; queue mean " << Num(l.server.queue_mean_ms)
      << " ms (p99 <= " << Num(l.server.queue_p99_ms) << "), compute mean "
      << Num(l.server.compute_mean_ms) << " ms (p99 <= " << Num(l.server.compute_p99_ms)
      << "), RSS " << Num(l.server.rss_mib, 1) << " MiB\n";
  } else if (!l.server.error.empty()) {
    o << "  server /metrics: not scraped: " << l.server.error << "\n";
  }
}

}  // namespace

std::string LevelName(const LevelReport& l) {
  return l.target_rps > 0 ? "rate " + Num(l.target_rps, 1) + "/s"
                          : "concurrency " + std::to_string(l.concurrency);
}

MachineInfo DescribeMachine() {
  MachineInfo m;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      m.cpu_model = line.substr(line.find(':') + 2);
      break;
    }
  }
  m.kernel_tier = EngineTierName();
  m.onednn_isa = OneDnnIsaName();
  cpu_set_t set;
  m.cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  return m;
}

int FindKnee(const BenchReport& r) {
  if (r.config.slo.stat.empty()) return -1;
  int knee = -1;
  for (size_t i = 0; i < r.levels.size(); ++i) {
    const LevelReport& l = r.levels[i];
    LatencySummary s;
    s.p50_ms = l.p50_ms, s.p90_ms = l.p90_ms, s.p95_ms = l.p95_ms, s.p99_ms = l.p99_ms;
    s.mean_ms = l.mean_ms;
    if (l.ok == 0 || l.ok != l.count || StatByName(s, r.config.slo.stat) > r.config.slo.ms) break;
    knee = static_cast<int>(i);
  }
  return knee;
}

std::string ReportToText(const BenchReport& r) {
  std::ostringstream o;
  o << "workload: " << r.workload << " (" << Num(r.flops_per_call / 1e6, 2)
    << " MFLOP/call), target " << r.config.target << ", " << r.config.connections
    << " connection(s)"
    << (r.config.rps.empty()
            ? ""
            : std::string(", open loop (") +
                  (r.config.arrival == Arrival::kPoisson ? "poisson" : "constant") + " arrivals)")
    << (r.interrupted ? "  [interrupted: partial report]" : "") << "\n"
    << "machine: " << r.machine.cpu_model << ", " << r.machine.cpus << " CPUs for the client, "
    << "ISA tier " << r.machine.kernel_tier << " (oneDNN " << r.machine.onednn_isa << ")\n";
  for (const auto& l : r.levels) {
    o << "\n"
      << LevelName(l) << ": " << l.count << " calls in " << Num(l.seconds, 2) << " s, " << l.ok
      << " ok";
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
    TextExtras(r, l, o);
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
      << (r.config.rps.empty() ? "concurrency" : "rate       ")
      << "  req/s      GFLOP/s   p50 ms    p99 ms    errors\n";
    for (const auto& l : r.levels) {
      int64_t errors = 0;
      for (const auto& [code, n] : l.errors) errors += n;
      char line[160];
      std::snprintf(line, sizeof(line), "%-12g %-10.1f %-9.1f %-9.3f %-9.3f %lld\n",
                    l.target_rps > 0 ? l.target_rps : l.concurrency, l.rps, l.gflops, l.p50_ms,
                    l.p99_ms, static_cast<long long>(errors));
      o << line;
    }
  }
  if (!r.config.slo.stat.empty()) {
    o << "\nlatency SLO " << r.config.slo.stat << " <= " << Num(r.config.slo.ms, 1) << " ms: "
      << (r.knee < 0 ? "no level met it"
                     : "met up to " + LevelName(r.levels[static_cast<size_t>(r.knee)]) + " (" +
                           Num(r.levels[static_cast<size_t>(r.knee)].rps, 1) + " req/s)")
      << "\n";
  }
  return o.str();
}

std::string ReportToCsv(const BenchReport& r) {
  std::string s =
      "concurrency,requests,ok,errors,seconds,rps,gflops,min_ms,mean_ms,p50_ms,p90_ms,p95_ms,p99_"
      "ms,max_ms,server_queue_ms,server_compute_ms,target_rps,late,dropped,client_cpus,client_"
      "saturated\n";
  for (const auto& l : r.levels) {
    int64_t errors = 0;
    for (const auto& [code, n] : l.errors) errors += n;
    s += std::to_string(l.concurrency) + "," + std::to_string(l.count) + "," +
         std::to_string(l.ok) + "," + std::to_string(errors) + "," + Num(l.seconds, 3) + "," +
         Num(l.rps, 2) + "," + Num(l.gflops, 3) + "," + Num(l.min_ms) + "," + Num(l.mean_ms) + "," +
         Num(l.p50_ms) + "," + Num(l.p90_ms) + "," + Num(l.p95_ms) + "," + Num(l.p99_ms) + "," +
         Num(l.max_ms) + "," + Num(l.server_queue_ms) + "," + Num(l.server_compute_ms) + "," +
         Num(l.target_rps) + "," + std::to_string(l.late) + "," + std::to_string(l.dropped) + "," +
         Num(l.client.cpus_used) + "," + (l.client.saturated ? "1" : "0") + "\n";
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
    << ", \"duration_s\": " << Num(c.duration_s) << ", \"rps\": " << NumList(c.rps)
    << ", \"arrival\": " << JsonQuote(c.arrival == Arrival::kPoisson ? "poisson" : "constant")
    << ", \"latency_slo\": "
    << (c.slo.stat.empty()
            ? "null"
            : "{\"stat\": " + JsonQuote(c.slo.stat) + ", \"ms\": " + Num(c.slo.ms) + "}")
    << ", \"stability_pct\": " << Num(c.stability_pct) << ", \"window_s\": " << Num(c.window_s)
    << ", \"max_windows\": " << c.max_windows << ", \"metrics_url\": " << JsonQuote(c.metrics_url)
    << ", \"workload\": " << MixJson(c) << ", \"warmup_s\": " << Num(c.warmup_s)
    << ", \"timeout_s\": " << Num(c.timeout_s)
    << ", \"retry\": " << (c.channel.retry_unavailable ? "true" : "false")
    << ", \"tls\": " << (c.channel.UsesTls() ? "true" : "false")
    << ", \"token\": " << (c.channel.token.empty() ? "false" : "true")
    << ", \"verify\": " << (c.verify ? "true" : "false")
    << "},\n  \"machine\": {\"cpu_model\": " << JsonQuote(r.machine.cpu_model)
    << ", \"kernel_tier\": " << JsonQuote(r.machine.kernel_tier)
    << ", \"onednn_isa\": " << JsonQuote(r.machine.onednn_isa)
    << ", \"client_cpus\": " << r.machine.cpus << "},\n  \"knee\": " << r.knee
    << ",\n  \"levels\": [";
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
      << "}, \"response_bytes\": " << l.response_bytes << ", " << LevelExtrasJson(l) << "}";
  }
  o << "\n  ]\n}\n";
  return o.str();
}

}  // namespace attn::client
