// The blocked kernel's per-thread buffers, and its operand blocks in the
// compute type: float32, or bfloat16 (rounded here, or a bf16 view's own
// elements) for the bf16 matmuls (block_operands.cc). Internal to core.
#pragma once

#include <cstdint>
#include <vector>

#include "attn/tensor.h"
#include "kernels/blocked_attention.h"
#include "support/half_kernels.h"

namespace attn::internal {

// Per-thread buffers, grown on demand and reused across calls. Their size
// depends on block sizes and head dims, never on sequence lengths.
struct Workspace {
  FloatBuffer s, o, qp, kp, vp, m, l;
  FloatBuffer kt;              // an edge block's K^T, for the tile kernels
  std::vector<int64_t> spans;  // an edge block's row runs: (first, n, ka, ke)
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

// The task's query rows (batch b, query heads h .. h + g - 1, positions
// q0 .. q0 + qn - 1) as a dense [qn * g, D] block, position-major (row r is
// position q0 + r / g of head h + r % g): float32 (the view itself when g is
// 1 and it is dense), or bf16 in a bf16 problem.
const void* TaskQueries(const AttentionProblem& p, int64_t g, int64_t b, int64_t h, int64_t q0,
                        int64_t qn, Workspace& ws);

// Rows [k0, k0 + kn) of kv head `kvh` of `t` (the key or the value, `cols`
// wide) as a dense block in the compute type; the view itself when it is
// one already (a dense float32 view, or a dense bf16 view in a bf16 problem).
const void* KvBlock(const AttentionProblem& p, const Strided4D& t, int64_t cols, int64_t b,
                    int64_t kvh, int64_t k0, int64_t kn, FloatBuffer& f32, Bf16Buffer& b16);

// A bf16 problem's keys and values rounded once for the whole call, when
// they are float32 views that several tasks read (every query block of a
// head reads all its keys): dense [B, Hkv, Lk, D] and [B, Hkv, Lk, Dv] bf16
// copies (half the bytes of the float32 K and V: the call's estimate counts
// them as scratch), and `problem` pointed at them. Rounded here or per block
// in KvBlock, the same bits.
struct Bf16KeyValues {
  Bf16Buffer k, v;
  AttentionProblem problem;
};
// `p` itself when there is nothing to gain (not bf16, bf16 views already,
// or each head's keys read by one task: `query_blocks` 1); else kv->problem,
// filled on `threads` OpenMP threads.
const AttentionProblem& KeyValuesInBf16(const AttentionProblem& p, int64_t query_blocks,
                                        int threads, Bf16KeyValues* kv);

// S[rows, kn] = Q K^T, from dense blocks in the compute type (K^T is a
// transposed format tag).
void BlockScores(const AttentionProblem& p, int64_t rows, int64_t kn, const void* q, const void* k,
                 float* s);

// O[rows, Dv] += P V, from dense blocks in the compute type: a bf16
// problem's P comes rounded already (OnlineBlock::p16), only as this
// matmul's operand.
void BlockAccumulatePv(const AttentionProblem& p, int64_t rows, int64_t kn, const void* prob,
                       const void* v, float* o);

}  // namespace attn::internal
