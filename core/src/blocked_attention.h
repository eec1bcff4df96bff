// The blocked attention kernel shared by ScaledDotProductAttention and
// MultiHeadAttention. Internal to core: inputs are already validated.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "attn/attention.h"
#include "attn/status.h"

namespace attn::internal {

// Below this many FLOPs a call runs on the calling thread alone: an OpenMP
// fork/join costs more than it saves.
constexpr double kSerialFlops = 4.0e6;

// A [B, H, L, D] operand read through element strides.
struct Strided4D {
  const float* data = nullptr;
  int64_t stride[4] = {0, 0, 0, 0};
};

struct AttentionProblem {
  int64_t batch = 0, heads = 0, lq = 0, lk = 0, d = 0, dv = 0;
  Strided4D q, k, v;
  // Output [B, H, Lq, Dv]; the innermost stride must be 1.
  float* out = nullptr;
  int64_t out_stride[3] = {0, 0, 0};
  // Dense [B, H, Lq, Lk] attention weights, or null when not wanted.
  float* weights = nullptr;
  float scale = 1.0f;
  int threads = 0;  // 0 means ComputeThreads()
  bool causal = false;
  // Bool key padding mask: element (b, j) at kpm[b * kpm_stride[0] + j * kpm_stride[1]].
  const uint8_t* kpm = nullptr;
  int64_t kpm_stride[2] = {0, 0};
  // Additive bias: element (b, h, i, j) through bias_stride (0 on broadcast dims).
  const float* bias = nullptr;
  int64_t bias_stride[4] = {0, 0, 0, 0};
};

// Checks the masks against [B, H, Lq, Lk] and fills the mask fields of
// `problem`. `unbatched` allows key_padding_mask of shape [Lk].
Status ResolveMasks(const AttentionMasks& masks, bool unbatched, AttentionProblem* problem);

// Computes the problem. Every element of `out` is written; `weights` must be
// zero-filled by the caller (blocks above the causal diagonal are skipped).
// Extra memory is O(block sizes), independent of Lq and Lk. Throws nothing.
Status RunBlockedAttention(const AttentionProblem& problem, const std::atomic<bool>* cancelled);

// Storage for an output of `shape`: the caller's, from `allocate` (then
// `output` gets only the shape), or `output`'s own data.
float* OutputStorage(const OutputAllocator& allocate, const Shape& shape, Tensor* output);

// Checks that `scale`, when given, is finite, and returns it or 1/sqrt(dim).
StatusOr<float> ResolveScale(const std::optional<float>& scale, int64_t dim);

}  // namespace attn::internal

namespace attn::internal {

// Checks a float32 input view: dtype, rank within [min_rank, max_rank], one
// non-negative stride per dim, an element count that fits int64, and data
// present when it has elements. `name` starts the message.
Status ValidateFloatView(const TensorView& view, const std::string& name, int min_rank,
                         int max_rank);

}  // namespace attn::internal
