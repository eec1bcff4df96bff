#include "server_config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>

#include "attn/kv_cache.h"
#include "attn/threading.h"

namespace attn::server {
namespace {

// A flag's setter gets the flag's name, for its error messages.
using Setter =
    std::function<Status(const std::string& name, const std::string& value, ServerConfig* c)>;

struct Flag {
  const char* env;
  const char* help;
  Setter set;
};

// An integer in [lo, hi], stored by `store`.
Setter Int(long long lo, long long hi, void (*store)(ServerConfig*, long long)) {
  return [lo, hi, store](const std::string& name, const std::string& v, ServerConfig* c) {
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno != 0 || x < lo || x > hi) {
      return Status::InvalidArgument(name + ": expected an integer in [" + std::to_string(lo) +
                                     ", " + std::to_string(hi) + "], got '" + v + "'");
    }
    store(c, x);
    return Status::Ok();
  };
}

// A finite number > 0 (or >= 0 with `allow_zero`); `expected` describes it.
Setter Number(bool allow_zero, const char* expected, void (*store)(ServerConfig*, double)) {
  return [allow_zero, expected, store](const std::string& name, const std::string& v,
                                       ServerConfig* c) {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(x) || x < 0 || (x == 0 && !allow_zero)) {
      return Status::InvalidArgument(name + ": expected " + expected + ", got '" + v + "'");
    }
    store(c, x);
    return Status::Ok();
  };
}

// One of `choices` ("a, b or c" in the message).
Setter OneOf(std::vector<std::string> choices, void (*store)(ServerConfig*, const std::string&)) {
  return [choices, store](const std::string& name, const std::string& v, ServerConfig* c) {
    for (const auto& choice : choices) {
      if (v == choice) {
        store(c, v);
        return Status::Ok();
      }
    }
    std::string list;
    for (size_t i = 0; i < choices.size(); ++i) {
      list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
    }
    return Status::InvalidArgument(name + ": expected " + list + ", got '" + v + "'");
  };
}

// Seconds in [0, max_s], given bare or with an s, m or h suffix ("90",
// "90s", "10m", "2h"). The bound keeps every later duration cast in range.
Setter Duration(double max_s, void (*store)(ServerConfig*, double)) {
  return [max_s, store](const std::string& name, const std::string& v, ServerConfig* c) {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    const std::string unit = end != nullptr ? end : "";
    const double mult = unit.empty() || unit == "s" ? 1
                        : unit == "m"               ? 60
                        : unit == "h"               ? 3600
                                                    : -1;
    if (v.empty() || end == v.c_str() || mult < 0 || !std::isfinite(x) || x < 0) {
      return Status::InvalidArgument(
          name + ": expected a duration >= 0 such as 600, 90s, 10m or 2h, got '" + v + "'");
    }
    if (x * mult > max_s) {
      return Status::InvalidArgument(name + ": expected a duration of at most " +
                                     std::to_string(static_cast<int64_t>(max_s / 3600)) + "h (" +
                                     std::to_string(static_cast<int64_t>(max_s)) + " s), got '" +
                                     v + "'");
    }
    store(c, x * mult);
    return Status::Ok();
  };
}

// A non-empty path, stored by `store` (opened at start-up, with its error).
Setter Path(void (*store)(ServerConfig*, const std::string&)) {
  return [store](const std::string& name, const std::string& v, ServerConfig* c) {
    if (v.empty()) return Status::InvalidArgument(name + ": expected a file path, got ''");
    store(c, v);
    return Status::Ok();
  };
}

