// The flags every attention-client command shares: where to connect, how
// (TLS, token, message size, retries) and the per-call deadline.
#pragma once

#include <chrono>
#include <string>

#include "attention_client.h"
#include "attn/status.h"
#include "cli/flags.h"

namespace attn::client {

struct ClientOptions {
  std::string target = "localhost:50051";
  ChannelOptions channel;
  double timeout_s = 30;  // per-call deadline

  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3));
  }
};

// From --target, --timeout, --max-message-mb, --tls*, --retry and
// --token-file (else the ATTN_TOKEN environment variable).
StatusOr<ClientOptions> ClientOptionsFromFlags(const CommandLine& cl);

}  // namespace attn::client
