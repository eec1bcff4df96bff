#include "ops/server_log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>

#include "attn/json.h"

namespace attn::server {
namespace {

std::atomic<LogFormat> g_format{LogFormat::kText};

// Error lines allowed in the current one-second window, and those dropped.
class ErrorRateLimiter {
 public:
  // Returns true to log; *suppressed is how many were dropped since the last
  // line that got through.
  bool Allow(int64_t* suppressed) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now - window_start_ >= std::chrono::seconds(1)) {
      window_start_ = now;
      in_window_ = 0;
    }
    if (in_window_ >= kMaxErrorLinesPerSecond) {
      ++dropped_;
      return false;
    }
    ++in_window_;
    *suppressed = dropped_;
    dropped_ = 0;
    return true;
  }

 private:
  std::mutex mu_;
  std::chrono::steady_clock::time_point window_start_{};
  int in_window_ = 0;
  int64_t dropped_ = 0;
};

ErrorRateLimiter& Limiter() {
  static auto* limiter = new ErrorRateLimiter();
  return *limiter;
}

// Control characters as \xNN, and with `quotes`, '"' and '\\' escaped too.
std::string Escaped(const std::string& s, bool quotes) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    } else if (quotes && (c == '"' || c == '\\')) {
      out += '\\';
      out += ch;
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace

void ConfigureLogging(const std::string& level, LogFormat format) {
  g_format = format;
  spdlog::set_level(spdlog::level::from_str(level));
  if (format == LogFormat::kJson) {
    spdlog::set_pattern(R"({"time":"%Y-%m-%dT%H:%M:%S.%e","level":"%l",%v})");
  } else {
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  }
}

void LogMessage(spdlog::level::level_enum level, const std::string& message) {
  if (!spdlog::should_log(level)) return;
  if (g_format == LogFormat::kJson) {
    spdlog::log(level, "\"msg\":{}", JsonQuote(message));
  } else {
    spdlog::log(level, "{}", Escaped(message, false));
  }
}

std::string EscapeLogText(const std::string& s) { return Escaped(s, true); }

std::string FormatAccess(const AccessRecord& r, LogFormat format, int64_t suppressed) {
  char latency[32];
  std::snprintf(latency, sizeof(latency), "%.3f", r.latency_ms);
  if (format == LogFormat::kJson) {
    std::string s = "\"rpc\":" + JsonQuote(r.rpc) + ",\"protocol\":" + JsonQuote(r.protocol) +
                    ",\"model\":" + JsonQuote(r.model) +
                    ",\"principal\":" + JsonQuote(r.principal) +
                    ",\"shapes\":" + JsonQuote(r.shapes) +
                    (*r.precision != '\0' ? ",\"precision\":" + JsonQuote(r.precision) : "") +
                    ",\"code\":" + JsonQuote(r.code) + ",\"latency_ms\":" + latency +
                    ",\"peer\":" + JsonQuote(r.peer);
    if (!r.reason.empty()) s += ",\"reason\":" + JsonQuote(r.reason);
    if (suppressed > 0) s += ",\"suppressed\":" + std::to_string(suppressed);
    return s;
  }
  std::string s = std::string("rpc=") + r.rpc + " protocol=" + r.protocol +
                  " model=" + EscapeLogText(r.model) + " principal=\"" +
                  EscapeLogText(r.principal) + "\" shapes=\"" + EscapeLogText(r.shapes) + "\"" +
                  (*r.precision != '\0' ? std::string(" precision=") + r.precision : "") +
                  " code=" + r.code + " latency_ms=" + latency + " peer=" + EscapeLogText(r.peer);
  if (!r.reason.empty()) s += " reason=\"" + EscapeLogText(r.reason) + "\"";
  if (suppressed > 0) s += " (" + std::to_string(suppressed) + " similar lines suppressed)";
  return s;
}

void LogAccess(const AccessRecord& r) {
  const bool ok = r.reason.empty();
  const auto level = ok ? spdlog::level::debug : spdlog::level::warn;
  if (!spdlog::should_log(level)) return;
  int64_t suppressed = 0;
  if (!ok && !Limiter().Allow(&suppressed)) return;
  spdlog::log(level, "{}", FormatAccess(r, g_format, suppressed));
}

}  // namespace attn::server
