#include "call_spec.h"

namespace attn::client {

wire::WireType DtypeByName(const std::string& name) {
  if (name == "float16") return wire::WireType::kFloat16;
  if (name == "bfloat16") return wire::WireType::kBFloat16;
  return wire::WireType::kFloat32;
}

const char* DtypeName(wire::WireType type) {
  if (type == wire::WireType::kFloat16) return "float16";
  if (type == wire::WireType::kBFloat16) return "bfloat16";
  return "float32";
}

void ApplyVariants(const AttentionVariants& v, AttentionMasks* masks,
                   AttentionScoreOptions* score) {
  masks->causal_alignment =
      v.bottom_right ? CausalAlignment::kBottomRight : CausalAlignment::kTopLeft;
  masks->window_left = v.window_left;
  masks->window_right = v.window_right;
  score->softcap = v.softcap;
  if (v.alibi_slopes) {
    score->alibi_slopes = TensorView::Dense(v.alibi_slopes->values.data(), v.alibi_slopes->shape);
  }
  if (v.sink_logits) {
    score->sink_logits = TensorView::Dense(v.sink_logits->values.data(), v.sink_logits->shape);
  }
  score->return_lse = v.return_lse;
}

void ApplyVariants(const AttentionVariants& v, ScaledDotProductAttentionOptions* opt) {
  ApplyVariants(v, &opt->masks, &opt->score);
  opt->cu_seqlens_q = v.cu_seqlens_q;
  opt->cu_seqlens_k = v.cu_seqlens_k;
}

}  // namespace attn::client
