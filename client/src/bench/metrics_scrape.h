// attention-client bench --metrics-url: the server's own view of a level,
// from its Prometheus /metrics scraped before and after.
#pragma once

#include <map>
#include <string>

#include "attn/status.h"

namespace attn::client {

// Every sample of a Prometheus text page: "name{labels}" -> value.
using MetricsPage = std::map<std::string, double>;

StatusOr<MetricsPage> ScrapeMetrics(const std::string& url);
MetricsPage ParseMetricsText(const std::string& text);

struct ServerView {
  bool scraped = false;
  std::string error;                      // why not, when not
  std::map<std::string, double> by_code;  // finished calls in the level, by gRPC code name
  double latency_mean_ms = 0, queue_mean_ms = 0, compute_mean_ms = 0;
  double queue_p99_ms = 0, compute_p99_ms = 0;  // from the histograms' buckets (upper bounds)
  double rss_mib = 0;                           // after the level
};

// What happened between two scrapes.
ServerView CompareMetrics(const MetricsPage& before, const MetricsPage& after);

}  // namespace attn::client
