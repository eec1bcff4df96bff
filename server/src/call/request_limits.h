// Per-request limits. A request over any of them gets RESOURCE_EXHAUSTED,
// naming the limit and the value, before anything large is allocated.
#pragma once

#include <cstdint>

namespace attn::server {

// --compute-precision: what a call that does not say (PRECISION_UNSPECIFIED)
// computes in. kAuto: bfloat16 for BFLOAT16 queries where the CPU and core
// can, float32 otherwise.
enum class PrecisionPolicy { kAuto, kFloat32, kBFloat16 };

struct RequestLimits {
  int64_t max_message_bytes = int64_t{64} << 20;               // --max-message-mb, both directions
  int64_t max_tensor_elements = int64_t{64} << 20;             // --max-tensor-elements
  double max_attention_work = 1e12;                            // --max-attention-work, B*H*Lq*Lk*D
  int64_t max_projection_elements = int64_t{16} << 20;         // --max-projection-elements, inline
  int64_t max_request_memory_bytes = int64_t{2} << 30;         // --max-request-memory-mb
  int64_t max_extend_steps = 1024;                             // --max-extend-steps
  PrecisionPolicy compute_precision = PrecisionPolicy::kAuto;  // --compute-precision
};

}  // namespace attn::server
