// attention-client bench's settings from the shared flag table (flags.h).
#pragma once

#include <string>
#include <vector>

#include "attn/status.h"
#include "bench/bench_config.h"
#include "cli/flags.h"

namespace attn::client {

// The bench's settings from its command line (flags.h): INVALID_ARGUMENT
// naming the flag for a bad value or a contradiction.
StatusOr<BenchConfig> BenchConfigFromFlags(const CommandLine& cl);

// Parses the flags after "bench" (tests). Sets *help for --help.
StatusOr<BenchConfig> ParseBenchFlags(const std::vector<std::string>& args, bool* help);

}  // namespace attn::client
