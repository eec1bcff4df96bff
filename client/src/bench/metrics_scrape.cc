#include "bench/metrics_scrape.h"

#include <httplib.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <vector>

namespace attn::client {
namespace {

// The value of label `key` in "name{a="x",key="y"}", or "".
std::string Label(const std::string& series, const std::string& key) {
  const auto at = series.find(key + "=\"");
  if (at == std::string::npos) return "";
  const auto begin = at + key.size() + 2;
  return series.substr(begin, series.find('"', begin) - begin);
}

std::string Name(const std::string& series) { return series.substr(0, series.find('{')); }

// Sum over every series of `name` (all labels), after minus before.
double Delta(const MetricsPage& a, const MetricsPage& b, const std::string& name) {
  double d = 0;
  for (const auto& [series, v] : b) {
    if (Name(series) != name) continue;
    const auto it = a.find(series);
    d += v - (it == a.end() ? 0 : it->second);
  }
  return d;
}

// The 99th percentile's bucket bound (ms) of histogram `name` between scrapes.
double P99(const MetricsPage& a, const MetricsPage& b, const std::string& name) {
  std::map<double, double> by_le;  // cumulative counts by upper bound
  for (const auto& [series, v] : b) {
    if (Name(series) != name + "_bucket") continue;
    const std::string le = Label(series, "le");
    const double bound = le == "+Inf" ? 1e300 : std::strtod(le.c_str(), nullptr);
    const auto it = a.find(series);
    by_le[bound] += v - (it == a.end() ? 0 : it->second);
  }
  if (by_le.empty() || by_le.rbegin()->second <= 0) return 0;
  const double want = 0.99 * by_le.rbegin()->second;
  for (const auto& [bound, n] : by_le) {
    if (n >= want) return bound * 1e3;
  }
  return 0;
}

}  // namespace

MetricsPage ParseMetricsText(const std::string& text) {
  MetricsPage page;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto space = line.rfind(' ');
    if (space == std::string::npos) continue;
    char* end = nullptr;
    const double v = std::strtod(line.c_str() + space + 1, &end);
    if (end != line.c_str() + space + 1) page[line.substr(0, space)] = v;
  }
  return page;
}

StatusOr<MetricsPage> ScrapeMetrics(const std::string& url) {
  // http://host:port/path
  const std::string rest = url.substr(url.find("//") + 2);
  const auto slash = rest.find('/');
  const std::string host_port = rest.substr(0, slash);
  const std::string path = slash == std::string::npos ? "/metrics" : rest.substr(slash);
  httplib::Client http("http://" + host_port);
  http.set_connection_timeout(2);
  http.set_read_timeout(5);
  auto res = http.Get(path);
  if (!res)
    return Status::Unavailable("--metrics-url " + url + ": " + httplib::to_string(res.error()));
  if (res->status != 200) {
    return Status::Unavailable("--metrics-url " + url + ": HTTP " + std::to_string(res->status));
  }
  return ParseMetricsText(res->body);
}

ServerView CompareMetrics(const MetricsPage& a, const MetricsPage& b) {
  ServerView v;
  v.scraped = true;
  for (const auto& [series, n] : b) {
    if (Name(series) != "attn_requests_total") continue;
    const auto it = a.find(series);
    const double d = n - (it == a.end() ? 0 : it->second);
    if (d > 0) v.by_code[Label(series, "code")] += d;
  }
  auto mean_ms = [&](const std::string& h) {
    const double count = Delta(a, b, h + "_count");
    return count > 0 ? Delta(a, b, h + "_sum") / count * 1e3 : 0.0;
  };
  v.latency_mean_ms = mean_ms("attn_request_duration_seconds");
  v.queue_mean_ms = mean_ms("attn_queue_duration_seconds");
  v.compute_mean_ms = mean_ms("attn_compute_duration_seconds");
  v.queue_p99_ms = P99(a, b, "attn_queue_duration_seconds");
  v.compute_p99_ms = P99(a, b, "attn_compute_duration_seconds");
  const auto rss = b.find("process_resident_memory_bytes");
  if (rss != b.end()) v.rss_mib = rss->second / (1 << 20);
  return v;
}

}  // namespace attn::client
