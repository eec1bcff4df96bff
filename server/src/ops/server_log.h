// The server's log lines, on spdlog: text (default) or JSON lines, one
// access line per call, and error lines rate-limited so that a flood of bad
// requests cannot fill the disk.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdint>
#include <string>

namespace attn::server {

enum class LogFormat { kText, kJson };

// Sets spdlog's level and pattern. JSON lines carry "time" and "level" and
// then the record's own fields.
void ConfigureLogging(const std::string& level, LogFormat format);

// A free-form line (start-up, shutdown): "msg" in JSON.
void LogMessage(spdlog::level::level_enum level, const std::string& message);

// One finished call. OK calls log at debug; failed ones at warn, at most
// kMaxErrorLinesPerSecond a second; the next line that gets through says how
// many were suppressed.
struct AccessRecord {
  const char* rpc = "";
  const char* protocol = "attention.v1";  // "oip-grpc", "oip-http"
  std::string model;                      // "-" for none
  // The caller: a token's name, a certificate's subject, "-" for the
  // anonymous principal, "?" when the call was refused before one was known.
  std::string principal = "?";
  std::string shapes;
  const char* precision = "";  // what a computed call used: "float32" or "bfloat16"
  const char* code = "OK";
  double latency_ms = 0;
  std::string peer;
  std::string reason;  // empty when OK
};
constexpr int kMaxErrorLinesPerSecond = 20;
void LogAccess(const AccessRecord& record);

// `s` with every control character (and, for quoting, '"' and '\\') escaped
// as \xNN, \" and \\: one record is always one line.
std::string EscapeLogText(const std::string& s);

// The text of a record, as it would be logged (for tests).
std::string FormatAccess(const AccessRecord& record, LogFormat format, int64_t suppressed);

}  // namespace attn::server
