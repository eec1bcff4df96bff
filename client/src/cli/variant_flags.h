// The attention variants' flags (--causal-alignment, --window-left, ...),
// read the same way for one call and for the bench.
#pragma once

#include "attn/status.h"
#include "call_spec.h"
#include "cli/flags.h"

namespace attn::client {

// INVALID_ARGUMENT naming the flag for a bad value. Range checks beyond the
// type (a negative window, softcap <= 0) are the server's, so that the
// client shows the server's message.
StatusOr<AttentionVariants> VariantsFromFlags(const CommandLine& cl);

}  // namespace attn::client
