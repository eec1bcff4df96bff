// The attention kernels: scaled dot-product attention and multi-head attention
// with projections. All compute softmax(Q K^T * scale + mask) V in float32.
//
// Thread safety: every function here may be called concurrently from any
// number of threads. Each call uses up to ComputeThreads() OpenMP threads.
// Errors come back as Status values; no exception leaves core.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <vector>

#include "attn/cpu_info.h"
#include "attn/status.h"
#include "attn/tensor.h"

namespace attn {

// Where query row i sits among the keys: p_i = i (top-left, PyTorch's
// is_causal) or p_i = i + Lk - Lq (bottom-right, FlashAttention's; the new
// tokens of a KV cache). Causal masks and windows are relative to p_i.
enum class CausalAlignment { kTopLeft, kBottomRight };

// Masks, combinable. A query row whose keys are all masked gets zeros in the
// output and in the weights, never NaN (PyTorch would give NaN there).
struct AttentionMasks {
  // Query i never sees key j > p_i (p_i = i: aligned top-left by default).
  bool causal = false;
  CausalAlignment causal_alignment = CausalAlignment::kTopLeft;
  // A sliding window, with or without `causal`: query i sees key j only when
  // p_i - window_left <= j <= p_i + window_right. Unset: unbounded; >= 0.
  std::optional<int64_t> window_left, window_right;
  // Bool [B, Lk] (or [Lk] for unbatched inputs): true means ignore that key,
  // as in PyTorch nn.MultiheadAttention.
  std::optional<TensorView> key_padding_mask;
  // Float32, added to the scaled scores. Broadcast from [Lq, Lk],
  // [B, Lq, Lk] or [B, H, Lq, Lk]. -inf masks a key.
  std::optional<TensorView> attn_bias;
};

// What a call will cost, from the shapes alone. Doubles, so that a hostile
// shape cannot overflow them.
struct AttentionCost {
  double flops = 0;          // of all the matmuls, projections included
  double work = 0;           // B * H * Lq * Lk * D
  double result_bytes = 0;   // the output, and the weights when requested
  double scratch_bytes = 0;  // intermediates (projections, per-head weights,
                             // a bf16 call's bf16 copies of float32 K and V)
};

// What the matmuls compute in. kBFloat16 is a permission, not an order: where
// Bf16ComputeAvailable() (attn/cpu_info.h) is false the call computes
// float32. In bfloat16, the operands of Q K^T, P V and the projections are
// rounded to bf16 (nearest even) and the products accumulate in float32; the
// scores, the softmax (max, exp, sum, rescale) and the output stay float32,
// and P is rounded only as the second matmul's operand. Within 3e-2 of
// float64 for unit-scale inputs (docs/precision.md). Calls that return the
// weights stay float32 (their exact path has no bf16 variant).
enum class ComputePrecision { kFloat32, kBFloat16 };

struct AttentionResult {
  // [.., Lq, Dv]. With an OutputAllocator that gave storage, only the shape:
  // the values are in the caller's buffer.
  Tensor output;
  std::optional<Tensor> weights;  // [.., Lq, Lk], present when requested
  // [.., Lq]: log(sum_j exp(s_ij) + exp(sink_h)), -inf for a row with every
  // key masked and no sink; present when return_lse was set. Two results
  // over disjoint key ranges merge exactly through it.
  std::optional<Tensor> lse;
  // What the call computed in: bfloat16 only when it was permitted and
  // Bf16ComputeAvailable() held (see ComputePrecision).
  ComputePrecision compute_precision = ComputePrecision::kFloat32;
};

// The score terms beyond the masks (the attention of current LLMs). With
// s_ij = scale * q_i . k_j:
//   softcap:      s_ij = softcap * tanh(s_ij / softcap)       (Gemma 2)
//   attn_bias and ALiBi then add: s_ij += bias_ij - slope_h * |p_i - j|
//   sink_logits:  one extra logit sink_h per head in the softmax's sum that
//                 attends to nothing, so the weights sum to less than 1.
struct AttentionScoreOptions {
  std::optional<float> softcap;            // > 0 and finite
  std::optional<TensorView> alibi_slopes;  // float32 [H] or [B, H], finite
  std::optional<TensorView> sink_logits;   // float32 [H], finite
  bool return_lse = false;
};

// Lets the caller choose where the output goes (a server: straight into its
// response message, instead of a copy). Called once, with the output's
// validated shape; returns storage for its element count of dense row-major
// floats that stays valid for the call, or null to let core allocate.
using OutputAllocator = std::function<float*(const Shape& shape)>;

struct ScaledDotProductAttentionOptions {
  AttentionMasks masks;
  AttentionScoreOptions score;
  std::optional<float> scale;  // default 1/sqrt(D); must be finite
  bool need_weights = false;
  // Polled between blocks; when it becomes true the call returns CANCELLED.
  const std::atomic<bool>* cancelled = nullptr;
  // Compute threads for this call; 0 means ComputeThreads(). A server that
  // runs several calls at once gives each a share of the CPUs.
  int num_threads = 0;
  OutputAllocator output_allocator;  // empty: core allocates the output
  ComputePrecision compute_precision = ComputePrecision::kFloat32;
  // A packed batch of variable-length sequences (FlashAttention's varlen
  // API): B + 1 offsets rising from 0 to total_q (total_k), both or neither.
  // Then query is [total_q, H, D], key [total_k, Hkv, D], value [total_k,
  // Hkv, Dv], the output [total_q, H, Dv] and the lse [H, total_q]. Sequence
  // s is rows [cu_q[s], cu_q[s+1]) against keys [cu_k[s], cu_k[s+1]), its
  // own problem: alignment, windows and ALiBi ([H] or [B, H]) per sequence.
  // Weights, key_padding_mask and attn_bias are refused with them.
  std::vector<int64_t> cu_seqlens_q, cu_seqlens_k;
};

// softmax(Q K^T * scale + mask) V.
// query [.., Lq, D], key [.., Lk, D], value [.., Lk, Dv], where the leading
// dims are none, [B] or [B, H] and agree across the three, except that key
// and value may have fewer heads than the query (grouped-query attention:
// [B, Hkv, Lk, *] with Hkv dividing H; query head h reads kv head
// h / (H / Hkv), PyTorch's enable_gqa grouping; K and V are never repeated).
// Views may have any strides; nothing is transposed or copied whole. Without
// need_weights the extra memory is independent of Lq and Lk (blocked online
// softmax).
StatusOr<AttentionResult> ScaledDotProductAttention(
    const TensorView& query, const TensorView& key, const TensorView& value,
    const ScaledDotProductAttentionOptions& options = {});

// A linear layer in nn.Linear layout: y = x W^T + b, W is [out, in].
struct LinearView {
  TensorView weight;
  std::optional<TensorView> bias = std::nullopt;  // [out]
  // Optional: the same weight packed as W^T, [in, out] with unit column
  // stride (its owner made it once; models do for small layers on the AVX2
  // tier). Tiny products then run on core's own kernel without oneDNN's
  // fixed cost per call. Must hold exactly W's values.
  std::optional<TensorView> weight_t = std::nullopt;
  // Optional: W rounded to bfloat16 (nearest even), dense [out, in], for
  // calls that compute in bf16 (models pack it once at load where
  // Bf16ComputeAvailable()). Without it such a call rounds W itself.
  const uint16_t* weight_bf16 = nullptr;
};

// Input projections, and an optional output projection.
// q: [E, Eq], k: [E, Ek], v: [Ev, Evin], out: [Eout, Ev].
struct ProjectionWeights {
  LinearView q;
  LinearView k;
  LinearView v;
  std::optional<LinearView> out;
};

struct MultiHeadAttentionOptions {
  int64_t num_heads = 1;
  // Grouped-query projections (a Llama-style layer without rotary
  // embeddings): k and v weights are [Hkv * Dh, kdim] and [Hkv * Dvh, vdim],
  // query head h reads kv head h / (H / Hkv); out takes [H * Dvh]. 0 means
  // num_heads. Must divide num_heads.
  int64_t num_kv_heads = 0;
  AttentionMasks masks;
  // As for SDPA, per head; the lse is [B, H, Lq] ([H, Lq] unbatched).
  AttentionScoreOptions score;
  std::optional<float> scale;  // default 1/sqrt(head_dim); must be finite
  bool need_weights = false;
  // true: weights averaged over heads [B, Lq, Lk] (PyTorch's default);
  // false: per head [B, H, Lq, Lk].
  bool average_weights = true;
  const std::atomic<bool>* cancelled = nullptr;
  int num_threads = 0;               // 0 means ComputeThreads()
  OutputAllocator output_allocator;  // empty: core allocates the output
  // The projections and the attention (see ComputePrecision).
  ComputePrecision compute_precision = ComputePrecision::kFloat32;
};

// nn.MultiheadAttention(batch_first=True) inference semantics, and the seed's
// single-head modules (num_heads = 1, with or without `out`).
// query [B, Lq, Eq] or unbatched [Lq, Eq]; key [B, Lk, Ek]; value [B, Lk, Evin].
// Heads are split through strides: the projected [B, L, H, Dh] is read as
// [B, H, L, Dh] without a transposing copy.
StatusOr<AttentionResult> MultiHeadAttention(const ProjectionWeights& weights,
                                             const TensorView& query, const TensorView& key,
                                             const TensorView& value,
                                             const MultiHeadAttentionOptions& options = {});

// Validate exactly as the calls above do, and return the cost without
// computing anything. A server checks its request limits with these.
StatusOr<AttentionCost> EstimateScaledDotProductAttention(
    const TensorView& query, const TensorView& key, const TensorView& value,
    const ScaledDotProductAttentionOptions& options = {});
StatusOr<AttentionCost> EstimateMultiHeadAttention(const ProjectionWeights& weights,
                                                   const TensorView& query, const TensorView& key,
                                                   const TensorView& value,
                                                   const MultiHeadAttentionOptions& options = {});

}  // namespace attn
