// A call as attention-client's commands and bench describe it (CallSpec),
// whatever protocol carries it: request_builder.h turns it into an
// attention.v1 request, oip_call.h into an Open Inference Protocol one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attn/attention.h"
#include "host_array.h"
#include "wire/tensor_codec.h"

namespace attn::client {

// The attention variants (attention.v1's AttentionOptions, OIP's parameters),
// as the commands and the bench take them from their flags.
struct AttentionVariants {
  bool bottom_right = false;  // --causal-alignment bottom_right
  std::optional<int64_t> window_left, window_right;
  std::optional<float> softcap;
  std::optional<HostArray> alibi_slopes, sink_logits;
  bool return_lse = false;
  std::string compute_precision;  // "", "float32" or "bfloat16"
  int64_t num_kv_heads = 0;       // mha's field; the bench's kv heads for attention
  // A packed batch (attention only; not AttentionOptions but the request's
  // own fields): query [total_q, H, D], key/value [total_k, Hkv, *].
  std::vector<int64_t> cu_seqlens_q, cu_seqlens_k;

  bool any() const {
    return bottom_right || window_left || window_right || softcap || alibi_slopes || sink_logits ||
           return_lse || !compute_precision.empty();
  }
};

// Core's view of `v` (its arrays viewed, not copied: `v` must outlive them).
void ApplyVariants(const AttentionVariants& v, AttentionMasks* masks, AttentionScoreOptions* score);
// The same for SDPA, with the packed batch's offsets.
void ApplyVariants(const AttentionVariants& v, ScaledDotProductAttentionOptions* opt);

struct CallSpec {
  std::string op;  // attention | cross | mha
  std::string model;
  bool oip = false;  // --protocol oip: an Open Inference Protocol ModelInfer call
  Encoding encoding = Encoding::kData;
  // The float tensors' wire type (--dtype); half types travel as data.
  wire::WireType dtype = wire::WireType::kFloat32;
  HostArray query;                      // cross: the decoder
  std::optional<HostArray> key, value;  // cross: key is the encoder (value unused)
  std::optional<HostArray> key_padding_mask, attn_bias;
  std::optional<float> scale;  // attention and cross only
  int64_t num_heads = 0;       // mha; 0 takes the model's
  bool causal = false, return_weights = false, per_head_weights = false;
  // Inline projections: q, k, v, out weights then q, k, v, out biases
  // (nn.Linear layout); empty for none. out_* travel for mha only.
  std::vector<HostArray> projections;
  AttentionVariants variants;
};

// --dtype's choices, and the wire type of one ("float32" for anything else).
inline const std::vector<std::string> kDtypeNames = {"float32", "float16", "bfloat16"};
wire::WireType DtypeByName(const std::string& name);
const char* DtypeName(wire::WireType type);

}  // namespace attn::client
