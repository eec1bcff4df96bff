// Who is calling, as the shared call path decides it (CallDispatcher::
// Authenticate), and what a transport knows of its caller to decide it.
#pragma once

#include <string>

namespace attn::server {

// Who is calling: decided once per call, on this path, and carried with it
// as a plain value (core stores it as a session's owner).
struct Principal {
  enum class Kind { kAnonymous, kToken, kCertificate };
  Kind kind = Kind::kAnonymous;
  // A token's name (from --auth-token-file), a client certificate's subject
  // (mutual TLS without tokens: RFC 2253, "CN=team-a,O=example"), or "" for
  // the anonymous principal. Never a token.
  std::string name;
};

// What a transport knows of its caller.
struct CallerCredentials {
  const std::string* authorization = nullptr;  // the header's value; null when none came
  std::string certificate_subject;             // a verified client certificate's; "" when none
};

}  // namespace attn::server
