// attention-client bench --html: one self-contained page (inline CSS and
// SVG written here; no scripts, nothing fetched), so that it opens anywhere.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "bench/report/bench_report.h"
#include "request_builder.h"

namespace attn::client {
namespace {

std::string Esc(const std::string& s) { return HtmlEscape(s); }

std::string F(double v, int precision = 2) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f", precision, v);
  return buf;
}

// A round step for about `n` ticks over [0, hi].
double TickStep(double hi, int n) {
  const double raw = std::max(hi, 1e-9) / n;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * mag >= raw) return m * mag;
  }
  return 10 * mag;
}

constexpr int kW = 640, kH = 360, kLeft = 64, kRight = 20, kTop = 20, kBottom = 48;

// Axes with ticks and labels over [0, xmax] x [0, ymax].
std::string Axes(double xmax, double ymax, const std::string& xlabel, const std::string& ylabel) {
  std::ostringstream o;
  const int x0 = kLeft, y0 = kH - kBottom, x1 = kW - kRight, y1 = kTop;
  o << "<line class=\"axis\" x1=\"" << x0 << "\" y1=\"" << y0 << "\" x2=\"" << x1 << "\" y2=\""
    << y0 << "\"/><line class=\"axis\" x1=\"" << x0 << "\" y1=\"" << y0 << "\" x2=\"" << x0
    << "\" y2=\"" << y1 << "\"/>";
  const double xs = TickStep(xmax, 6), ys = TickStep(ymax, 5);
  auto digits = [](double step) { return step >= 1 ? 0 : step >= 0.1 ? 2 : 3; };
  for (double v = 0; v <= xmax * 1.0001; v += xs) {
    const double x = x0 + (x1 - x0) * v / xmax;
    o << "<line class=\"grid\" x1=\"" << F(x) << "\" y1=\"" << y0 << "\" x2=\"" << F(x)
      << "\" y2=\"" << y1 << "\"/><text class=\"tick\" x=\"" << F(x) << "\" y=\"" << y0 + 16
      << "\" text-anchor=\"middle\">" << F(v, digits(xs)) << "</text>";
  }
  for (double v = 0; v <= ymax * 1.0001; v += ys) {
    const double y = y0 - (y0 - y1) * v / ymax;
    o << "<line class=\"grid\" x1=\"" << x0 << "\" y1=\"" << F(y) << "\" x2=\"" << x1 << "\" y2=\""
      << F(y) << "\"/><text class=\"tick\" x=\"" << x0 - 6 << "\" y=\"" << F(y + 4)
      << "\" text-anchor=\"end\">" << F(v, digits(ys)) << "</text>";
  }
  o << "<text class=\"label\" x=\"" << (x0 + x1) / 2 << "\" y=\"" << kH - 8
    << "\" text-anchor=\"middle\">" << Esc(xlabel) << "</text><text class=\"label\" x=\"14\" y=\""
    << (y0 + y1) / 2 << "\" transform=\"rotate(-90 14 " << (y0 + y1) / 2
    << ")\" text-anchor=\"middle\">" << Esc(ylabel) << "</text>";
  return o.str();
}

// Latency (p50 and p99) against achieved throughput, a point per level.
std::string LatencyThroughputChart(const BenchReport& r) {
  double xmax = 0, ymax = 0;
  for (const auto& l : r.levels) xmax = std::max(xmax, l.rps), ymax = std::max(ymax, l.p99_ms);
  xmax = std::max(xmax, 1e-3) * 1.1, ymax = std::max(ymax, 1e-3) * 1.1;
  std::ostringstream o;
  o << "<svg id=\"latency-throughput\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW
    << "\" height=\"" << kH << "\" viewBox=\"0 0 " << kW << " " << kH << "\">"
    << Axes(xmax, ymax, "throughput (req/s)", "latency (ms)");
  auto px = [&](double v) { return kLeft + (kW - kLeft - kRight) * v / xmax; };
  auto py = [&](double v) { return (kH - kBottom) - (kH - kBottom - kTop) * v / ymax; };
  for (const char* series : {"p50", "p99"}) {
    const bool p99 = std::string(series) == "p99";
    std::string points;
    for (const auto& l : r.levels) {
      points += F(px(l.rps)) + "," + F(py(p99 ? l.p99_ms : l.p50_ms)) + " ";
    }
    o << "<polyline class=\"series " << series << "\" points=\"" << points << "\"/>";
    for (size_t i = 0; i < r.levels.size(); ++i) {
      const auto& l = r.levels[i];
      o << "<circle class=\"point " << series << "\" data-level=\"" << i << "\" cx=\""
        << F(px(l.rps)) << "\" cy=\"" << F(py(p99 ? l.p99_ms : l.p50_ms)) << "\" r=\"4\"><title>"
        << Esc(LevelName(l)) << ": " << F(l.rps, 1) << " req/s, " << series << " "
        << F(p99 ? l.p99_ms : l.p50_ms, 3) << " ms</title></circle>";
    }
  }
  o << "<g class=\"legend\"><rect class=\"p50\" x=\"" << kW - 150 << "\" y=\"28\" width=\"12\" "
    << "height=\"12\"/><text x=\"" << kW - 132 << "\" y=\"39\">p50</text><rect class=\"p99\" x=\""
    << kW - 90 << "\" y=\"28\" width=\"12\" height=\"12\"/><text x=\"" << kW - 72
    << "\" y=\"39\">p99</text></g></svg>";
  return o.str();
}

