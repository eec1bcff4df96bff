// One function per attention-client command. Each returns the process's
// exit code: 0 success, 1 the call (or the server) failed, 2 bad flags.
#pragma once

#include <atomic>

#include "attention/v1/attention.pb.h"
#include "cli/flags.h"

namespace attn::client {

int RunHealth(const CommandLine& cl);
int RunModels(const CommandLine& cl);
// attention, cross and mha: one call, its output printed or written.
int RunCall(const CommandLine& cl);
// A load; stops early (with a partial report) when *interrupt turns true.
int RunBenchCommand(const CommandLine& cl, const std::atomic<bool>* interrupt);

// session create|extend|info|fork|truncate|delete|list (session_commands.cc).
int RunSession(const CommandLine& cl);
// bench --op decode: sessions prefilled, then stepped (session_commands.cc).
int RunDecodeBench(const CommandLine& cl, const std::atomic<bool>* interrupt);

// Prints (or writes, with --output, --weights-output, --lse-output) a call's
// output and, when present, its weights and lse; an exit code.
int Report(const attention::v1::AttentionResponse& resp, const CommandLine& cl);

// Prints "attention-client: <message>" to stderr and returns `code`.
int Fail(const std::string& message, int code = 2);

}  // namespace attn::client
