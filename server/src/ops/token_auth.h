// Bearer tokens: `authorization: Bearer <token>` metadata checked against a
// file of principals and their tokens, which SIGHUP reloads. Each line is
// `NAME TOKEN`, or a bare `TOKEN`, which is named by the first 8 hex digits
// of its SHA-256 (`#` lines and blank lines are skipped). A name may have
// several tokens (a rotation's overlap); a token belongs to one name.
// Names appear in logs and metrics; tokens never do, and a reload logs only
// how many it read.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "attn/status.h"

namespace attn::server {

// A principal's name from the token file: [A-Za-z0-9._-]{1,64}.
bool IsTokenName(const std::string& name);
// The name of a bare token: the first 8 hex digits of its SHA-256.
std::string BareTokenName(const std::string& token);
// A principal's metrics label, bounded: a token's name itself, "anonymous"
// for "", and "certificate" for a certificate's subject (never a raw
// subject: anyone with a certificate could make new labels).
std::string PrincipalLabel(const std::string& principal);

class TokenAuth {
 public:
  // Reads `path` (see above). A file without any token is an error (it
  // would lock everyone out), and so are a bad name, a line of more than
  // two fields, and a token given twice. On error the tokens in use are kept.
  Status Load(const std::string& path);
  // Reads the file given to the last successful Load() again.
  Status Reload();
  // How many tokens are in use.
  size_t size() const;
  // The names in use, sorted.
  std::vector<std::string> names() const;

  // Checks an `authorization` metadata value: the principal's name, or
  // UNAUTHENTICATED with a reason that never contains the token.
  StatusOr<std::string> Check(const char* value, size_t length) const;

 private:
  struct Entry {
    std::string token, name;
  };
  mutable std::mutex mu_;  // guards the pointer; the set itself is immutable
  std::shared_ptr<const std::vector<Entry>> tokens_;
  std::string path_;
};

}  // namespace attn::server