std::string Histogram(const LevelReport& l, size_t index) {
  constexpr int w = 300, h = 140, left = 8, bottom = 30;
  int64_t peak = 1;
  for (const auto& [ub, n] : l.histogram) peak = std::max(peak, n);
  std::ostringstream o;
  o << "<figure><svg class=\"histogram\" data-level=\"" << index
    << "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h << "\">";
  const double bw = static_cast<double>(w - 2 * left) / std::max<size_t>(1, l.histogram.size());
  for (size_t i = 0; i < l.histogram.size(); ++i) {
    const double bh = (h - bottom - 6) * static_cast<double>(l.histogram[i].second) / peak;
    o << "<rect class=\"bar\" x=\"" << F(left + i * bw + 1) << "\" y=\"" << F(h - bottom - bh)
      << "\" width=\"" << F(bw - 2) << "\" height=\"" << F(bh)
      << "\"><title>&lt;= " << F(l.histogram[i].first, 3) << " ms: " << l.histogram[i].second
      << "</title></rect>";
  }
  const double lo = l.histogram.empty() ? 0 : l.min_ms;
  o << "<text class=\"tick\" x=\"" << left << "\" y=\"" << h - bottom + 14 << "\">" << F(lo, 2)
    << " ms</text><text class=\"tick\" x=\"" << w - left << "\" y=\"" << h - bottom + 14
    << "\" text-anchor=\"end\">" << F(l.max_ms, 2) << " ms</text></svg><figcaption>"
    << Esc(LevelName(l)) << ": " << l.ok << " calls (log-spaced buckets)</figcaption></figure>";
  return o.str();
}

void ConfigTable(const BenchReport& r, std::ostringstream& o) {
  const BenchConfig& c = r.config;
  auto row = [&](const std::string& k, const std::string& v) {
    o << "<tr><th>" << Esc(k) << "</th><td>" << Esc(v) << "</td></tr>";
  };
  o << "<table class=\"kv\">";
  row("workload", r.workload + " (" + F(r.flops_per_call / 1e6, 2) + " MFLOP/call, " +
                      std::to_string(r.request_bytes) + " request bytes)");
  for (const auto& e : c.mix)
    row("entry " + e.name, "weight " + F(e.weight, 2) + ", " + e.call->op);
  row("target", c.target + ", " + std::to_string(c.connections) + " connection(s), protocol " +
                    (c.oip ? "oip" : "native") + ", dtype " + DtypeName(c.dtype));
  row("load", c.rps.empty()
                  ? "closed loop"
                  : std::string("open loop, ") +
                        (c.arrival == Arrival::kPoisson ? "poisson" : "constant") + " arrivals");
  row("per level", c.stability_pct > 0
                       ? "until 3 windows of " + F(c.window_s, 1) + " s agree within " +
                             F(c.stability_pct, 1) + "%"
                       : F(c.duration_s, 1) + " s after " + F(c.warmup_s, 1) + " s of warm-up");
  if (!c.slo.stat.empty()) {
    row("latency SLO",
        c.slo.stat + " <= " + F(c.slo.ms, 1) + " ms: " +
            (r.knee < 0 ? "no level met it" : "met up to " + LevelName(r.levels[r.knee])));
  }
  row("machine", r.machine.cpu_model + ", " + std::to_string(r.machine.cpus) +
                     " CPUs for the client, ISA tier " + r.machine.kernel_tier + " (oneDNN " +
                     r.machine.onednn_isa + ")");
  o << "</table>";
}

