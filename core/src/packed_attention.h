// Packed variable-length batches (ScaledDotProductAttentionOptions'
// cu_seqlens_q/cu_seqlens_k): every sequence is its own problem, and all of
// them run as one pool of tasks.
#pragma once

#include "attn/attention.h"
#include "attn/status.h"

namespace attn::internal {

// True when the options ask for a packed batch (either offset list given).
inline bool IsPacked(const ScaledDotProductAttentionOptions& options) {
  return !options.cu_seqlens_q.empty() || !options.cu_seqlens_k.empty();
}

StatusOr<AttentionResult> PackedAttention(const TensorView& query, const TensorView& key,
                                          const TensorView& value,
                                          const ScaledDotProductAttentionOptions& options);
StatusOr<AttentionCost> EstimatePackedAttention(const TensorView& query, const TensorView& key,
                                                const TensorView& value,
                                                const ScaledDotProductAttentionOptions& options);

}  // namespace attn::internal
