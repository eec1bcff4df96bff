// Bearer tokens: `authorization: Bearer <token>` metadata checked against a
// file of allowed tokens (one per line), which SIGHUP reloads. Tokens are
// never logged; a reload logs only how many it read.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "attn/status.h"

namespace attn::server {

class TokenAuth {
 public:
  // Reads `path`: one token per line; blank lines and lines starting with
  // '#' are skipped, surrounding whitespace is trimmed. A file without any
  // token is an error (it would lock everyone out). On error the tokens in
  // use are kept.
  Status Load(const std::string& path);
  // Reads the file given to the last successful Load() again.
  Status Reload();
  // How many tokens are in use.
  size_t size() const;

  // Checks an `authorization` metadata value. OK, or UNAUTHENTICATED with a
  // reason that never contains the token.
  Status Check(const char* value, size_t length) const;

 private:
  mutable std::mutex mu_;  // guards the pointer; the set itself is immutable
  std::shared_ptr<const std::vector<std::string>> tokens_;
  std::string path_;
};

}  // namespace attn::server
