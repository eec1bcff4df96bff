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

// Computes the problem. Every element of `out` is written; `weights` must be
// zero-filled by the caller (blocks above the causal diagonal are skipped).
// Extra memory is O(block sizes), independent of Lq and Lk. Throws nothing.
Status RunBlockedAttention(const AttentionProblem& problem, const std::atomic<bool>* cancelled);

// True when the q, k and v weights are consecutive row ranges of one
// [3E, in] weight, as nn.MultiheadAttention's in_proj_weight is (biases
// aside): one matmul can project all three (multi_head_attention.cc).
bool QkvWeightRowsFollow(const ProjectionWeights& w);

}  // namespace attn::internal
