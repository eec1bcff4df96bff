// Core's SDPA options for a case of tests/variants_reference.h: every option
// of the case, the lse always returned. Shared by core's variant and bf16
// tests (the reference itself stays free of core).
#pragma once

#include "attn/attention.h"
#include "variants_reference.h"

namespace attn_test {

inline attn::ScaledDotProductAttentionOptions OptionsFor(const Case& c, const Inputs& in) {
  using attn::TensorView;
  attn::ScaledDotProductAttentionOptions o;
  o.masks.causal = c.causal;
  o.masks.causal_alignment =
      c.bottom_right ? attn::CausalAlignment::kBottomRight : attn::CausalAlignment::kTopLeft;
  o.masks.window_left = c.wl, o.masks.window_right = c.wr;
  if (c.kpm) o.masks.key_padding_mask = TensorView::DenseBool(in.kpm.data(), {c.b, c.lk});
  if (c.bias) o.masks.attn_bias = TensorView::Dense(in.bias.data(), {c.b, c.hq, c.lq, c.lk});
  if (c.softcap > 0) o.score.softcap = c.softcap;
  if (c.alibi) o.score.alibi_slopes = TensorView::Dense(in.alibi.data(), {c.b, c.hq});
  if (c.sink) o.score.sink_logits = TensorView::Dense(in.sink.data(), {c.hq});
  o.score.return_lse = true;
  o.need_weights = c.need_weights;
  return o;
}

}  // namespace attn_test
