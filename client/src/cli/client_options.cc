#include "cli/client_options.h"

#include <cstdlib>

#include "wire/secret_files.h"

namespace attn::client {

StatusOr<ClientOptions> ClientOptionsFromFlags(const CommandLine& cl) {
  ClientOptions o;
  o.target = cl.get("--target", o.target);
  auto timeout = cl.Seconds("--timeout", o.timeout_s);
  if (!timeout.ok()) return timeout.status();
  if (*timeout <= 0) return Status::InvalidArgument("--timeout: must be positive");
  o.timeout_s = *timeout;
  auto max_mb = cl.Int("--max-message-mb", 1, 2047, o.channel.max_message_mb);
  if (!max_mb.ok()) return max_mb.status();
  o.channel.max_message_mb = static_cast<int>(*max_mb);
  o.channel.tls = cl.has("--tls");
  o.channel.tls_ca = cl.get("--tls-ca");
  o.channel.tls_cert = cl.get("--tls-cert");
  o.channel.tls_key = cl.get("--tls-key");
  o.channel.retry_unavailable = cl.has("--retry");
  if (cl.has("--token-file")) {
    auto tokens = wire::ReadTokenFile("--token-file", cl.get("--token-file"));
    if (!tokens.ok()) return tokens.status();
    o.channel.token = tokens->front();
  } else if (const char* token = std::getenv("ATTN_TOKEN")) {
    o.channel.token = token;
  }
  return o;
}

}  // namespace attn::client
