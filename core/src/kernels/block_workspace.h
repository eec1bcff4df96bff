// The blocked kernel's per-thread buffers (blocked_attention.cc). Internal
// to core.
#pragma once

#include <cstdint>
#include <vector>

#include "attn/tensor.h"
#include "support/half_kernels.h"

namespace attn::internal {

// Per-thread buffers, grown on demand and reused across calls. Their size
// depends on block sizes and head dims, never on sequence lengths.
using Bf16Buffer = std::vector<uint16_t, AlignedAllocator<uint16_t>>;

struct Workspace {
  FloatBuffer s, o, qp, kp, vp, m, l, alpha;
  std::vector<int64_t> range;  // each row's key range [lo, hi)
  // The bf16 path's operands: Q, the K and V blocks, and P.
  Bf16Buffer q16, k16, v16, p16;

  template <typename Buffer>
  static typename Buffer::value_type* Ensure(Buffer& buf, int64_t n) {
    if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
    return buf.data();
  }
};

// n dense floats rounded to bf16 (nearest even) in `buf`.
inline const uint16_t* ToBf16(const float* src, int64_t n, Bf16Buffer& buf) {
  uint16_t* dst = Workspace::Ensure(buf, n);
  GetHalfKernels().f32_to_bf16(src, dst, n);
  return dst;
}

// The calling thread's workspace.
inline Workspace& ThreadWorkspace() {
  thread_local Workspace ws;
  return ws;
}

}  // namespace attn::internal