// The KV-cache sessions' flags.
std::map<std::string, Flag> SessionFlags() {
  using C = ServerConfig;
  return {
      {"--kv-cache-mb",
       {"ATTN_KV_CACHE_MB",
        "the KV-cache sessions' page pool, MiB: every session's keys and values together; "
        "never over-committed (default 1024)",
        Int(1, 1LL << 30,
            [](C* c, long long x) {
              c->kv_cache_bytes = x << 20;
              c->kv_cache_given = true;
            })}},
      {"--container-memory-mb",
       {"ATTN_CONTAINER_MEMORY_MB",
        "the container's memory limit, MiB (the Kubernetes Deployment sets it from "
        "limits.memory): without --kv-cache-mb, the pool is this less --memory-quota-mb and "
        "256 MiB (default: unset)",
        Int(1, 1LL << 30, [](C* c, long long x) { c->container_memory_mb = x; })}},
      {"--max-sessions",
       {"ATTN_MAX_SESSIONS", "KV-cache sessions alive at once (default 4096)",
        Int(1, 1LL << 24, [](C* c, long long x) { c->max_sessions = x; })}},
      {"--max-sessions-per-principal",
       {"ATTN_MAX_SESSIONS_PER_PRINCIPAL",
        "KV-cache sessions one principal (a token's name, a certificate's subject) may have "
        "alive at once; 0 no limit beyond --max-sessions (default 0)",
        Int(0, 1LL << 24, [](C* c, long long x) { c->max_sessions_per_principal = x; })}},
      {"--kv-cache-mb-per-principal",
       {"ATTN_KV_CACHE_MB_PER_PRINCIPAL",
        "MiB of the page pool one principal's sessions may hold (a page shared by forks counts "
        "once); 0 no limit beyond --kv-cache-mb (default 0)",
        Int(0, 1LL << 30, [](C* c, long long x) { c->kv_cache_bytes_per_principal = x << 20; })}},
      {"--max-session-tokens",
       {"ATTN_MAX_SESSION_TOKENS",
        "tokens one session's layer may hold: its max_tokens' default and most (default 131072)",
        Int(1, 1LL << 32, [](C* c, long long x) { c->max_session_tokens = x; })}},
      {"--session-idle-timeout",
       {"ATTN_SESSION_IDLE_TIMEOUT",
        "idle time after which a session expires and frees its pages, e.g. 600, 90s, 10m, 2h; "
        "0 never, at most 720h (default 10m)",
        Duration(30 * 24 * 3600.0, [](C* c, double x) { c->session_idle_timeout_s = x; })}},
      {"--max-extend-steps",
       {"ATTN_MAX_EXTEND_STEPS",
        "session steps in one Extend, counted in the request's bytes before any is parsed "
        "(default 1024)",
        Int(1, 1LL << 20, [](C* c, long long x) { c->limits.max_extend_steps = x; })}},
  };
}

// Where the server listens besides --host and --port.
std::map<std::string, Flag> ListenFlags() {
  using C = ServerConfig;
  return {
      {"--unix-socket",
       {"ATTN_UNIX_SOCKET",
        "also serve gRPC on this Unix-domain socket path (clients: unix:PATH), for an engine on "
        "the same machine or pod; same credentials, tokens, limits and metrics; the file is made "
        "mode 0660 (default: none)",
        [](const std::string& name, const std::string& v, C* c) {
          // sun_path holds 107 bytes and a NUL.
          if (v.empty() || v.size() > 107) {
            return Status::InvalidArgument(name + ": expected a path of 1-107 bytes, got " +
                                           std::to_string(v.size()));
          }
          c->unix_socket = v;
          return Status::Ok();
        }}},
  };
}

