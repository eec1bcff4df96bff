// attention-server's configuration: flags, each with an ATTN_* environment
// variable (a flag beats its variable, which beats the default).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "attn/status.h"
#include "call/request_limits.h"
#include "ops/server_log.h"

namespace attn::server {

struct ServerConfig {
  std::string host = "0.0.0.0";  // --host, ATTN_HOST
  int port = 50051;              // --port, ATTN_PORT (0 picks a free port)
  // --unix-socket, ATTN_UNIX_SOCKET: also serve gRPC on this Unix-domain
  // socket (a co-located engine), with the same credentials, tokens, limits
  // and metrics; the file is made mode 0660. Empty: none.
  std::string unix_socket;
  std::string model_dir;           // --model-dir, ATTN_MODEL_DIR; empty: demo models
  int threads = 0;                 // --threads, ATTN_THREADS; 0: the CPUs this process may use
  std::string log_level = "info";  // --log-level, ATTN_LOG_LEVEL
  LogFormat log_format = LogFormat::kText;  // --log-format text|json, ATTN_LOG_FORMAT
  int max_inflight = 256;                   // --max-inflight, ATTN_MAX_INFLIGHT
  int max_queue = 128;                      // --max-queue, ATTN_MAX_QUEUE
  int max_streams = 100;  // --max-streams, ATTN_MAX_STREAMS: concurrent streams per connection
  // --memory-quota-mb, ATTN_MEMORY_QUOTA_MB: gRPC's ResourceQuota, and the
  // bytes of requests and unsent answers the service holds before it refuses
  // calls from the connections that hold the most.
  int64_t memory_quota_bytes = int64_t{512} << 20;
  double shutdown_grace_s = 10;  // --shutdown-grace, ATTN_SHUTDOWN_GRACE (seconds)
  RequestLimits limits;          // --max-message-mb and the other --max-* flags
  int metrics_port = -1;         // --metrics-port, ATTN_METRICS_PORT; -1: off, 0: a free port
  int http_port = -1;            // --http-port, ATTN_HTTP_PORT (OIP HTTP/JSON); -1: off, 0: free
  std::string tls_cert;          // --tls-cert, ATTN_TLS_CERT (PEM); with tls_key: serve TLS
  std::string tls_key;           // --tls-key, ATTN_TLS_KEY (PEM)
  std::string tls_client_ca;     // --tls-client-ca, ATTN_TLS_CLIENT_CA: require client certs
  std::string auth_token_file;   // --auth-token-file, ATTN_AUTH_TOKEN_FILE: require a token
  // KV-cache sessions (SessionService).
  int64_t kv_cache_bytes = int64_t{1024} << 20;  // --kv-cache-mb, ATTN_KV_CACHE_MB: the page pool
  int64_t max_sessions = 4096;                   // --max-sessions, ATTN_MAX_SESSIONS
  // Per principal; 0: no limit beyond the server's.
  int64_t max_sessions_per_principal = 0;    // --max-sessions-per-principal
  int64_t kv_cache_bytes_per_principal = 0;  // --kv-cache-mb-per-principal
  int64_t max_session_tokens = 131072;  // --max-session-tokens, ATTN_MAX_SESSION_TOKENS, per layer
  double session_idle_timeout_s =
      600;  // --session-idle-timeout, ATTN_SESSION_IDLE_TIMEOUT; 0: never
  // --container-memory-mb, ATTN_CONTAINER_MEMORY_MB: the container's memory
  // limit; without --kv-cache-mb, the pool is this less --memory-quota-mb
  // and 256 MiB for the rest (at least 64 MiB).
  int64_t container_memory_mb = 0;
  bool kv_cache_given = false;  // --kv-cache-mb or ATTN_KV_CACHE_MB was set
};

// Parses argv (without argv[0]) over the environment read through `getenv`.
// Returns INVALID_ARGUMENT naming the flag for a bad value or unknown flag.
// Sets *help when --help was given. Flags that only make sense together
// (--tls-cert and --tls-key; --tls-client-ca needs them) are checked too.
StatusOr<ServerConfig> ParseServerConfig(const std::vector<std::string>& args,
                                         const std::function<const char*(const char*)>& getenv,
                                         bool* help);

// The --help text.
std::string ServerUsage();

}  // namespace attn::server
