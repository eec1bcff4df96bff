// attention-server's configuration: flags, each with an ATTN_* environment
// variable (a flag beats its variable, which beats the default).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "attn/status.h"
#include "request_limits.h"
#include "server_log.h"

namespace attn::server {

struct ServerConfig {
  std::string host = "0.0.0.0";    // --host, ATTN_HOST
  int port = 50051;                // --port, ATTN_PORT (0 picks a free port)
  std::string model_dir;           // --model-dir, ATTN_MODEL_DIR; empty: demo models
  int threads = 0;                 // --threads, ATTN_THREADS; 0: the CPUs this process may use
  std::string log_level = "info";  // --log-level, ATTN_LOG_LEVEL
  LogFormat log_format = LogFormat::kText;  // --log-format text|json, ATTN_LOG_FORMAT
  int max_queue = 256;                      // --max-queue, ATTN_MAX_QUEUE
  double shutdown_grace_s = 10;             // --shutdown-grace, ATTN_SHUTDOWN_GRACE (seconds)
  RequestLimits limits;                     // --max-message-mb and the other --max-* flags
};

// Parses argv (without argv[0]) over the environment read through `getenv`.
// Returns INVALID_ARGUMENT naming the flag for a bad value or unknown flag.
// Sets *help when --help was given.
StatusOr<ServerConfig> ParseServerConfig(const std::vector<std::string>& args,
                                         const std::function<const char*(const char*)>& getenv,
                                         bool* help);

// The --help text.
std::string ServerUsage();

}  // namespace attn::server