const std::map<std::string, Flag>& Flags() {
  using C = ServerConfig;
  static auto* flags = new std::map<std::string, Flag>{
      {"--host",
       {"ATTN_HOST", "address to listen on (default 0.0.0.0)",
        [](const std::string& name, const std::string& v, C* c) {
          if (v.empty()) return Status::InvalidArgument(name + ": empty");
          c->host = v;
          return Status::Ok();
        }}},
      {"--port",
       {"ATTN_PORT", "port (default 50051; 0 picks a free one)",
        Int(0, 65535, [](C* c, long long x) { c->port = static_cast<int>(x); })}},
      {"--model-dir",
       {"ATTN_MODEL_DIR", "serve every *.safetensors in DIR (default: the built-in demo models)",
        [](const std::string&, const std::string& v, C* c) {
          c->model_dir = v;
          return Status::Ok();
        }}},
      {"--threads",
       {"ATTN_THREADS", "compute threads (default 0: the CPUs this process may use)",
        Int(0, 1024, [](C* c, long long x) { c->threads = static_cast<int>(x); })}},
      {"--log-level",
       {"ATTN_LOG_LEVEL", "trace, debug, info, warn, error, off (default info)",
        OneOf({"trace", "debug", "info", "warn", "error", "off"},
              [](C* c, const std::string& v) { c->log_level = v; })}},
      {"--log-format",
       {"ATTN_LOG_FORMAT", "text or json (JSON lines) (default text)",
        OneOf({"text", "json"},
              [](C* c, const std::string& v) {
                c->log_format = v == "json" ? LogFormat::kJson : LogFormat::kText;
              })}},
      {"--max-message-mb",
       {"ATTN_MAX_MESSAGE_MB", "largest request or response message, MiB (default 64)",
        Int(1, 2047, [](C* c, long long x) { c->limits.max_message_bytes = x << 20; })}},
      {"--max-inflight",
       {"ATTN_MAX_INFLIGHT",
        "calls held at once, from arrival to answer, queued ones included; more get "
        "RESOURCE_EXHAUSTED (default 256)",
        Int(1, 1 << 20, [](C* c, long long x) { c->max_inflight = static_cast<int>(x); })}},
      {"--max-queue",
       {"ATTN_MAX_QUEUE", "calls waiting for a CPU before RESOURCE_EXHAUSTED (default 128)",
        Int(0, 1 << 20, [](C* c, long long x) { c->max_queue = static_cast<int>(x); })}},
      {"--max-streams",
       {"ATTN_MAX_STREAMS",
        "concurrent calls (HTTP/2 streams) one connection may open; more are refused "
        "(default 100)",
        Int(1, 1 << 20, [](C* c, long long x) { c->max_streams = static_cast<int>(x); })}},
      {"--memory-quota-mb",
       {"ATTN_MEMORY_QUOTA_MB",
        "gRPC's memory quota, and the requests and unread answers held at once, MiB; over it, "
        "calls from the connections holding the most get RESOURCE_EXHAUSTED (default 512)",
        Int(1, 1LL << 30, [](C* c, long long x) { c->memory_quota_bytes = x << 20; })}},
      {"--shutdown-grace",
       {"ATTN_SHUTDOWN_GRACE", "seconds calls in flight get to finish after SIGTERM (default 10)",
        Number(true, "seconds >= 0", [](C* c, double x) { c->shutdown_grace_s = x; })}},
      {"--max-tensor-elements",
       {"ATTN_MAX_TENSOR_ELEMENTS", "elements in any one request tensor (default 67108864)",
        Int(1, 1LL << 40, [](C* c, long long x) { c->limits.max_tensor_elements = x; })}},
      {"--max-attention-work",
       {"ATTN_MAX_ATTENTION_WORK", "B*H*Lq*Lk*D of one request (default 1e12)",
        Number(false, "a positive number",
               [](C* c, double x) { c->limits.max_attention_work = x; })}},
      {"--max-projection-elements",
       {"ATTN_MAX_PROJECTION_ELEMENTS", "weight elements in inline projections (default 16777216)",
        Int(1, 1LL << 40, [](C* c, long long x) { c->limits.max_projection_elements = x; })}},
      {"--max-request-memory-mb",
       {"ATTN_MAX_REQUEST_MEMORY_MB",
        "result and intermediate buffers of one request, MiB (default 2048)",
        Int(1, 1LL << 30,
            [](C* c, long long x) { c->limits.max_request_memory_bytes = x << 20; })}},
      {"--compute-precision",
       {"ATTN_COMPUTE_PRECISION",
        "auto, float32 or bfloat16: the arithmetic of calls that do not choose; auto is bfloat16 "
        "for BFLOAT16 queries where the CPU and core can compute it, float32 otherwise "
        "(default auto)",
        OneOf({"auto", "float32", "bfloat16"},
              [](C* c, const std::string& v) {
                c->limits.compute_precision = v == "float32"    ? PrecisionPolicy::kFloat32
                                              : v == "bfloat16" ? PrecisionPolicy::kBFloat16
                                                                : PrecisionPolicy::kAuto;
              })}},
      {"--metrics-port",
       {"ATTN_METRICS_PORT",
        "HTTP port of Prometheus /metrics, on --host (default -1: off; 0 picks a free port)",
        Int(-1, 65535, [](C* c, long long x) { c->metrics_port = static_cast<int>(x); })}},
      {"--http-port",
       {"ATTN_HTTP_PORT",
        "HTTP port of the Open Inference Protocol's HTTP/JSON API (/v2/...), on --host, with the "
        "same TLS, tokens and limits (default -1: off; 0 picks a free port)",
        Int(-1, 65535, [](C* c, long long x) { c->http_port = static_cast<int>(x); })}},
      {"--tls-cert",
       {"ATTN_TLS_CERT", "PEM certificate chain; with --tls-key, serve TLS only",
        Path([](C* c, const std::string& v) { c->tls_cert = v; })}},
      {"--tls-key",
       {"ATTN_TLS_KEY", "PEM private key of --tls-cert",
        Path([](C* c, const std::string& v) { c->tls_key = v; })}},
      {"--tls-client-ca",
       {"ATTN_TLS_CLIENT_CA", "PEM CA bundle; clients must present a certificate it signed (mTLS)",
        Path([](C* c, const std::string& v) { c->tls_client_ca = v; })}},
      {"--auth-token-file",
       {"ATTN_AUTH_TOKEN_FILE",
        "file of bearer tokens, one per line, reloaded on SIGHUP; calls must send "
        "'authorization: Bearer <token>' (health stays open)",
        Path([](C* c, const std::string& v) { c->auth_token_file = v; })}},
  };
  // Merged once (thread-safe static initialisation), before the first reader.
  static const bool merged = [] {
    flags->merge(SessionFlags());
    flags->merge(ListenFlags());
    return true;
  }();
  (void)merged;
  return *flags;
}

}  // namespace