void Tables(const BenchReport& r, std::ostringstream& o) {
  o << "<h2>Percentiles</h2><table id=\"percentiles\"><tr><th>level</th><th>ok</th><th>errors"
       "</th><th>req/s</th><th>GFLOP/s</th><th>min</th><th>p50</th><th>p90</th><th>p95</th>"
       "<th>p99</th><th>max</th><th>late / dropped</th></tr>";
  for (size_t i = 0; i < r.levels.size(); ++i) {
    const auto& l = r.levels[i];
    int64_t errors = 0;
    for (const auto& [code, n] : l.errors) errors += n;
    o << "<tr" << (static_cast<int>(i) == r.knee ? " class=\"knee\"" : "") << "><td>"
      << Esc(LevelName(l)) << "</td><td>" << l.ok << "</td><td>" << errors << "</td><td>"
      << F(l.rps, 1) << "</td><td>" << F(l.gflops, 1) << "</td><td>" << F(l.min_ms, 3)
      << "</td><td>" << F(l.p50_ms, 3) << "</td><td>" << F(l.p90_ms, 3) << "</td><td>"
      << F(l.p95_ms, 3) << "</td><td>" << F(l.p99_ms, 3) << "</td><td>" << F(l.max_ms, 3)
      << "</td><td>"
      << (l.target_rps > 0 ? std::to_string(l.late) + " / " + std::to_string(l.dropped) : "-")
      << "</td></tr>";
  }
  o << "</table><p class=\"note\">Latencies in ms. In open loop they count from each call's "
       "scheduled send time.</p><h2>Where the time went</h2><table id=\"split\"><tr><th>level"
       "</th><th>client mean</th><th>server queue</th><th>server compute</th><th>transport and "
       "client</th><th>server /metrics</th><th>client CPU</th></tr>";
  for (const auto& l : r.levels) {
    std::string metrics = "-";
    if (l.server.scraped) {
      metrics = "queue " + F(l.server.queue_mean_ms, 3) + ", compute " +
                F(l.server.compute_mean_ms, 3) + " ms; RSS " + F(l.server.rss_mib, 1) + " MiB;";
      for (const auto& [code, n] : l.server.by_code) metrics += " " + code + " " + F(n, 0);
    }
    const double rest = l.mean_ms - l.server_queue_ms - l.server_compute_ms;
    o << "<tr" << (l.client.saturated ? " class=\"saturated\"" : "") << "><td>" << Esc(LevelName(l))
      << "</td><td>" << F(l.mean_ms, 3) << "</td><td>" << F(l.server_queue_ms, 3) << "</td><td>"
      << F(l.server_compute_ms, 3) << "</td><td>" << F(std::max(0.0, rest), 3) << "</td><td>"
      << Esc(metrics) << "</td><td>" << F(l.client.cpus_used, 2) << " of "
      << l.client.cpus_available << " CPUs, machine idle " << F(100 * l.client.machine_idle, 0)
      << "%" << (l.client.saturated ? " <strong>no spare CPU</strong>" : "") << "</td></tr>";
  }
  o << "</table>";
}

void EntryTable(const BenchReport& r, std::ostringstream& o) {
  if (r.config.mix.empty()) return;
  o << "<h2>Workload entries</h2><table id=\"entries\"><tr><th>level</th><th>entry</th><th>"
       "calls</th><th>req/s</th><th>p50</th><th>p99</th><th>errors</th></tr>";
  for (const auto& l : r.levels) {
    for (const auto& e : l.entries) {
      int64_t errors = 0;
      for (const auto& [code, n] : e.s.errors) errors += n;
      o << "<tr><td>" << Esc(LevelName(l)) << "</td><td>" << Esc(e.name) << "<br><small>"
        << Esc(e.workload) << "</small></td><td>" << e.s.ok << "</td><td>" << F(e.s.rps, 1)
        << "</td><td>" << F(e.s.p50_ms, 3) << "</td><td>" << F(e.s.p99_ms, 3) << "</td><td>"
        << errors << "</td></tr>";
    }
  }
  o << "</table>";
}

}  // namespace

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

std::string ReportToHtml(const BenchReport& r) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>attention-client "
       "bench report</title><style>"
       "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}"
       "h1{font-size:22px}h2{font-size:17px;margin-top:28px}"
       "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;"
       "text-align:right}th{background:#f3f3f3}table.kv th,table.kv td{text-align:left}"
       "tr.knee td{background:#e6f4e6}tr.saturated td{background:#fdecea}"
       ".axis{stroke:#333}.grid{stroke:#eee}.tick{font-size:11px;fill:#555}.label{font-size:12px}"
       ".series{fill:none;stroke-width:2}.series.p50,.legend .p50{stroke:#1f77b4;fill:none}"
       ".series.p99{stroke:#d62728}.point.p50{fill:#1f77b4}.point.p99{fill:#d62728}"
       ".legend rect.p50{fill:#1f77b4}.legend rect.p99{fill:#d62728}.legend text{font-size:12px}"
       ".bar{fill:#6a8fc7}figure{display:inline-block;margin:6px}figcaption{font-size:12px}"
       "td:first-child,th:first-child,#entries td:nth-child(2),#split "
       "td:nth-child(6){text-align:left}"
       ".note{color:#666;font-size:12px}.warn{color:#b00}"
       "</style></head><body><h1>attention-client bench</h1>";
  bool saturated = false;
  for (const auto& l : r.levels) saturated = saturated || l.client.saturated;
  if (saturated) {
    o << "<p class=\"warn\" id=\"client-warning\">The client had no spare CPU in at least one "
         "level (highlighted below): those numbers are the client's limit as much as the "
         "server's.</p>";
  }
  if (r.interrupted) o << "<p class=\"warn\">Interrupted: a partial report.</p>";
  o << "<h2>Configuration and machine</h2>";
  ConfigTable(r, o);
  o << "<h2>Latency against throughput</h2>" << LatencyThroughputChart(r)
    << "<h2>Latency histogram per level</h2><div id=\"histograms\">";
  for (size_t i = 0; i < r.levels.size(); ++i) o << Histogram(r.levels[i], i);
  o << "</div>";
  Tables(r, o);
  EntryTable(r, o);
  o << "</body></html>\n";
  return o.str();
}

}  // namespace attn::client
