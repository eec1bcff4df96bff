// The checks SDPA and MHA share on their inputs: float views, the q/k/v
// shape contract, the scale and the masks, and where the output goes. Every
// message names the field, what was expected and what was received.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "attn/attention.h"
#include "attn/status.h"
#include "kernels/blocked_attention.h"

namespace attn::internal {

// Checks a float32 input view: dtype, rank within [min_rank, max_rank], one
// non-negative stride per dim, an element count that fits int64, and data
// present when it has elements. `name` starts the message.
Status ValidateFloatView(const TensorView& view, const std::string& name, int min_rank,
                         int max_rank, bool allow_bf16 = false);

// Key and value of the query's dtype.
Status CheckSameDtype(const TensorView& query, const TensorView& key, const TensorView& value);

// Whether a call computes in bfloat16: permitted (kBFloat16), without the
// weights (the exact path has no bf16 variant), where Bf16ComputeAvailable().
bool ComputesBf16(ComputePrecision precision, bool need_weights);

// The bytes of the bf16 copies a bf16 call makes of float32 keys and values
// (KeyValuesInBf16, kernels/block_operands.h): an estimate's scratch.
double Bf16KeyValueBytes(bool bf16_compute, const TensorView& k, const TensorView& v);

// A bfloat16 query (and so key and value) only in a call that computes bf16.
Status CheckBf16Allowed(const TensorView& query, bool bf16_compute);

// Checks query, key and value as float views of rank [min_rank, max_rank],
// key and value of the query's rank with its leading (batch, heads) dims, and
// value's Lk (dim -2) equal to key's. With `grouped_heads`, rank-4 key and
// value may have fewer heads, a divisor of the query's (GQA, MQA). With
// `allow_bf16`, all three may be bfloat16 views instead of float32.
Status CheckQueryKeyValue(const TensorView& query, const TensorView& key, const TensorView& value,
                          int min_rank, int max_rank, bool grouped_heads = false,
                          bool allow_bf16 = false);

// Checks the masks against [B, H, Lq, Lk] and fills the mask fields of
// `problem`. `unbatched` allows key_padding_mask of shape [Lk].
Status ResolveMasks(const AttentionMasks& masks, bool unbatched, AttentionProblem* problem);

// Checks softcap (> 0, finite), ALiBi slopes ([H] or [B, H]) and sink
// logits ([H]), float32 and finite, and fills those fields of `problem`
// (whose batch and heads are set).
Status ResolveScoreOptions(const AttentionScoreOptions& options, AttentionProblem* problem);

// Checks that `scale`, when given, is finite, and returns it or 1/sqrt(dim).
StatusOr<float> ResolveScale(const std::optional<float>& scale, int64_t dim);

// Storage for an output of `shape`: the caller's, from `allocate` (then
// `output` gets only the shape), or `output`'s own data.
float* OutputStorage(const OutputAllocator& allocate, const Shape& shape, Tensor* output);

}  // namespace attn::internal
