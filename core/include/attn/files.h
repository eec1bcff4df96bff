// Reading small whole files named by a flag, with errors that name the flag
// (the server's and the client's TLS options).
#pragma once

#include <string>

#include "attn/status.h"

namespace attn {

// The contents of the PEM file `path`, given as `flag`. INVALID_ARGUMENT
// "<flag> <path>: cannot open" or "...: not a PEM file".
StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path);

}  // namespace attn
