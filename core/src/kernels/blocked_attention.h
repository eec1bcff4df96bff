// The blocked attention kernel shared by ScaledDotProductAttention and
// MultiHeadAttention. Internal to core: inputs are already validated.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

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
  // Instead of `data`: bfloat16 elements (only in a bf16 problem).
  const uint16_t* data16 = nullptr;

  // Points at element `offset` of `t`: `data` for float32, `data16` for bf16.
  void SetData(const TensorView& t, int64_t offset) {
    if (t.dtype == DataType::kBFloat16) {
      data16 = t.bf16() + offset;
    } else {
      data = t.f32() + offset;
    }
  }
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

  // Grouped-query attention: query head h reads kv head h / kv_group of k
  // and v (whose stride[1] steps kv heads).
  int64_t kv_group = 1;
  // p_i = i + pos_offset: 0 aligns top-left, Lk - Lq bottom-right.
  int64_t pos_offset = 0;
  // Key j is visible to query i when p_i - window_left <= j <= p_i +
  // window_right (and, with causal, j <= p_i); -1: unbounded.
  int64_t window_left = -1, window_right = -1;
  // s = softcap * tanh(s / softcap) after the scale; 0: none.
  float softcap = 0.0f;
  // ALiBi: s -= slope(b, h) * |p_i - j|, slope at alibi[b * s0 + h * s1].
  const float* alibi = nullptr;
  int64_t alibi_stride[2] = {0, 0};
  // One extra logit per head, sink[h], in every row's softmax sum.
  const float* sink = nullptr;
  // Log-sum-exp of each row, or null when not wanted: row i of (b, h) at
  // lse[(b * heads + h) * lse_head_stride + i]; lse_head_stride 0 means Lq
  // (dense [B, H, Lq]). A packed batch's sequence sets it to total_q.
  float* lse = nullptr;
  int64_t lse_head_stride = 0;
  // bfloat16 compute (the caller checked Bf16ComputeAvailable()): the online
  // path's two matmuls take bf16 operands (Q, K, V and P rounded to nearest
  // even) with float32 accumulation; scores, the softmax and O stay float32.
  // Never set with `weights` (the exact path has no bf16 variant).
  bool bf16 = false;

  // The keys query row i may see: [*lo, *hi), empty when *hi <= *lo.
  void KeyRange(int64_t i, int64_t* lo, int64_t* hi) const;
  float* LseAt(int64_t b, int64_t h, int64_t i) const {
    return lse + (b * heads + h) * (lse_head_stride > 0 ? lse_head_stride : lq) + i;
  }
  // True when none of the terms after the bias above is in use.
  bool Plain() const {
    return kv_group == 1 && pos_offset == 0 && window_left < 0 && window_right < 0 &&
           softcap == 0.0f && alibi == nullptr && sink == nullptr && lse == nullptr;
  }
};

struct SoftmaxKernels;

// True when a row's scores need more than the scale: a key padding mask, a
// bias, a softcap or ALiBi (score_rows.cc).
bool HasScoreTerms(const AttentionProblem& p);
// Turns row[0, n), the raw dot products of query row i (batch b, query head
// h) with keys k0..k0+n-1, into scores: scale, softcap, + bias, - ALiBi, and
// -inf where the key is padded.
void ApplyScoreTerms(const AttentionProblem& p, const SoftmaxKernels& kern, float* row, int64_t n,
                     int64_t b, int64_t h, int64_t i, int64_t k0);

// The online softmax's step over one score block (blocked_attention.cc)
// for rows whose scores need more than the scale (a padding mask, a bias,
// softcap, ALiBi): each row's terms over its keys, then the step the other
// rows take (SoftmaxKernels::online_block, at scale 1): its max and exp, its
// running max m and sum l, its output row o rescaled. Row i (of rows [r0,
// r0 + rows)) is query head h + i % g at position q0 + i / g, and sees keys
// [lo[i], hi[i]); its scores are s[(i - r0) * kn, ...) for keys k0 .. k0 +
// kn - 1.
struct ScoreBlockRows {
  int64_t b, h, g, q0;
  int64_t r0, rows, k0, kn;
  float* s;
  float *m, *l, *o;
  const int64_t *lo, *hi;
  uint16_t* p16 = nullptr;  // a bf16 problem's P (OnlineBlock::p16), or null
};
void OnlineRowsGeneral(const AttentionProblem& p, const SoftmaxKernels& kern,
                       const ScoreBlockRows& blk);

// How a row with running max m and sum l (of exp(s - m)) ends: what its
// accumulated P V is multiplied by, and its log-sum-exp, with the head's
// sink logit in the sum. No keys seen and no sink: factor 0, lse -inf.
// The lse (a log per row) only where p.lse asks for it; else NaN.
struct RowFinish {
  float factor, lse;
};
RowFinish FinishRow(const AttentionProblem& p, int64_t h, float m, float l);

// Copies a strided [rows, cols] block to dense rows at `dst`.
void CopyRows(const float* base, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride,
              float* dst);
// A dense [rows, cols] copy of a strided block in `buf` (grown as needed),
// or the block itself when it is already dense.
const float* DenseRows(const float* base, int64_t rows, int64_t cols, int64_t row_stride,
                       int64_t col_stride, FloatBuffer& buf);

// The exact path (exact_attention.cc), for when the weights are wanted and so
// an [Lq, Lk] buffer exists anyway: S = Q K^T straight into the query
// block's weight rows, masks, the softmax (oneDNN's primitive, or the row
// kernels when a sink or the lse is wanted), then O = P V. One (batch, head,
// query block); `q` is its dense [qn, D] rows; buffers are the caller's.
struct QueryBlock {
  int64_t b, h, q0, qn;
};
struct ExactBuffers {
  FloatBuffer &k, &v, &row_max, &o;
};
Status RunExactBlock(const AttentionProblem& p, const QueryBlock& blk, const float* q, float* out,
                     ExactBuffers bufs);

// Computes the problem. Every element of `out` is written; `weights` must be
// zero-filled by the caller (blocks above the causal diagonal are skipped).
// Extra memory is O(block sizes), independent of Lq and Lk, except that a
// bf16 problem over float32 keys and values rounds them once into bf16
// copies (half their bytes; KeyValuesInBf16). Throws nothing.
Status RunBlockedAttention(const AttentionProblem& problem, const std::atomic<bool>* cancelled);

// Computes independent problems (the sequences of a packed batch) as one
// pool of tasks, so that short sequences share the threads with long ones
// instead of each running alone. The problems' `threads` must agree.
Status RunBlockedAttentionBatch(const std::vector<AttentionProblem>& problems,
                                const std::atomic<bool>* cancelled);

// True when the q, k and v weights are consecutive row ranges of one
// [3E, in] weight, as nn.MultiheadAttention's in_proj_weight is (biases
// aside): one matmul can project all three (multi_head_attention.cc).
bool QkvWeightRowsFollow(const ProjectionWeights& w);

}  // namespace attn::internal
