#include "server_config.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>

namespace attn::server {
namespace {

struct Flag {
  const char* env;
  const char* help;
  std::function<Status(const std::string& value, ServerConfig* c)> set;
};

StatusOr<long long> ParseInt(const std::string& name, const std::string& v, long long lo,
                             long long hi) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || x < lo || x > hi) {
    return Status::InvalidArgument(name + ": expected an integer in [" + std::to_string(lo) + ", " +
                                   std::to_string(hi) + "], got '" + v + "'");
  }
  return x;
}

StatusOr<double> ParsePositive(const std::string& name, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(x) || x <= 0) {
    return Status::InvalidArgument(name + ": expected a positive number, got '" + v + "'");
  }
  return x;
}

const std::map<std::string, Flag>& Flags() {
  static const auto* flags = new std::map<std::string, Flag>{
      {"--host",
       {"ATTN_HOST", "address to listen on (default 0.0.0.0)",
        [](const std::string& v, ServerConfig* c) {
          if (v.empty()) return Status::InvalidArgument("--host: empty");
          c->host = v;
          return Status::Ok();
        }}},
      {"--port",
       {"ATTN_PORT", "port (default 50051; 0 picks a free one)",
        [](const std::string& v, ServerConfig* c) {
          auto x = ParseInt("--port", v, 0, 65535);
          if (!x.ok()) return x.status();
          c->port = static_cast<int>(*x);
          return Status::Ok();
        }}},
      {"--model-dir",
       {"ATTN_MODEL_DIR", "serve every *.safetensors in DIR (default: the built-in demo models)",
        [](const std::string& v, ServerConfig* c) {
          c->model_dir = v;
          return Status::Ok();
        }}},
      {"--threads",
       {"ATTN_THREADS", "compute threads (default 0: the CPUs this process may use)",
        [](const std::string& v, ServerConfig* c) {
          auto x = ParseInt("--threads", v, 0, 1024);
          if (!x.ok()) return x.status();
          c->threads = static_cast<int>(*x);
          return Status::Ok();
        }}},
      {"--log-level",
       {"ATTN_LOG_LEVEL", "trace, debug, info, warn, error, off (default info)",
        [](const std::string& v, ServerConfig* c) {
          for (const char* l : {"trace", "debug", "info", "warn", "error", "off"}) {
            if (v == l) {
              c->log_level = v;
              return Status::Ok();
            }
          }
          return Status::InvalidArgument(
              "--log-level: expected trace, debug, info, warn, error or off, got '" + v + "'");
        }}},
      {"--log-format",
       {"ATTN_LOG_FORMAT", "text or json (JSON lines) (default text)",
        [](const std::string& v, ServerConfig* c) {
          if (v != "text" && v != "json") {
            return Status::InvalidArgument("--log-format: expected text or json, got '" + v + "'");
          }
          c->log_format = v == "json" ? LogFormat::kJson : LogFormat::kText;
          return Status::Ok();
        }}},
      {"--max-message-mb",
       {"ATTN_MAX_MESSAGE_MB", "largest request or response message, MiB (default 64)",
        [](const std::string& v, ServerConfig* c) {
          auto x = ParseInt("--max-message-mb", v, 1, 2047);
          if (!x.ok()) return x.status();
          c->limits.max_message_bytes = *x << 20;
          return Status::Ok();
        }}},
      {"--max-queue",
       {"ATTN_MAX_QUEUE", "calls waiting for compute before RESOURCE_EXHAUSTED (default 256)",
        [](const std::string& v, ServerConfig* c) {
          auto x = ParseInt("--max-queue", v, 0, 1 << 20);
          if (!x.ok()) return x.status();
          c->max_queue = static_cast<int>(*x);
          return Status::Ok();
        }}},
      {"--shutdown-grace",
       {"ATTN_SHUTDOWN_GRACE", "seconds calls in flight get to finish after SIGTERM (default 10)",
        [](const std::string& v, ServerConfig* c) {
          char* end = nullptr;
          const double x = std::strtod(v.c_str(), &end);
          if (v.empty() || *end != '\0' || !std::isfinite(x) || x < 0) {
            return Status::InvalidArgument("--shutdown-grace: expected seconds >= 0, got '" + v +
                                           "'");
          }
          c->shutdown_grace_s = x;
          return Status::Ok();
        }}},
      {"--max-tensor-elements",
       {"ATTN_MAX_TENSOR_ELEMENTS", "elements in any one request tensor (default 67108864)",
        [](const std::string& v, ServerConfig* c) {
          auto x = ParseInt("--max-tensor-elements", v, 1, 1LL << 40);
          if (!x.ok()) return x.status();
          c->limits.max_tensor_elements = *x;
          return Status::Ok();
        }}},
      {"--max-attention-work",
       {"ATTN_MAX_ATTENTION_WORK", "B*H*Lq*Lk*D of one request (default 1e12)",
        [](const std::string& v, ServerConfig* c) {
          auto x = ParsePositive("--max-attention-work", v);
          if (!x.ok()) return x.status();
          c->limits.max_attention_work = *x;
          return Status::Ok();
        }}},
      {"--max-projection-elements",
       {"ATTN_MAX_PROJECTION_ELEMENTS", "weight elements in inline projections (default 16777216)",
        [](const std::string& v, ServerConfig* c) {
          auto x = ParseInt("--max-projection-elements", v, 1, 1LL << 40);
          if (!x.ok()) return x.status();
          c->limits.max_projection_elements = *x;
          return Status::Ok();
        }}},
      {"--max-request-memory-mb",
       {"ATTN_MAX_REQUEST_MEMORY_MB",
        "result and intermediate buffers of one request, MiB "
        "(default 2048)",
        [](const std::string& v, ServerConfig* c) {
          auto x = ParseInt("--max-request-memory-mb", v, 1, 1LL << 30);
          if (!x.ok()) return x.status();
          c->limits.max_request_memory_bytes = *x << 20;
          return Status::Ok();
        }}},
  };
  return *flags;
}

}  // namespace

std::string ServerUsage() {
  std::string s =
      "usage: attention-server [flags]\n\n"
      "Serves attention.v1.AttentionService, grpc.health.v1.Health and server reflection.\n"
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
      Status st = f.set(v, &c);
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
    ATTN_RETURN_IF_ERROR(it->second.set(value, &c));
  }
  return c;
}

}  // namespace attn::server
