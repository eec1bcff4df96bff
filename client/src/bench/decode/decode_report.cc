// bench --op decode's report: text, JSON and a self-contained HTML page.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "attn/json.h"
#include "bench/decode/decode_bench.h"
#include "wire/cache_formats.h"

namespace attn::client {
namespace {

namespace v1 = attention::v1;

// The cache as its sessions store it: "bfloat16", or "bfloat16, keys int8,
// values fp8_e4m3" when a side is quantized.
std::string CacheDescription(const DecodeBenchConfig& c) {
  const std::string type = wire::CacheDtypeName(c.cache_dtype);
  auto side = [&](v1::CacheFormat f) -> std::string {
    return f == v1::CACHE_FORMAT_UNSPECIFIED ? type : wire::CacheFormatName(f);
  };
  std::string s = type;
  if (c.key_format != v1::CACHE_FORMAT_UNSPECIFIED ||
      c.value_format != v1::CACHE_FORMAT_UNSPECIFIED) {
    s += ", keys " + side(c.key_format) + ", values " + side(c.value_format);
  }
  return s;
}

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

// (label, value) rows: what the text, JSON-less summary and the page share.
std::vector<std::pair<std::string, std::string>> Figures(const DecodeReport& r) {
  const DecodeBenchConfig& c = r.config;
  const double read = r.memory_read_gbps;
  return {
      {"session-steps/s (all clients)", Fmt("%.1f", r.session_steps_per_s) + " (over wall time: " +
                                            Fmt("%.1f", r.wall_session_steps_per_s()) + ")"},
      {"step latency p50 / p90 / p99", Fmt("%.3f", r.step_p50_ms) + " / " +
                                           Fmt("%.3f", r.step_p90_ms) + " / " +
                                           Fmt("%.3f", r.step_p99_ms) + " ms"},
      {"ms per token (" + std::to_string(c.layers) + " layer steps) p50 / p90 / p99",
       Fmt("%.3f", r.token_p50_ms) + " / " + Fmt("%.3f", r.token_p90_ms) + " / " +
           Fmt("%.3f", r.token_p99_ms) + " ms"},
      {"tokens/s (all clients)", Fmt("%.1f", r.tokens_per_s)},
      {"mean cache length of the measured steps", Fmt("%.1f", r.mean_cache_tokens) + " tokens"},
      {"cache read", Fmt("%.2f", r.cache_gbps) + " GB/s; memory read here " + Fmt("%.2f", read) +
                         " GB/s; ratio " + Fmt("%.2f", read > 0 ? r.cache_gbps / read : 0.0)},
      {"memory-bound limit", Fmt("%.2f", r.bytes_per_token() / 1e6) +
                                 " MB a token per client: " + Fmt("%.3f", r.limit_ms_per_token()) +
                                 " ms per token, " + Fmt("%.1f", r.limit_tokens_per_s()) +
                                 " tokens/s for every client together"},
  };
}

}  // namespace

std::string DecodeReportText(const DecodeReport& r) {
  const DecodeBenchConfig& c = r.config;
  std::ostringstream o;
  char line[640];
  std::snprintf(
      line, sizeof(line),
      "decode: %lld client(s) x %lld session(s) x %lld prefill%s, steps of %lld token(s), %lld "
      "layer(s) a token, Hq %lld / Hkv %lld, D %lld, %s cache\nCPU %s (%d CPUs; engine tier here "
      "%s)\n",
      static_cast<long long>(c.concurrency), static_cast<long long>(c.sessions),
      static_cast<long long>(c.prefill), c.hold_length ? " (held there)" : "",
      static_cast<long long>(c.step_tokens), static_cast<long long>(c.layers),
      static_cast<long long>(c.hq), static_cast<long long>(c.hkv), static_cast<long long>(c.d),
      CacheDescription(c).c_str(), r.machine.cpu_model.c_str(), r.machine.cpus,
      r.machine.kernel_tier.c_str());
  o << line << "measured " << r.steps << " steps (" << r.session_steps << " session-steps, "
    << r.token_rounds << " tokens of every client's sessions) in " << Fmt("%.2f", r.seconds)
    << " s\n";
  for (const auto& [k, v] : Figures(r)) o << k << ": " << v << "\n";
  if (c.verify) {
    o << "verified " << r.verified << " steps against core: " << r.mismatches << " mismatches\n";
  }
  if (r.errors > 0) o << "errors: " << r.errors << " (first: " << r.first_error << ")\n";
  return o.str();
}

std::string DecodeReportJson(const DecodeReport& r) {
  const DecodeBenchConfig& c = r.config;
  std::ostringstream o;
  o.precision(6);
  o << "{\"op\":\"decode\",\"concurrency\":" << c.concurrency << ",\"sessions\":" << c.sessions
    << ",\"prefill\":" << c.prefill << ",\"hold_length\":" << (c.hold_length ? "true" : "false")
    << ",\"step_tokens\":" << c.step_tokens << ",\"num_heads\":" << c.hq
    << ",\"num_kv_heads\":" << c.hkv << ",\"dim\":" << c.d << ",\"layers\":" << c.layers
    << ",\"cache_dtype\":\"" << wire::CacheDtypeName(c.cache_dtype) << "\",\"cache\":\""
    << CacheDescription(c) << "\",\"cpu_model\":" << JsonQuote(r.machine.cpu_model)
    << ",\"cpus\":" << r.machine.cpus << ",\"engine_tier\":\"" << r.machine.kernel_tier
    << "\",\"steps\":" << r.steps << ",\"session_steps\":" << r.session_steps
    << ",\"tokens\":" << r.tokens << ",\"token_rounds\":" << r.token_rounds
    << ",\"seconds\":" << r.seconds << ",\"call_seconds\":" << r.call_seconds
    << ",\"session_steps_per_s\":" << r.session_steps_per_s
    << ",\"wall_session_steps_per_s\":" << r.wall_session_steps_per_s()
    << ",\"tokens_per_s\":" << r.tokens_per_s << ",\"step_p50_ms\":" << r.step_p50_ms
    << ",\"step_p90_ms\":" << r.step_p90_ms << ",\"step_p99_ms\":" << r.step_p99_ms
    << ",\"token_p50_ms\":" << r.token_p50_ms << ",\"token_p90_ms\":" << r.token_p90_ms
    << ",\"token_p99_ms\":" << r.token_p99_ms << ",\"mean_cache_tokens\":" << r.mean_cache_tokens
    << ",\"cache_bytes\":" << r.cache_bytes << ",\"cache_gbps\":" << r.cache_gbps
    << ",\"memory_read_gbps\":" << r.memory_read_gbps
    << ",\"bytes_per_token\":" << r.bytes_per_token()
    << ",\"limit_ms_per_token\":" << r.limit_ms_per_token()
    << ",\"limit_tokens_per_s\":" << r.limit_tokens_per_s() << ",\"verified\":" << r.verified
    << ",\"mismatches\":" << r.mismatches << ",\"errors\":" << r.errors << "}\n";
  return o.str();
}

std::string DecodeReportHtml(const DecodeReport& r) {
  const DecodeBenchConfig& c = r.config;
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>attention-client "
       "bench --op decode</title><style>"
       "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1000px}"
       "h1{font-size:22px}h2{font-size:17px;margin-top:24px}"
       "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;"
       "text-align:left}th{background:#f3f3f3}.bar{fill:#6a8fc7}.tick{font-size:11px;fill:#555}"
       ".warn{color:#b00}</style></head><body><h1>attention-client bench --op decode</h1>";
  if (r.errors > 0) {
    o << "<p class=\"warn\">" << r.errors << " errors (first: " << HtmlEscape(r.first_error)
      << ")</p>";
  }
  o << "<h2>Workload and machine</h2><table id=\"config\">";
  auto row = [&](const std::string& k, const std::string& v) {
    o << "<tr><th>" << HtmlEscape(k) << "</th><td>" << HtmlEscape(v) << "</td></tr>";
  };
  row("clients", std::to_string(c.concurrency) + ", each with its own connection and " +
                     std::to_string(c.sessions) + " session(s) in one Extend a step");
  row("a token", std::to_string(c.layers) + " sequential steps, one per layer, of " +
                     std::to_string(c.step_tokens) + " token(s) per session");
  row("cache", std::to_string(c.prefill) + " tokens prefilled" +
                   (c.hold_length ? ", held there (truncated after each token)" : "") + "; Hq " +
                   std::to_string(c.hq) + " / Hkv " + std::to_string(c.hkv) + ", D " +
                   std::to_string(c.d) + ", " + CacheDescription(c));
  row("target", c.target);
  row("machine", r.machine.cpu_model + ", " + std::to_string(r.machine.cpus) +
                     " CPUs, engine tier " + r.machine.kernel_tier);
  row("measured", std::to_string(r.steps) + " steps, " + std::to_string(r.token_rounds) +
                      " tokens, " + Fmt("%.2f", r.seconds) + " s");
  o << "</table><h2>Figures</h2><table id=\"figures\">";
  for (const auto& [k, v] : Figures(r)) row(k, v);
  o << "</table><h2>Latency of a token</h2>";
  // A histogram of the tokens' latencies: 20 log-spaced buckets over [min, max].
  constexpr int kBuckets = 20, w = 680, h = 240, left = 50, bottom = 44, top = 10;
  std::vector<int64_t> counts(kBuckets, 0);
  double lo = 0, hi = 0;
  if (!r.token_ms.empty()) {
    lo = std::max(1e-6, *std::min_element(r.token_ms.begin(), r.token_ms.end()));
    hi = std::max(lo * 1.001, *std::max_element(r.token_ms.begin(), r.token_ms.end()));
    for (double v : r.token_ms) {
      const double at = std::log(std::max(v, lo) / lo) / std::log(hi / lo) * kBuckets;
      ++counts[static_cast<size_t>(std::clamp(static_cast<int>(at), 0, kBuckets - 1))];
    }
  }
  const int64_t peak = std::max<int64_t>(1, *std::max_element(counts.begin(), counts.end()));
  o << "<svg id=\"token-latency\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w
    << "\" height=\"" << h << "\"><line x1=\"" << left << "\" y1=\"" << h - bottom << "\" x2=\""
    << w - 10 << "\" y2=\"" << h - bottom << "\" stroke=\"#333\"/><line x1=\"" << left << "\" y1=\""
    << top << "\" x2=\"" << left << "\" y2=\"" << h - bottom
    << "\" stroke=\"#333\"/><text class=\"tick\" x=\"" << left - 6 << "\" y=\"" << top + 10
    << "\" text-anchor=\"end\">" << peak << "</text><text class=\"tick\" x=\"" << left - 6
    << "\" y=\"" << h - bottom << "\" text-anchor=\"end\">0</text>";
  const double bw = static_cast<double>(w - left - 10) / kBuckets;
  for (int i = 0; i < kBuckets; ++i) {
    const double bh =
        (h - bottom - top) * static_cast<double>(counts[static_cast<size_t>(i)]) / peak;
    const double b0 = lo * std::pow(hi / lo, static_cast<double>(i) / kBuckets);
    const double b1 = lo * std::pow(hi / lo, static_cast<double>(i + 1) / kBuckets);
    o << "<rect class=\"bar\" x=\"" << Fmt("%.1f", left + i * bw + 1) << "\" y=\""
      << Fmt("%.1f", h - bottom - bh) << "\" width=\"" << Fmt("%.1f", bw - 2) << "\" height=\""
      << Fmt("%.1f", bh) << "\"><title>" << Fmt("%.3f", b0) << "-" << Fmt("%.3f", b1)
      << " ms: " << counts[static_cast<size_t>(i)] << " tokens</title></rect>";
    if (i % 5 == 0) {
      o << "<text class=\"tick\" x=\"" << Fmt("%.1f", left + i * bw) << "\" y=\"" << h - bottom + 14
        << "\" text-anchor=\"middle\">" << Fmt("%.3g", b0) << "</text>";
    }
  }
  o << "<text class=\"tick\" x=\"" << w - 10 << "\" y=\"" << h - bottom + 14
    << "\" text-anchor=\"end\">" << Fmt("%.3g", hi) << "</text><text class=\"tick\" x=\""
    << (left + w) / 2 << "\" y=\"" << h - 8
    << "\" text-anchor=\"middle\">ms per token (log scale); bar height: tokens</text></svg><p>"
    << r.token_ms.size() << " measured tokens; the memory-bound limit of one is "
    << Fmt("%.3f", r.limit_ms_per_token())
    << " ms at this machine's read rate.</p></body></html>\n";
  return o.str();
}

}  // namespace attn::client
