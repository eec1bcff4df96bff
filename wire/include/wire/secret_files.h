// The small files that hold secrets, named by a flag: PEM certificates and
// keys (server and client TLS), and bearer token files (the server's
// --auth-token-file, the client's --token-file). Errors name the flag.
#pragma once

#include <string>
#include <vector>

#include "attn/status.h"

namespace attn::wire {

// The contents of the PEM file `path`, given as `flag`. INVALID_ARGUMENT
// "<flag> <path>: cannot open" or "...: not a PEM file".
StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path);

// The tokens in `path`, one per line: blank lines and lines starting with
// '#' are skipped, each token is trimmed. INVALID_ARGUMENT "<flag> <path>:
// cannot open", "...: read error" or "...: no token in it (one token per line)".
StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& flag, const std::string& path);

}  // namespace attn::wire