std::string ServerUsage() {
  std::string s =
      "usage: attention-server [flags]\n\n"
      "Serves attention.v1.AttentionService, attention.v1.SessionService, the Open Inference\n"
      "Protocol, grpc.health.v1.Health and server reflection.\n"
      "Every flag can also be set by its environment variable.\n\n";
  for (const auto& [name, f] : Flags()) {
    s += "  " + name + " VALUE";
    s += std::string(name.size() < 26 ? 26 - name.size() : 1, ' ');
    s += std::string(f.help) + " [" + f.env + "]\n";
  }
  return s + "  --help                          this text\n";
}

StatusOr<ServerConfig> ParseServerConfig(const std::vector<std::string>& args,
                                         const std::function<const char*(const char*)>& getenv,
                                         bool* help) {
  ServerConfig c;
  *help = false;
  for (const auto& [name, f] : Flags()) {
    if (const char* v = getenv(f.env)) {
      Status st = f.set(name, v, &c);
      if (!st.ok()) return Status::InvalidArgument(std::string(f.env) + " (" + st.message() + ")");
    }
  }
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i], value;
    if (name == "--help" || name == "-h") {
      *help = true;
      return c;
    }
    const auto eq = name.find('=');
    bool inline_value = false;
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    auto it = Flags().find(name);
    if (it == Flags().end()) {
      return Status::InvalidArgument("unknown flag '" + name + "' (see --help)");
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) return Status::InvalidArgument(name + ": missing value");
      value = args[++i];
    }
    ATTN_RETURN_IF_ERROR(it->second.set(name, value, &c));
  }
  if (c.tls_cert.empty() != c.tls_key.empty()) {
    return Status::InvalidArgument("--tls-cert and --tls-key go together: got only " +
                                   std::string(c.tls_cert.empty() ? "--tls-key" : "--tls-cert"));
  }
  if (!c.tls_client_ca.empty() && c.tls_cert.empty()) {
    return Status::InvalidArgument("--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key");
  }
  if (!c.kv_cache_given && c.container_memory_mb > 0) {
    // Everything but the pool: what gRPC may hold (--memory-quota-mb), the
    // server itself (256 MiB with its models), one request's buffers per
    // compute thread (--max-request-memory-mb), and the sessions' metadata,
    // whose limit is 1/32 of the pool and 16 MiB.
    const int64_t threads = c.threads > 0 ? c.threads : AvailableCpus();
    const int64_t rest = c.container_memory_mb - (c.memory_quota_bytes >> 20) - 256 -
                         threads * (c.limits.max_request_memory_bytes >> 20) -
                         (kMetadataBaseBytes >> 20);
    // pool + pool / share = rest
    c.kv_cache_bytes = std::max<int64_t>(64, rest * kMetadataPoolShare / (kMetadataPoolShare + 1))
                       << 20;
  }
  return c;
}

}  // namespace attn::server
